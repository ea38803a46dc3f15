// SlotMemory: where a BlockPool's slot bytes live and how they are copied.
//
// A BlockPool holds `total_blocks` slots; each slot holds one block of a
// ModelLayout laid out exactly like a block file's data section
// (layer-major, then state; each tensor contiguous, TensorSpec bytes). The
// pool touches device memory (MemoryKind::kDevice) only through its
// SlotMemory, so a device (CUDA) implementation can be given in
// PoolOptions::memory without changing the pool. Host memory (kHost) it
// also reads and writes itself: it zeroes the slots it prefaults, encodes
// a stored block straight from its slot, and writes a restored block into
// its slot with non-temporal stores (large copies bypass the caches).
// NewHostSlotMemory() is the host (RAM) one.
//
// Thread safety: implementations must be safe to call from several
// threads at once (the pool copies loaded blocks into slots on the threads
// the blocks arrive on).
#ifndef KVTIER_SLOT_MEMORY_H_
#define KVTIER_SLOT_MEMORY_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "kvtier/status.h"

namespace kvtier {

enum class MemoryKind : uint8_t {
  kHost,    // ordinary RAM: readable and writable by the CPU
  kDevice,  // accelerator memory: only SlotMemory's copies may touch it
};

// Which side of a copy is slot memory.
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

// Slot memory in host RAM (memcpy copies). Allocations of 2 MiB and more
// start on a 2 MiB boundary and ask for transparent huge pages, so
// faulting them in costs one page fault per 2 MiB.
std::shared_ptr<SlotMemory> NewHostSlotMemory();

}  // namespace kvtier

#endif  // KVTIER_SLOT_MEMORY_H_
