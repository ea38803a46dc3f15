// PagedPool: the BlockPool (see include/kvtier/block_pool.h).
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
// Layer kinds (docs/pool.md): a recurrent layer's latest state lives in
// the sequence (Sequence::recurrent) until Advance commits it into the slot
// of the block holding the new last token; a state set at a block boundary
// goes into that block's slot at once (its snapshot). A restore asks the
// store only for the tensors its prefix needs (PoolGeometry::NeededTensors);
// a slot so loaded records which (SlotInfo::loaded), is never indexed or
// stored, and bounds how far the sequence can roll back (CanHoldLocked).
// When every per-token layer is sliding, blocks out of every window leave
// the block table (kFreedSlot).
//
// Lower-tier calls, block encoding and key hashing never run under mu_:
// operations collect blocks to store in pending_stores_ (pinning their
// slot with a reference, or, when a sequence is evicted to free its slots,
// copying the slot's bytes) and the public method encodes and stores them
// after unlocking; Advance hashes the keys of the blocks it fills before
// taking the lock. Loads are started unlocked; the store calls back per
// block, and the callback copies the block into its slot (only the loading
// sequence holds it) without the lock, then takes the lock to record it.
// The last block to arrive finishes the load. A loading sequence is never
// evicted and refuses most calls until WaitLoaded.
//
// Thread safety: as BlockPool. Lock order: mu_ only (the store, the
// SlotMemory and the header verifier are called without it or take their
// own locks).
#ifndef KVTIER_POOL_PAGED_POOL_H_
#define KVTIER_POOL_PAGED_POOL_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/block_verifier.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "pool/block_allocator.h"
#include "pool/pool_base.h"
#include "pool/pool_geometry.h"
#include "pool/slot_arena.h"

namespace kvtier::pool_internal {

class PagedPool final : public PoolBase<BlockPool> {
 public:
  // REQUIRES: options validated; geo from options.layout.
  PagedPool(PoolOptions options, PoolGeometry geo, KeyChain chain);
  ~PagedPool() override;

  // Allocates and faults in every slot (PoolOptions::prefault_slots).
  Status PrefaultSlots();
  // Bytes of bookkeeping per slot, besides the slot itself (for the size
  // check before construction).
  static constexpr uint64_t kBookkeepingBytesPerSlot = 96;

  Result<size_t> Allocate(uint64_t seq, std::span<const uint32_t> tokens) override;
  Result<AllocateInfo> AllocateAsync(uint64_t seq, std::span<const uint32_t> tokens) override;
  Result<size_t> WaitLoaded(uint64_t seq) override;
  Result<size_t> WaitTokensLoaded(uint64_t seq, size_t tokens) override;
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
  Result<std::shared_ptr<const PackedLayerView>> RecurrentState(uint64_t seq,
                                                                uint32_t layer) override;
  uint32_t RefCount(uint32_t slot) const override;
  size_t FreeCount() const override;
  PoolStats GetStats() const override;

 private:
  struct LoadJob;

  // A recurrent layer's latest state, when it is past the committed
  // length (pos > tokens.size()); else the committed state is in the slot
  // of block (length - 1) / T.
  struct RecurrentLive {
    BlockBuffer state;  // the layer's states, concatenated in order
    size_t pos = 0;
  };

  struct Sequence {
    std::vector<uint32_t> tokens;          // committed token ids; size() is the length
    std::vector<uint32_t> slots;           // block table; kFreedSlot past every window
    size_t freed = 0;                      // leading blocks freed (all kFreedSlot)
    std::vector<RecurrentLive> recurrent;  // per layer (used by recurrent ones)
    // Per uncommitted block, per layer: SetRecurrentState wrote the state
    // after the block's last token into its slot.
    std::vector<std::vector<bool>> snapshots;
    std::vector<BlockKey> keys;   // keys of the committed full blocks
    std::vector<size_t> written;  // per layer: K/V present for [0, written)
    std::vector<std::shared_ptr<const PackedLayerView>> packed;  // per layer
    uint8_t priority = 0;
    uint64_t last_access = 0;
    uint64_t order = 0;  // allocation order (FIFO)
    bool loading = false;
    std::shared_ptr<LoadJob> load;  // the load in flight, if any
  };

  struct SlotInfo {
    bool keyed = false;    // holds the full block `key`
    bool indexed = false;  // index_[key] == this slot
    bool stored = false;   // handed to the store (or loaded from it)
    BlockKey key;
    // Empty: every tensor holds the block. Else (a restore's masked load)
    // which tensors do; such a slot is never indexed or stored.
    TensorMask loaded;
  };

