// PagedPool: BlockPool in paged mode (see include/kvtier/block_pool.h).
//
// State, all under mu_:
//   - arena_/alloc_: slot memory and refcounts. A slot's refcount is the
//     number of sequences whose block table holds it (plus 0: a free slot);
//   - slots_: per slot, the key of the full block it holds (once published)
//     and whether it is in the prefix index and has been stored;
//   - index_: BlockKey → slot for published blocks. A slot in the index is
//     immutable: a sequence that must write into it copies it first (copy on
//     write). With retain_freed_blocks, an indexed slot whose refcount drops
//     to 0 stays indexed ("cached") until the allocator reclaims it;
//   - seqs_: live sequences; offloaded_: evicted ones awaiting restore.
//
// Lower-tier calls never run under mu_: operations collect block files to
// store in pending_stores_ and the public method stores them after
// unlocking; loads are started unlocked and finished by loader_ (one thread,
// started on first use), which decodes into slots that only the loading
// sequence holds. A loading sequence is never evicted and refuses other calls
// until WaitLoaded.
//
// Thread safety: as BlockPool. Lock order: mu_ only (the store and the
// SlotMemory are called without it or take their own locks).
#ifndef KVTIER_POOL_PAGED_POOL_H_
#define KVTIER_POOL_PAGED_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/block_allocator.h"
#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "pool/pool_geometry.h"

namespace kvtier::pool_internal {

class PagedPool final : public BlockPool {
 public:
  // REQUIRES: options validated; geo from options.layout.
  PagedPool(PoolOptions options, PoolGeometry geo, KeyChain chain);
  ~PagedPool() override;

  Result<size_t> Allocate(uint64_t seq, std::span<const uint32_t> tokens) override;
  Result<AllocateInfo> AllocateAsync(uint64_t seq, std::span<const uint32_t> tokens) override;
  Result<size_t> WaitLoaded(uint64_t seq) override;
  Status AppendToken(uint64_t seq, uint32_t layer, size_t pos,
                     std::span<const std::span<const std::byte>> states) override;
  Status AppendHeadRange(uint64_t seq, uint32_t layer, uint32_t head, size_t pos,
                         std::span<const std::span<const std::byte>> states) override;
  Status AppendLayer(uint64_t seq, uint32_t layer, size_t pos, size_t count,
                     std::span<const std::span<const std::byte>> states) override;
  Status Advance(uint64_t seq, std::span<const uint32_t> tokens) override;
  Status Rollback(uint64_t seq, size_t length) override;
  Status Remove(uint64_t seq) override;
  void SetActiveSequences(std::span<const uint64_t> seqs) override;
  Status SetPriority(uint64_t seq, uint8_t priority) override;
  Status Evict(uint64_t seq) override;
  std::vector<uint64_t> DrainEvicted() override;
  bool HasSequence(uint64_t seq) const override;
  Result<size_t> Length(uint64_t seq) const override;
  Result<std::vector<uint32_t>> BlockTable(uint64_t seq) const override;
  Result<std::byte*> SlotAddress(uint32_t slot) const override;
  SlotTensorGeometry TensorGeometry(uint32_t layer, uint32_t state) const override;
  Result<std::shared_ptr<const PackedLayerView>> PackedLayer(uint64_t seq, uint32_t layer) override;
  uint32_t RefCount(uint32_t slot) const override;
  size_t FreeCount() const override;
  PoolStats GetStats() const override;

 private:
  struct Sequence {
    std::vector<uint32_t> tokens;  // committed token ids; size() is the length
    std::vector<uint32_t> slots;   // block table
    std::vector<BlockKey> keys;    // keys of the committed full blocks
    std::vector<size_t> written;   // per layer: K/V present for [0, written)
    std::vector<std::shared_ptr<const PackedLayerView>> packed;  // per layer
    uint8_t priority = 0;
    uint64_t last_access = 0;
    uint64_t order = 0;  // allocation order (FIFO)
    bool loading = false;
  };

  struct SlotInfo {
    bool keyed = false;    // holds the full block `key`
    bool indexed = false;  // index_[key] == this slot
    bool stored = false;   // handed to the store (or loaded from it)
    BlockKey key;
  };

