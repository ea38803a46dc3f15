// TieredBackingStore: TieredCache behind the BlockBackingStore interface.
#include "kvtier/tiered_backing_store.h"

#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"

namespace kvtier {

struct TieredBackingStore::Inflight {
  Mutex mu;
  // Finished loads are dropped as new ones start.
  std::vector<LoadFuture> futures GUARDED_BY(mu);
};

TieredBackingStore::TieredBackingStore(TieredCache* cache)
    : cache_(cache), inflight_(std::make_unique<Inflight>()) {}

Result<std::unique_ptr<TieredBackingStore>> TieredBackingStore::Create(TieredCache* cache) {
  if (cache == nullptr) return Status::InvalidArgument("TieredBackingStore: cache is null");
  return std::unique_ptr<TieredBackingStore>(new TieredBackingStore(cache));
}

TieredBackingStore::~TieredBackingStore() {
  // Each future waits for its load's callbacks (all done by now unless a
  // pool outlived this adapter): outside the lock.
  std::vector<LoadFuture> futures;
  {
    MutexLock lock(&inflight_->mu);
    futures.swap(inflight_->futures);
  }
  futures.clear();
}

size_t TieredBackingStore::Match(std::span<const BlockKey> keys) {
  counters_.match_calls.fetch_add(1, std::memory_order_relaxed);
  return cache_->Match(keys).blocks;
}

Status TieredBackingStore::Store(const BlockKey& key, SharedBlock block) {
  const BlockKey keys[1] = {key};
  const SharedBlock blocks[1] = {std::move(block)};
  Status s = cache_->Store(keys, blocks);
  (s.ok() ? counters_.stored_blocks : counters_.store_errors)
      .fetch_add(1, std::memory_order_relaxed);
  return s;
}

void TieredBackingStore::Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) {
  LoadTensors(keys, {}, std::move(on_block));
}

void TieredBackingStore::LoadTensors(std::span<const BlockKey> keys,
                                     std::span<const TensorMask> masks,
                                     BlockArrivalCallback on_block) {
  counters_.load_calls.fetch_add(1, std::memory_order_relaxed);
  auto deliver = std::make_shared<BlockArrivalCallback>(std::move(on_block));
  SharedLoadOptions options;
  options.tensor_masks.assign(masks.begin(), masks.end());
  options.on_block = [this, deliver](size_t i, const LoadedBlock& b) {
    Counters& c = counters_;
    if (b.tier == CacheTier::kNone || b.block == nullptr) {
      c.load_misses.fetch_add(1, std::memory_order_relaxed);
      (*deliver)(i, nullptr);
      return;
    }
    std::atomic<uint64_t>& served = b.tier == CacheTier::kHost   ? c.loaded_host
                                    : b.tier == CacheTier::kDisk ? c.loaded_disk
                                                                 : c.loaded_remote;
    served.fetch_add(1, std::memory_order_relaxed);
    c.loaded_bytes.fetch_add(b.bytes, std::memory_order_relaxed);
    (*deliver)(i, b.block);
  };
  Result<LoadFuture> future = cache_->LoadShared(keys, std::move(options));
  if (!future.ok()) {
    // The cache is closed: no callback ran, every key is a miss.
    counters_.load_misses.fetch_add(keys.size(), std::memory_order_relaxed);
    for (size_t i = 0; i < keys.size(); ++i) (*deliver)(i, nullptr);
    return;
  }
  MutexLock lock(&inflight_->mu);
  // A finished load's future holds nothing (the callback had the blocks).
  std::erase_if(inflight_->futures, [](const LoadFuture& f) { return f.Ready(); });
  inflight_->futures.push_back(std::move(future).value());
}

TieredBackingStoreCounters TieredBackingStore::counters() const {
  const Counters& c = counters_;
  TieredBackingStoreCounters out;
  out.match_calls = c.match_calls.load(std::memory_order_relaxed);
  out.stored_blocks = c.stored_blocks.load(std::memory_order_relaxed);
  out.store_errors = c.store_errors.load(std::memory_order_relaxed);
  out.load_calls = c.load_calls.load(std::memory_order_relaxed);
  out.loaded_host = c.loaded_host.load(std::memory_order_relaxed);
  out.loaded_disk = c.loaded_disk.load(std::memory_order_relaxed);
  out.loaded_remote = c.loaded_remote.load(std::memory_order_relaxed);
  out.load_misses = c.load_misses.load(std::memory_order_relaxed);
  out.loaded_bytes = c.loaded_bytes.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kvtier
