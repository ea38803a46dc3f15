// TieredBackingStore: a TieredCache as the lower tiers of a BlockPool.
//
// The pool sees its lower tiers as a BlockBackingStore (block_pool.h); this
// adapter answers it with a TieredCache (tiered_cache.h):
//
//   Match(keys)  → TieredCache::Match(keys).blocks (in-memory index; disk
//                  hints checked against the disk tier's index);
//   Store(k, b)  → TieredCache::Store({k}, {b}) with the cache's policy;
//   Load(keys)   → TieredCache::Load into block buffers sized from the
//                  layout. Host hits are copied before Load returns, disk
//                  reads run on the cache's load threads; the returned future
//                  finishes the load when the pool's loader waits on it. A
//                  block larger than the estimate (a header longer than this
//                  writer's) is read again with a buffer of the largest size
//                  a block file of the layout can have.
//
// Counters say which tier served each block, so an engine can report where
// a prefix came from.
//
// Ownership: the cache is not owned; it must outlive the adapter and every
// future Load returned. Thread safety: every method may be called from any
// thread, as BlockBackingStore requires.
#ifndef KVTIER_TIERED_BACKING_STORE_H_
#define KVTIER_TIERED_BACKING_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {

struct TieredBackingStoreCounters {
  uint64_t match_calls = 0;
  uint64_t stored_blocks = 0;  // accepted by TieredCache::Store
  uint64_t store_errors = 0;   // refused by it
  uint64_t load_calls = 0;
  uint64_t loaded_host = 0;       // blocks served by the host tier
  uint64_t loaded_disk = 0;       // blocks served by the disk tier
  uint64_t load_misses = 0;       // keys asked for and not served
  uint64_t loaded_bytes = 0;      // block file bytes handed to the pool
  uint64_t oversize_retries = 0;  // blocks read again with a larger buffer
};

class TieredBackingStore final : public BlockBackingStore {
 public:
  // InvalidArgument if `cache` is null or `layout` is invalid.
  static Result<std::unique_ptr<TieredBackingStore>> Create(TieredCache* cache,
                                                            const ModelLayout& layout);

  size_t Match(std::span<const BlockKey> keys) override;
  Status Store(const BlockKey& key, SharedBlock block) override;
  std::future<std::vector<SharedBlock>> Load(std::vector<BlockKey> keys) override;

  TieredBackingStoreCounters counters() const;
  // Bytes of the buffer each block is first loaded into.
  size_t load_buffer_bytes() const { return estimate_bytes_; }

 private:
  struct Counters {
    std::atomic<uint64_t> match_calls{0}, stored_blocks{0}, store_errors{0}, load_calls{0},
        loaded_host{0}, loaded_disk{0}, load_misses{0}, loaded_bytes{0}, oversize_retries{0};
  };

  TieredBackingStore(TieredCache* cache, size_t estimate_bytes, size_t max_bytes);
  // Waits for `future` (loading `keys` into `bufs`) and turns the outcome
  // into block files, retrying too-small buffers with max_bytes_.
  std::vector<SharedBlock> Finish(std::vector<BlockKey> keys, std::vector<BlockBuffer> bufs,
                                  Result<LoadFuture> future);

  TieredCache* const cache_;
  const size_t estimate_bytes_;  // a block file of this layout, plus slack
  const size_t max_bytes_;       // the largest a valid block file of it can be
  Counters counters_;
};

}  // namespace kvtier

#endif  // KVTIER_TIERED_BACKING_STORE_H_
