// TieredBackingStore: a TieredCache as the lower tiers of a BlockPool. It
// answers the pool's BlockBackingStore (block_pool.h) with the cache's
// Match, Store and LoadShared (a hit is handed over without a copy, as it
// lands); docs/tiers.md ("The restore path") shows the mapping.
//
// Ownership: the cache is not owned; it must outlive the adapter, and the
// adapter every pool using it (a pool waits for its loads when destroyed).
// Thread safety: every method may be called from any thread, as
// BlockBackingStore requires; one mutex (in Inflight,
// tiered_backing_store.cc) guards the list of loads in flight.
#ifndef KVTIER_TIERED_BACKING_STORE_H_
#define KVTIER_TIERED_BACKING_STORE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {

struct TieredBackingStoreCounters {
  uint64_t match_calls = 0;
  uint64_t stored_blocks = 0;  // accepted by TieredCache::Store
  uint64_t store_errors = 0;   // refused by it
  uint64_t load_calls = 0;
  uint64_t loaded_host = 0;    // blocks served by the host tier
  uint64_t loaded_disk = 0;    // blocks served by the disk tier
  uint64_t loaded_remote = 0;  // blocks served by the remote (Redis) tier
  uint64_t load_misses = 0;    // keys asked for and not served
  uint64_t loaded_bytes = 0;   // block file bytes handed to the pool
};

class TieredBackingStore final : public BlockBackingStore {
 public:
  // InvalidArgument if `cache` is null.
  static Result<std::unique_ptr<TieredBackingStore>> Create(TieredCache* cache);
  ~TieredBackingStore() override;

  size_t Match(std::span<const BlockKey> keys) override;
  Status Store(const BlockKey& key, SharedBlock block) override;
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override;
  // LoadShared with SharedLoadOptions::tensor_masks = masks: the disk tier
  // reads only the selected tensors (verified), nothing partial is promoted.
  void LoadTensors(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                   BlockArrivalCallback on_block) override;

  TieredBackingStoreCounters counters() const;

 private:
  struct Counters {
    std::atomic<uint64_t> match_calls{0}, stored_blocks{0}, store_errors{0}, load_calls{0},
        loaded_host{0}, loaded_disk{0}, loaded_remote{0}, load_misses{0}, loaded_bytes{0};
  };

  // The loads whose callbacks may still run, under their mutex. Defined in
  // the .cc: a public header cannot include core's annotated Mutex.
  struct Inflight;

  explicit TieredBackingStore(TieredCache* cache);

  TieredCache* const cache_;
  Counters counters_;
  const std::unique_ptr<Inflight> inflight_;
};

}  // namespace kvtier

#endif  // KVTIER_TIERED_BACKING_STORE_H_
