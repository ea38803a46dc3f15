// BlockAllocator: refcounts and free lists of a pool's slot ids (no
// memory; SlotArena maps ids to addresses).
//
// A slot is free when its refcount is 0. Free slots are of two kinds: plain
// ones, and "cached" ones that still hold a published block the pool may hand
// out again (Revive) until it needs the slot for something else. Allocate
// takes plain slots first (lowest ids first, then the most recently freed,
// which is warm), then the least recently freed cached slot, and says so, so
// the owner can forget what that slot held.
//
// Thread safety: not thread-safe; PagedPool calls it under its lock.
#ifndef KVTIER_POOL_BLOCK_ALLOCATOR_H_
#define KVTIER_POOL_BLOCK_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::pool_internal {

class BlockAllocator {
 public:
  // Bytes of bookkeeping per slot (for sizing checks before construction).
  static constexpr size_t kBytesPerSlot = 21;

  explicit BlockAllocator(uint32_t total_slots);

  struct Allocation {
    uint32_t slot = 0;
    bool was_cached = false;  // a cached slot was reclaimed
  };
  // A slot with refcount 1, or nullopt when none is free.
  std::optional<Allocation> Allocate();
  // REQUIRES: RefCount(slot) > 0; else kFailedPrecondition (never wraps).
  Status AddRef(uint32_t slot);
  // Drops one reference; returns the new count. kFailedPrecondition if the
  // slot is already free, kInvalidArgument if out of range.
  Result<uint32_t> Free(uint32_t slot);
  uint32_t RefCount(uint32_t slot) const;

  // Marks whether `slot` holds a block worth keeping once free. A free slot
  // moves between the plain and cached lists accordingly.
  void SetCached(uint32_t slot, bool cached);
  bool IsCached(uint32_t slot) const;
  // Takes a free cached slot out of the cached list with refcount 1.
  // REQUIRES: IsCached(slot) && RefCount(slot) == 0; else kFailedPrecondition.
  Status Revive(uint32_t slot);

  uint32_t total() const { return static_cast<uint32_t>(ref_.size()); }
  // Plain + cached free slots.
  size_t FreeCount() const { return plain_.size() + cached_count_; }
  size_t CachedFreeCount() const { return cached_count_; }

 private:
  static constexpr uint32_t kNil = UINT32_MAX;
  void LinkCachedTail(uint32_t slot);
  void UnlinkCached(uint32_t slot);
  void RemovePlain(uint32_t slot);

  std::vector<uint32_t> ref_;
  std::vector<uint8_t> cached_;
  std::vector<uint32_t> plain_;        // stack; back() is allocated next
  std::vector<uint32_t> plain_pos_;    // index in plain_, or kNil
  std::vector<uint32_t> prev_, next_;  // intrusive LRU list of free cached slots
  uint32_t head_ = kNil, tail_ = kNil;
  size_t cached_count_ = 0;
};

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_BLOCK_ALLOCATOR_H_