  // An evicted sequence.
  struct Offloaded {
    std::vector<uint32_t> tokens;
    std::vector<BlockKey> keys;  // its full blocks
    // Full blocks kept in host memory as raw slot bytes: no store, a store
    // still in flight, or a store that failed.
    std::unordered_map<BlockKey, std::shared_ptr<const BlockBuffer>, BlockKeyHash> held;
    std::vector<std::byte> partial;  // the partial last block's slot bytes
    uint8_t priority = 0;
  };

  // A full block to encode and store after unlocking. Its bytes are either
  // a slot the pool pins with a reference until then (`pinned`), or a copy
  // of them (`raw`, when the slot is needed at once: eviction).
  struct PendingStore {
    BlockKey key;
    BlockKey parent;
    uint32_t slot = 0;
    bool pinned = false;
    const std::byte* slot_addr = nullptr;  // pinned: the slot's bytes
    std::shared_ptr<const BlockBuffer> raw;
    std::optional<uint64_t> offloaded_seq;  // set when this store offloads `seq`
  };

  // One Allocate's blocks coming from the store. The slots belong to the
  // loading sequence alone, so arriving blocks are copied into `dst`
  // without the lock.
  struct LoadJob {
    uint64_t seq = 0;
    size_t first_block = 0;  // block index of keys[0] in the sequence
    std::vector<BlockKey> keys;
    std::vector<uint32_t> slots;  // kFreedSlot: nothing needed, not loaded
    std::vector<std::byte*> dst;
    std::vector<TensorMask> masks;   // per block: what is asked for (empty = all)
    std::vector<size_t> load_index;  // per Load key: its block in `keys`
    // Guarded by the pool's mu_ (not annotated: another object's mutex).
    std::vector<uint8_t> arrived;      // per block: 0 not yet, 1 in its slot, 2 missing or bad
    std::vector<uint64_t> file_bytes;  // per block: its file's size, once in its slot
    size_t arrivals = 0;
    size_t ready = 0;  // leading blocks in their slots
  };

  enum class Release : uint8_t {
    kKeepCached,  // an indexed block stays cached (if retain_freed_blocks)
    kDropEntry,   // an indexed block leaves the index when its last user does
  };

  // How QueueStoreLocked keeps a block's bytes until it is encoded.
  enum class Hold : uint8_t {
    kPinSlot,   // a reference on the slot (it stays valid and unchanged)
    kCopySlot,  // a copy of the slot's bytes (the slot is freed now)
  };

  // Appends (paged_pool.cc).
  Status WriteAppend(uint64_t seq, const AppendRequest& req) override;
  Status WriteRecurrent(uint64_t seq, uint32_t layer, size_t pos,
                        std::span<const std::span<const std::byte>> states) override;
  // Gives `seq` slots for blocks [slots.size(), block] and makes `block`
  // writable.
  Status EnsureWritableLocked(uint64_t seq_id, Sequence& seq, size_t block) REQUIRES(mu_);
  Status MakeWritableLocked(uint64_t seq_id, Sequence& seq, size_t block) REQUIRES(mu_);

  // Slots (paged_pool.cc).
  Result<uint32_t> AllocateSlotLocked(uint64_t protect) REQUIRES(mu_);
  void ReleaseSlotLocked(uint32_t slot, Release mode) REQUIRES(mu_);
  // The slot no longer holds a keyed block: leaves the index, not cached.
  void ForgetBlockLocked(uint32_t slot) REQUIRES(mu_);
  void IndexLocked(uint32_t slot, const BlockKey& key) REQUIRES(mu_);
  Status NotFoundLocked(uint64_t seq) const REQUIRES(mu_);
  Result<Sequence*> FindReadyLocked(uint64_t seq) REQUIRES(mu_);
  // REQUIRES CanHoldLocked(seq, length).ok().
  void TruncateLocked(Sequence& seq, size_t length) REQUIRES(mu_);
  // OK if `seq` holds what a length of `length` needs: every tensor
  // NeededTensors names for its blocks (a recurrent layer's snapshot at a
  // block boundary, a sliding window's blocks). kFailedPrecondition naming
  // what is missing.
  Status CanHoldLocked(uint64_t id, const Sequence& seq, size_t length) const REQUIRES(mu_);
  // The longest length <= `length` that CanHoldLocked accepts (0 always is).
  size_t HoldableLengthLocked(uint64_t id, const Sequence& seq, size_t length) const REQUIRES(mu_);
  // kFailedPrecondition unless every recurrent layer has its state after
  // `new_len` tokens and after each block boundary in (length, new_len].
  Status CheckRecurrentLocked(uint64_t id, const Sequence& seq, size_t new_len) const REQUIRES(mu_);
  // Writes each recurrent layer's live state into the slot of the block
  // holding token new_len - 1 (a boundary's is there already).
  Status CommitRecurrentLocked(uint64_t id, Sequence& seq, size_t new_len) REQUIRES(mu_);
  // Releases the blocks of `seq` that are out of every sliding window
  // (when every per-token layer is sliding).
  void FreeOutOfWindowLocked(Sequence& seq) REQUIRES(mu_);
  void ReleaseSlotsLocked(Sequence& seq) REQUIRES(mu_);
  // Publishes full block `block` of `seq` under `key` (hashed by the caller).
  void PublishLocked(Sequence& seq, size_t block, const BlockKey& key) REQUIRES(mu_);
  // Tokens of `seq` whose K/V are in its slots (all of them unless loading).
  size_t ReadyTokensLocked(const Sequence& seq) const REQUIRES(mu_);
  void InvalidatePackedLocked(Sequence& seq) REQUIRES(mu_);

