// Slot memory and the refcounted slot allocator under BlockPool.
//
// A BlockPool holds `total_blocks` slots; each slot holds one block of a
// ModelLayout laid out exactly like a block file's data section (layer-major,
// then state; each tensor contiguous, TensorSpec bytes). Three pieces:
//
//   SlotMemory      where slot bytes live and how they are copied. The pool
//                   never touches slot bytes except through it, so a device
//                   (CUDA) implementation can be added without changing the
//                   pool. NewHostSlotMemory() is the host (RAM) one.
//   SlotArena       slot id → address, grown lazily in chunks of slots.
//   BlockAllocator  refcounts and free lists of slot ids (no memory).
//
// Ownership: a SlotArena owns its chunks and frees them through its
// SlotMemory, which must outlive it. Thread safety: SlotMemory
// implementations must be safe to call from several threads at once;
// SlotArena and BlockAllocator are not thread-safe (BlockPool calls them
// under its lock).
#ifndef KVTIER_BLOCK_ALLOCATOR_H_
#define KVTIER_BLOCK_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

enum class MemoryKind : uint8_t {
  kHost,    // ordinary RAM: readable and writable by the CPU
  kDevice,  // accelerator memory: only SlotMemory's copies may touch it
};

// Which side of a copy is slot (arena) memory.
enum class CopyDirection : uint8_t {
  kHostToSlot,
  kSlotToHost,
  kSlotToSlot,
};

// One 2-D copy: `rows` rows of `width` bytes; row r starts at
// src + r * src_pitch and lands at dst + r * dst_pitch (cudaMemcpy2D's shape).
struct Copy2D {
  std::byte* dst = nullptr;
  size_t dst_pitch = 0;
  const std::byte* src = nullptr;
  size_t src_pitch = 0;
  size_t width = 0;  // bytes per row
  size_t rows = 0;
};

// Where slot bytes live. Implementations are thread-safe.
class SlotMemory {
 public:
  virtual ~SlotMemory() = default;

  virtual MemoryKind kind() const = 0;
  // `bytes` of uninitialised memory aligned to at least 256 bytes, or
  // kResourceExhausted.
  virtual Result<std::byte*> Allocate(size_t bytes) = 0;
  // REQUIRES: `p` came from Allocate(bytes) on this object.
  virtual void Deallocate(std::byte* p, size_t bytes) = 0;
  // Performs `copy` synchronously; `dir` says which pointers are slot memory.
  virtual void Copy(CopyDirection dir, const Copy2D& copy) = 0;
};

// Slot memory in host RAM (aligned operator new; memcpy copies).
std::shared_ptr<SlotMemory> NewHostSlotMemory();

// Slot id → address. Chunks of `chunk_slots` slots are allocated on the first
// Ensure() of a slot in them and kept until destruction.
class SlotArena {
 public:
  // REQUIRES: slot_bytes > 0, total_slots > 0, chunk_slots > 0, memory != null.
  SlotArena(std::shared_ptr<SlotMemory> memory, size_t slot_bytes, uint32_t total_slots,
            uint32_t chunk_slots);
  ~SlotArena();
  SlotArena(const SlotArena&) = delete;
  SlotArena& operator=(const SlotArena&) = delete;

  // Makes `slot` addressable, allocating its chunk if needed; kResourceExhausted
  // if that fails, kInvalidArgument if slot >= total_slots().
  Status Ensure(uint32_t slot);
  // REQUIRES: Ensure(slot) succeeded.
  std::byte* Address(uint32_t slot) const;
  bool IsBacked(uint32_t slot) const;

  SlotMemory* memory() const { return memory_.get(); }
  // Bytes of one slot, rounded up to a multiple of 256 (the block's bytes are
  // the first BlockBytes() of it).
  size_t slot_stride() const { return slot_stride_; }
  uint32_t total_slots() const { return total_slots_; }
  // Bytes allocated so far (whole chunks).
  uint64_t capacity_bytes() const;

 private:
  size_t ChunkBytes(size_t chunk) const;

  std::shared_ptr<SlotMemory> memory_;
  size_t slot_stride_;
  uint32_t total_slots_;
  uint32_t chunk_slots_;
  std::vector<std::byte*> chunks_;  // null until allocated
};

// Refcounts and free lists for slot ids 0..total-1.
//
// A slot is free when its refcount is 0. Free slots are of two kinds: plain
// ones, and "cached" ones that still hold a published block the pool may hand
// out again (Revive) until it needs the slot for something else. Allocate
// takes plain slots first (lowest ids first, then the most recently freed,
// which is warm), then the least recently freed cached slot, and says so, so
// the owner can forget what that slot held.
class BlockAllocator {
 public:
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

}  // namespace kvtier

#endif  // KVTIER_BLOCK_ALLOCATOR_H_
