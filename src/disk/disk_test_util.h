// Helpers for disk-tier tests (unit tests in src/disk/ and the crash, fault
// and multi-process tests in tests/): a temporary folder, blocks whose
// content is a pure function of their key, and small tier options.
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_DISK_DISK_TEST_UTIL_H_
#define KVTIER_DISK_DISK_TEST_UTIL_H_

#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
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

// Options for a test folder: tiny layout, no background reconcile unless
// asked, short flush interval.
inline DiskTierOptions TestOptions(const std::string& dir,
                                   const ModelLayout& layout = TinyLayout()) {
  DiskTierOptions o;
  o.dir = dir;
  o.layout_signature = layout.Signature();
  o.writer_threads = 2;
  o.read_threads = 2;
  o.queue_max_bytes = 1 << 20;
  o.reconcile_on_open = false;
  o.touch_flush_interval_ms = 50;
  return o;
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
class ControlledEnv final : public Env {
 public:
  explicit ControlledEnv(Env* base) : base_(base) {}

  // Moves NowUnixMicros() forward by `us`.
  void AdvanceUnix(int64_t us) { offset_us_ += us; }
  // FreeSpace() returns fn() (no function: ask the base Env).
  void SetFreeSpace(std::function<uint64_t()> fn) {
    std::lock_guard<std::mutex> lock(mu_);
    free_fn_ = std::move(fn);
  }
  int64_t free_space_calls() const { return free_calls_.load(); }

  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& p,
                                                        const ReadFileOptions& o) override {
    return base_->OpenForRead(p, o);
  }
  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& p,
                                                   const WriteFileOptions& o) override {
    return base_->CreateFile(p, o);
  }
  Status RenameFile(const std::string& a, const std::string& b) override {
    return base_->RenameFile(a, b);
  }
  Status RemoveFile(const std::string& p) override { return base_->RemoveFile(p); }
  Result<FileInfo> Stat(const std::string& p) override { return base_->Stat(p); }
  Status Chmod(const std::string& p, uint32_t m) override { return base_->Chmod(p, m); }
  Status CreateDir(const std::string& p, uint32_t m) override { return base_->CreateDir(p, m); }
  Status RemoveDir(const std::string& p) override { return base_->RemoveDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override {
    return base_->ListDir(p);
  }
  Status SyncDir(const std::string& p) override { return base_->SyncDir(p); }
  Status SyncFileSystem(const std::string& p) override { return base_->SyncFileSystem(p); }
  Result<uint64_t> FreeSpace(const std::string& p) override {
    ++free_calls_;
    std::function<uint64_t()> fn;
    {
      std::lock_guard<std::mutex> lock(mu_);
      fn = free_fn_;
    }
    if (fn) return fn();
    return base_->FreeSpace(p);
  }
  uint64_t NowMicros() override { return base_->NowMicros(); }
  // Strictly increasing, so every stored block has its own access time.
  int64_t NowUnixMicros() override {
    int64_t now = base_->NowUnixMicros() + offset_us_.load();
    int64_t prev = last_.load();
    while (true) {
      int64_t next = now > prev ? now : prev + 1;
      if (last_.compare_exchange_weak(prev, next)) return next;
    }
  }
  void SleepForMicros(uint64_t us) override { base_->SleepForMicros(us); }
  int ProcessId() override { return base_->ProcessId(); }
  bool ProcessAlive(int pid) override { return base_->ProcessAlive(pid); }
  std::thread StartThread(std::function<void()> fn) override {
    return base_->StartThread(std::move(fn));
  }

 private:
  Env* const base_;
  std::atomic<int64_t> offset_us_{0};
  std::atomic<int64_t> last_{0};
  std::mutex mu_;
  std::function<uint64_t()> free_fn_;  // guarded by mu_
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
