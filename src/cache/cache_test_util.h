// Helpers for src/cache tests: a temporary folder, an Env that can hold
// block-file reads and writes at a gate, tiny-layout blocks whose content is
// a pure function of their key, cache options for a test folder, and the
// set-up the tests share (OpenCache, Seed).
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_CACHE_CACHE_TEST_UTIL_H_
#define KVTIER_CACHE_CACHE_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/load_state.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::cache_internal {

// The state a LoadFuture shares with its load. A test holds it to see
// events no public call shows, such as a future's destructor cancelling
// its load (`cancelled`), so it waits for the event instead of sleeping.
struct LoadFutureAccess {
  static std::shared_ptr<LoadState> State(const LoadFuture& f) { return f.state_; }
};

}  // namespace kvtier::cache_internal

namespace kvtier::cache_test {

using TempDir = ::kvtier::testing::TempDir;

// One gate: while closed, callers of Pass() wait (and are counted) until
// Open().
class Gate {
 public:
  void Close() {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = false;
    }
    cv_.notify_all();
  }
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    if (!closed_) return;
    ++waiting_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return !closed_; });
    --waiting_;
  }
  // Blocks until at least `n` callers wait at the gate.
  void AwaitWaiters(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_ >= n; });
  }
  int waiting() {
    std::lock_guard<std::mutex> lock(mu_);
    return waiting_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool closed_ = false;
  int waiting_ = 0;
};

// A block file whose reads pass `gate` first.
class GatedFile final : public RandomAccessFile {
 public:
  GatedFile(std::unique_ptr<RandomAccessFile> base, Gate* gate)
      : base_(std::move(base)), gate_(gate) {}
  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> dst) override {
    gate_->Pass();
    return base_->ReadAt(offset, dst);
  }
  // Not gated: the read that follows is.
  Status Prefetch(uint64_t offset, uint64_t length) override {
    return base_->Prefetch(offset, length);
  }
  uint64_t size() const override { return base_->size(); }

 private:
  std::unique_ptr<RandomAccessFile> base_;
  Gate* const gate_;
};

// Forwards to another Env; block-file reads (ReadAt of an opened
// *.safetensors: the disk tier has sized its buffer by then, and a miss that
// finds no file never waits) pass `reads`, block-file writes (CreateFile of
// a temp block file) pass `writes`. NowMicros adds `clock_skew_micros` per call while
// `clock_jump_micros` is non-zero (a clock that races ahead).
class GateEnv final : public EnvWrapper {
 public:
  explicit GateEnv(Env* base) : EnvWrapper(base) {}

  Gate reads;
  Gate writes;
  std::atomic<uint64_t> clock_jump_micros{0};

  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path,
                                                        const ReadFileOptions& opts) override {
    auto file = target()->OpenForRead(path, opts);
    if (!file.ok() || !path.ends_with(".safetensors")) return file;
    return std::unique_ptr<RandomAccessFile>(
        std::make_unique<GatedFile>(std::move(file).value(), &reads));
  }
  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& path,
                                                   const WriteFileOptions& opts) override {
    if (path.find(".safetensors.tmp") != std::string::npos) writes.Pass();
    return target()->CreateFile(path, opts);
  }
  uint64_t NowMicros() override {
    const uint64_t jump = clock_jump_micros.load();
    if (jump != 0) skew_ += jump;
    return target()->NowMicros() + skew_.load();
  }

 private:
  std::atomic<uint64_t> skew_{0};
};

inline const ModelLayout& TinyLayout() {
  static const ModelLayout* layout = new ModelLayout(ModelLayout::Preset("tiny").value());
  return *layout;
}

// The block file of `key` (tiny layout), content a pure function of the key.
inline SharedBlock MakeBlock(const BlockKey& key) {
  BlockKey zero{};
  Result<BlockBuffer> buf = MakeBlockFile(TinyLayout(), key, zero, zero, 1'700'000'000);
  if (!buf.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

// Bytes of one tiny block file (all tiny blocks have the same size).
inline uint64_t BlockBytes() {
  static const uint64_t n = MakeBlock(TestBlockKey(0))->size();
  return n;
}

inline std::vector<BlockKey> Keys(uint64_t first, uint64_t count) {
  std::vector<BlockKey> keys;
  for (uint64_t i = first; i < first + count; ++i) keys.push_back(TestBlockKey(i));
  return keys;
}

inline std::vector<SharedBlock> Blocks(const std::vector<BlockKey>& keys) {
  std::vector<SharedBlock> blocks;
  for (const BlockKey& k : keys) blocks.push_back(MakeBlock(k));
  return blocks;
}

// A host-only cache holding `blocks` tiny blocks.
inline CacheOptions HostOnlyOptions(uint64_t blocks) {
  CacheOptions o;
  o.host.capacity_bytes = blocks * BlockBytes();
  o.layout_signature = TinyLayout().Signature();
  o.load_threads = 2;
  return o;
}

// A cache on folder `dir` whose host tier holds `blocks` tiny blocks.
inline CacheOptions DiskOptions(const std::string& dir, uint64_t blocks) {
  CacheOptions o = HostOnlyOptions(blocks);
  DiskTierOptions d;
  d.dir = dir;
  d.writer_threads = 2;
  d.read_threads = 2;
  d.queue_max_bytes = 1 << 20;
  d.reconcile_on_open = false;
  d.touch_flush_interval_ms = 50;
  o.disk = d;
  return o;
}

// Opens a cache with `o` on `env`; a cache that does not open fails the
// test and comes back null.
inline std::unique_ptr<TieredCache> OpenCache(CacheOptions o, Env* env = Env::Default()) {
  Result<std::unique_ptr<TieredCache>> c = TieredCache::Open(std::move(o), env);
  EXPECT_THAT(c, ::kvtier::testing::IsOk());
  return c.ok() ? std::move(c).value() : nullptr;
}

// Writes `keys` into the folder `dir` and closes: they are only on disk.
inline void Seed(const std::string& dir, const std::vector<BlockKey>& keys) {
  auto writer = TieredCache::Open(DiskOptions(dir, keys.size() + 1), Env::Default());
  ASSERT_THAT(writer, ::kvtier::testing::IsOk());
  ASSERT_THAT((*writer)->Store(keys, Blocks(keys)), ::kvtier::testing::IsOk());
  ASSERT_THAT((*writer)->Close(), ::kvtier::testing::IsOk());
}

// Buffers for `n` blocks, and spans over them.
struct Buffers {
  explicit Buffers(size_t n, size_t bytes = 0)
      : storage(n, std::vector<std::byte>(bytes != 0 ? bytes : BlockBytes())) {
    for (auto& b : storage) spans.push_back(std::span<std::byte>(b));
  }
  std::vector<std::vector<std::byte>> storage;
  std::vector<std::span<std::byte>> spans;
};

// OK iff buffer holds exactly the block file of `key` in its first `n` bytes.
inline Status CheckLoaded(const BlockKey& key, std::span<const std::byte> buffer, uint64_t n) {
  if (n != BlockBytes()) {
    return Status::Corruption("loaded " + std::to_string(n) + " bytes, expected " +
                              std::to_string(BlockBytes()));
  }
  return CheckBlockFile(buffer.first(n), TinyLayout(), key);
}

}  // namespace kvtier::cache_test

#endif  // KVTIER_CACHE_CACHE_TEST_UTIL_H_
