// Helpers for disk-tier tests (unit tests in src/disk/ and the crash, fault
// and multi-process tests in tests/): a temporary folder, blocks whose
// content is a pure function of their key, and small tier options.
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_DISK_DISK_TEST_UTIL_H_
#define KVTIER_DISK_DISK_TEST_UTIL_H_

#include <stdlib.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "disk/kill_points.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "synth/block_generator.h"
#include "testing/temp_dir.h"

namespace kvtier::disk_test {

using TempDir = ::kvtier::testing::TempDir;

inline const ModelLayout& TinyLayout() {
  static const ModelLayout* layout = new ModelLayout(ModelLayout::Preset("tiny").value());
  return *layout;
}

// The block file of TestBlockKey(i) for `layout`.
inline SharedBlock MakeTestBlock(const ModelLayout& layout, const BlockKey& key) {
  BlockKey zero{};
  Result<BlockBuffer> buf = MakeBlockFile(layout, key, zero, zero, 1'700'000'000);
  if (!buf.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

inline SharedBlock MakeTestBlock(uint64_t i) {
  return MakeTestBlock(TinyLayout(), TestBlockKey(i));
}

// Options for a test folder: tiny layout, no reconcile (background or at
// Open()) unless asked, short flush interval.
inline DiskTierOptions TestOptions(const std::string& dir,
                                   const ModelLayout& layout = TinyLayout()) {
  DiskTierOptions o;
  o.dir = dir;
  o.layout_signature = layout.Signature();
  o.writer_threads = 2;
  o.read_threads = 2;
  o.queue_max_bytes = 1 << 20;
  o.reconcile_on_open = false;
  o.open_reconcile_entries = 0;  // nor any part of it at Open(), unless asked
  o.touch_flush_interval_ms = 50;
  return o;
}

// What a file of `bytes` takes from the disk under `dir` (st_blocks × 512),
// as every limit counts it: a probe file written and removed.
inline uint64_t AllocatedOnDisk(const std::string& dir, uint64_t bytes) {
  const std::string probe = dir + "/.allocation-probe";
  {
    std::ofstream f(probe, std::ios::binary);
    f << std::string(bytes, 'x');
  }
  auto info = Env::Default()->Stat(probe);
  std::filesystem::remove(probe);
  return info.ok() && info->allocated_bytes > 0 ? info->allocated_bytes : bytes;
}

// Sum of the sizes of every regular file under <dir>/blocks (temp files
// included).
inline uint64_t BlockFolderBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir + "/blocks", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += it->file_size(ec2);
  }
  return total;
}

// An Env that forwards to another and lets a test move the wall clock,
// make every wall-clock reading distinct (so LRU order is exact), and fake
// the free disk space.
class ControlledEnv final : public EnvWrapper {
 public:
  explicit ControlledEnv(Env* base) : EnvWrapper(base) {}

  // Moves NowUnixMicros() forward by `us`.
  void AdvanceUnix(int64_t us) { offset_us_ += us; }
  // A wall-clock step by `us` (< 0: back, as NTP or an operator sets a
  // clock that ran ahead right): readings go on increasing from the new
  // time.
  void StepUnix(int64_t us) {
    offset_us_ += us;
    last_ = 0;
  }
  // FreeSpace() returns fn() (no function: ask the base Env).
  void SetFreeSpace(std::function<uint64_t()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    free_fn_ = std::move(fn);
  }
  int64_t free_space_calls() const { return free_calls_.load(); }
  // Calls fn(path) before each OpenForRead (no function: nothing).
  void SetOpenHook(std::function<void(const std::string&)> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    open_fn_ = std::move(fn);
  }
  // ProcessAlive() says false for every pid, as it does for a writer in
  // another pid namespace.
  void SetEveryProcessDead() { every_process_dead_ = true; }
  // Files cannot be locked, as on a file system without advisory locks:
  // OpenForRead with a lock fails with ENOLCK, CreateFile ignores `lock`.
  void SetNoLocks() { no_locks_ = true; }

  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p,
                                                        const ReadFileOptions& o) override {
    std::function<void(const std::string&)> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = open_fn_;
    }
    if (fn) fn(p);
    if (no_locks_.load() && o.lock != FileLock::kNone) {
      return Status(StatusCode::kIOError, "lock " + p + ": no locks here (test)", ENOLCK);
    }
    return target()->OpenForRead(p, o);
  }
  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& p,
                                                   const WriteFileOptions& o) override {
    WriteFileOptions unlocked = o;
    if (no_locks_.load()) unlocked.lock = false;
    return target()->CreateFile(p, unlocked);
  }
  // The disk FreeSpace() simulates counts file lengths (BlockFolderBytes):
  // so does what Stat() says a file takes.
  Result<FileInfo> Stat(const std::string& p) override {
    Result<FileInfo> info = target()->Stat(p);
    if (info.ok() && info->type == FileType::kRegular) info->allocated_bytes = info->size;
    return info;
  }
  Result<uint64_t> FreeSpace(const std::string& p) override {
    ++free_calls_;
    std::function<uint64_t()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = free_fn_;
    }
    if (fn) return fn();
    return target()->FreeSpace(p);
  }
  // Strictly increasing, so every stored block has its own access time.
  int64_t NowUnixMicros() override {
    int64_t now = target()->NowUnixMicros() + offset_us_.load();
    int64_t prev = last_.load();
    while (true) {
      int64_t next = now > prev ? now : prev + 1;
      if (last_.compare_exchange_weak(prev, next)) return next;
    }
  }
  bool ProcessAlive(int pid) override {
    return !every_process_dead_.load() && target()->ProcessAlive(pid);
  }

 private:
  std::atomic<int64_t> offset_us_{0};
  std::atomic<int64_t> last_{0};
  std::mutex mu_;
  std::function<uint64_t()> free_fn_;                // guarded by mu_
  std::function<void(const std::string&)> open_fn_;  // guarded by mu_
  std::atomic<bool> every_process_dead_{false};
  std::atomic<bool> no_locks_{false};
  std::atomic<int64_t> free_calls_{0};
};

// Blocks every writer at a kill point until Release(); counts arrivals.
class Gate {
 public:
  disk::KillHook Hook(DiskKillPoint at) {
    return [this, at](DiskKillPoint p) {
      if (p != at) return;
      std::unique_lock<std::mutex> lock(mu_);
      ++arrived_;
      cv_.notify_all();
      cv_.wait(lock, [&] { return open_; });
    };
  }
  void WaitArrived(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return arrived_ >= n; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  bool open_ = false;
};

inline std::string BlockFilePath(const std::string& dir, const BlockKey& key) {
  std::string hex = key.Hex();
  return dir + "/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors";
}

}  // namespace kvtier::disk_test

#endif  // KVTIER_DISK_DISK_TEST_UTIL_H_