  // An evicted sequence.
  struct Offloaded {
    std::vector<uint32_t> tokens;
    std::vector<BlockKey> keys;  // its full blocks
    // Full blocks kept in host memory: no store, a store still in flight, or
    // a store that failed.
    std::unordered_map<BlockKey, SharedBlock, BlockKeyHash> held;
    std::vector<std::byte> partial;  // the partial last block's slot bytes
    uint8_t priority = 0;
  };

  struct PendingStore {
    BlockKey key;
    SharedBlock file;
    uint32_t slot = 0;
    std::optional<uint64_t> offloaded_seq;  // set when this store offloads `seq`
  };

  struct LoadJob {
    uint64_t seq = 0;
    size_t first_block = 0;  // block index of keys[0] in the sequence
    std::vector<BlockKey> keys;
    std::vector<uint32_t> slots;
    std::future<std::vector<SharedBlock>> future;
  };

  enum class Release : uint8_t {
    kKeepCached,  // an indexed block stays cached (if retain_freed_blocks)
    kDropEntry,   // an indexed block leaves the index when its last user does
  };

  // Appends (paged_pool.cc).
  Status Append(uint64_t seq, AppendRequest req);
  Status MakeWritableLocked(uint64_t seq_id, Sequence& seq, size_t block) REQUIRES(mu_);

  // Slots (paged_pool.cc).
  Result<uint32_t> AllocateSlotLocked(uint64_t protect) REQUIRES(mu_);
  void ReleaseSlotLocked(uint32_t slot, Release mode) REQUIRES(mu_);
  // The slot no longer holds a keyed block: leaves the index, not cached.
  void ForgetBlockLocked(uint32_t slot) REQUIRES(mu_);
  void IndexLocked(uint32_t slot, const BlockKey& key) REQUIRES(mu_);
  Status NotFoundLocked(uint64_t seq) const REQUIRES(mu_);
  Result<Sequence*> FindReadyLocked(uint64_t seq) REQUIRES(mu_);
  void TruncateLocked(Sequence& seq, size_t length) REQUIRES(mu_);
  void PublishLocked(Sequence& seq, size_t block) REQUIRES(mu_);
  void InvalidatePackedLocked(Sequence& seq) REQUIRES(mu_);

  // Lower tiers (paged_pool_tiers.cc).
  Result<SharedBlock> EncodeSlotLocked(uint32_t slot, size_t block_index,
                                       const std::vector<BlockKey>& keys) REQUIRES(mu_);
  // Copies a verified block file's data into `slot`; false if the file is not
  // the block `key`.
  bool DecodeIntoSlot(const BlockBuffer& file, const BlockKey& key, std::byte* slot_addr);
  void QueueStoreLocked(uint32_t slot, size_t block_index, const std::vector<BlockKey>& keys,
                        std::optional<uint64_t> offloaded_seq) REQUIRES(mu_);
  std::vector<PendingStore> TakePendingStoresLocked() REQUIRES(mu_);
  void FlushStores(std::vector<PendingStore> stores) EXCLUDES(mu_);
  bool EvictOneLocked(uint64_t protect) REQUIRES(mu_);
  void OffloadLocked(uint64_t id, Sequence& seq) REQUIRES(mu_);
  void FinishLoadLocked(LoadJob& job, size_t good, uint64_t bytes) REQUIRES(mu_);
  // Removes an offload record and returns it.
  Offloaded TakeOffloadedLocked(std::unordered_map<uint64_t, Offloaded>::iterator it) REQUIRES(mu_);
  void LoaderLoop();

  const PoolOptions options_;
  const PoolGeometry geo_;
  const KeyChain chain_;
  const std::string signature_;
  Env* const env_;

  mutable std::mutex mu_;
  std::condition_variable loaded_cv_;  // a load finished
  std::condition_variable jobs_cv_;    // jobs_ grew or stopping_
  SlotArena arena_ GUARDED_BY(mu_);
  BlockAllocator alloc_ GUARDED_BY(mu_);
  std::vector<SlotInfo> slots_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> index_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Sequence> seqs_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Offloaded> offloaded_ GUARDED_BY(mu_);
  std::unordered_set<uint64_t> active_ GUARDED_BY(mu_);
  std::vector<uint64_t> evicted_ids_ GUARDED_BY(mu_);
  std::vector<PendingStore> pending_stores_ GUARDED_BY(mu_);
  std::deque<LoadJob> jobs_ GUARDED_BY(mu_);
  std::thread loader_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  uint64_t next_order_ GUARDED_BY(mu_) = 0;
  PoolStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_PAGED_POOL_H_
