// SlotArena: slot id → address, over chunks of slot memory.
//
// Chunks of `chunk_slots` slots are allocated from a SlotMemory on the
// first Ensure() of a slot in them (or all at once by AllocateAll) and
// kept until destruction. Chunks never move, so an address stays valid
// while the arena lives.
//
// Ownership: the arena owns its chunks and frees them through its
// SlotMemory, which it holds. Thread safety: not thread-safe (PagedPool
// calls it under its lock); Address() of an ensured slot may be read
// without the lock once the lock that ensured it was released.
#ifndef KVTIER_POOL_SLOT_ARENA_H_
#define KVTIER_POOL_SLOT_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvtier/slot_memory.h"
#include "kvtier/status.h"

namespace kvtier::pool_internal {

class SlotArena {
 public:
  static constexpr size_t kSlotAlignment = 256;

  // REQUIRES: slot_bytes > 0, total_slots > 0, chunk_slots > 0, memory != null.
  SlotArena(std::shared_ptr<SlotMemory> memory, size_t slot_bytes, uint32_t total_slots,
            uint32_t chunk_slots);
  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  // Makes `slot` addressable, allocating its chunk if needed; kResourceExhausted
  // if that fails, kInvalidArgument if slot >= total_slots().
  Status Ensure(uint32_t slot);
  // Allocates every chunk now; host memory is also written once, so its
  // pages are faulted in before the first block lands.
  Status AllocateAll();
  // REQUIRES: Ensure(slot) succeeded.
  std::byte* Address(uint32_t slot) const;
  bool IsBacked(uint32_t slot) const;

  SlotMemory* memory() const { return memory_.get(); }
  // Bytes of one slot, rounded up to a multiple of kSlotAlignment (the
  // block's bytes are the first BlockBytes() of it).
  size_t slot_stride() const { return slot_stride_; }
  uint32_t total_slots() const { return total_slots_; }
  // Bytes allocated so far (whole chunks).
  uint64_t capacity_bytes() const;

 private:
  size_t ChunkBytes(size_t chunk) const;
  Status EnsureChunk(size_t chunk);

  std::shared_ptr<SlotMemory> memory_;
  size_t slot_stride_;
  uint32_t total_slots_;
  uint32_t chunk_slots_;
  std::vector<std::byte*> chunks_;  // null until allocated
};

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_SLOT_ARENA_H_