  // Lower tiers (paged_pool_tiers.cc).
  // The block file of `data` (a block's bytes in host memory).
  Result<SharedBlock> EncodeBlockFile(const std::byte* data, const BlockKey& key,
                                      const BlockKey& parent) const;
  // Encodes a pending store's bytes (without the lock).
  Result<SharedBlock> EncodePending(const PendingStore& p) const;
  // A copy of a slot's bytes in host memory.
  Result<std::shared_ptr<const BlockBuffer>> CopySlotLocked(uint32_t slot) REQUIRES(mu_);
  // Copies a block file's data section into `slot_addr`, after checking its
  // header (key, signature, size; the store verified the checksum). False
  // if the file is not the block `key`.
  // Copies only the tensors `mask` selects (empty = all).
  bool DecodeIntoSlot(const BlockBuffer& file, const BlockKey& key, const TensorMask& mask,
                      std::byte* slot_addr);
  void QueueStoreLocked(uint32_t slot, size_t block_index, const std::vector<BlockKey>& keys,
                        std::optional<uint64_t> offloaded_seq, Hold hold) REQUIRES(mu_);
  std::vector<PendingStore> TakePendingStoresLocked() REQUIRES(mu_);
  void FlushStores(std::vector<PendingStore> stores) EXCLUDES(mu_);
  bool EvictOneLocked(uint64_t protect) REQUIRES(mu_);
  void OffloadLocked(uint64_t id, Sequence& seq) REQUIRES(mu_);
  // The store's callback for block i of `job`.
  void OnBlockArrived(const std::shared_ptr<LoadJob>& job, size_t i, SharedBlock file)
      EXCLUDES(mu_);
  void FinishLoadLocked(LoadJob& job) REQUIRES(mu_);
  // A restore's copy of `n` bytes into slot memory at `slot_addr`: host
  // memory is written by StreamCopy (large copies bypass the caches),
  // device memory by its SlotMemory.
  void RestoreCopy(std::byte* slot_addr, const std::byte* src, size_t n) const;
  // Removes an offload record and returns it.
  Offloaded TakeOffloadedLocked(std::unordered_map<uint64_t, Offloaded>::iterator it) REQUIRES(mu_);

  const PoolOptions options_;
  const KeyChain chain_;
  const std::string signature_;
  Env* const env_;
  // The arena's SlotMemory, for copies into loading slots and out of
  // pinned slots without mu_.
  const std::shared_ptr<SlotMemory> arena_memory_;
  // Checks the headers of the blocks loads bring (DecodeIntoSlot), without
  // mu_ (thread-safe, a mutex of its own).
  BlockVerifier header_verifier_;
  // This pool's name in the header notes it leaves on the blocks it
  // decodes (BlockBuffer::HeaderNote): a host-tier block restored again
  // skips the header check it passed here before.
  const uint64_t decoder_id_ = BlockBuffer::NewDecoderId();

  // Lock order: mu_, then packed_bin_'s own mutex.
  const std::shared_ptr<PackedBufferBin> packed_bin_;
  mutable Mutex mu_;
  // A load finished, or (while prefix_waiters_ > 0) a load's ready prefix
  // grew. Only WaitTokensLoaded waits for a prefix: a block that lands while
  // no one does wakes no thread (a restore of 4 KiB blocks would otherwise
  // wake its waiting caller once per block, which costs more than the copy).
  CondVar loaded_cv_;
  uint32_t prefix_waiters_ GUARDED_BY(mu_) = 0;  // threads in WaitTokensLoaded
  SlotArena arena_ GUARDED_BY(mu_);
  BlockAllocator alloc_ GUARDED_BY(mu_);
  std::vector<SlotInfo> slots_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> index_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Sequence> seqs_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Offloaded> offloaded_ GUARDED_BY(mu_);
  std::unordered_set<uint64_t> active_ GUARDED_BY(mu_);
  std::vector<uint64_t> evicted_ids_ GUARDED_BY(mu_);
  std::vector<PendingStore> pending_stores_ GUARDED_BY(mu_);
  uint64_t loads_in_flight_ GUARDED_BY(mu_) = 0;
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  uint64_t next_order_ GUARDED_BY(mu_) = 0;
  PoolStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_PAGED_POOL_H_
