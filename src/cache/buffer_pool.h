// BufferPool: the exact-size buffers disk (and later remote) hits are read
// into, recycled so that a restore does not pay page faults.
//
// A buffer that a read fills either becomes a host entry (promotion) or is
// dropped once the engine has copied it; in both cases its memory comes
// back here when the last SharedBlock goes (BlockBuffer::Adopt), already
// faulted in, and the next read of a similar size reuses it (of equal
// ones, the one freed last, whose lines may still be in the CPU's caches).
// Up to `max_free_bytes` of free memory is kept; the rest goes back to the
// OS.
//
// Memory: buffers of kHugeFromBytes and more that a read needs at once
// are their own mappings, starting on a 2 MiB boundary and asked to use
// transparent huge pages, so a fresh one costs one page fault per 2 MiB
// instead of one per 4 KiB; smaller ones come from the heap. Prefault
// carves its buffers, back to back, out of one such mapping (a slab): a
// buffer of 3 MiB on its own holds one huge page and 1 MiB of small pages,
// and in a slab all but the slab's last few are huge. Reads into the small
// pages of a buffer used for the first time ran 4x slower than into huge
// ones (docs/tiers.md, "Read buffers"). A slab's buffers are kept for the
// pool's life: they always go back to the free lists, and the slab is
// unmapped when the pool goes.
//
// Thread safety: every method may be called from any thread; one mutex
// guards the free lists and the slab list (no buffer memory is mapped,
// written or unmapped under it).
#ifndef KVTIER_CACHE_BUFFER_POOL_H_
#define KVTIER_CACHE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_buffer.h"
#include "kvtier/status.h"

namespace kvtier::cache_internal {

struct BufferPoolStats {
  uint64_t takes = 0;         // buffers handed out
  uint64_t reused = 0;        // ... from the free lists
  uint64_t fresh_bytes = 0;   // bytes of new memory allocated
  uint64_t free_bytes = 0;    // gauge: memory kept for reuse
  uint64_t free_buffers = 0;  // gauge
  uint64_t released = 0;      // buffers given back to the OS (free lists full)
  uint64_t prefaulted = 0;    // buffers added by Prefault
};

class BufferPool final : public BufferRecycler, public std::enable_shared_from_this<BufferPool> {
 public:
  static constexpr size_t kHugeFromBytes = size_t{2} << 20;

  static std::shared_ptr<BufferPool> Create(uint64_t max_free_bytes);
  ~BufferPool() override;

  // A buffer of size() == bytes: a free one that fits, else new memory.
  // kResourceExhausted if memory runs out or `bytes` is 0 or absurd.
  Result<BlockBuffer> Take(size_t bytes);

  // Adds up to `count` free buffers that fit blocks of `bytes`, carved
  // from one new slab and written once so their pages are faulted in now
  // rather than during a read; no more than keeps the free memory within
  // max_free_bytes. Returns how many were added; kResourceExhausted if
  // memory runs out.
  Result<uint64_t> Prefault(size_t bytes, uint64_t count);

  void Recycle(std::byte* data, size_t capacity) noexcept override;

  BufferPoolStats Stats() const;

 private:
  explicit BufferPool(uint64_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  static std::byte* NewMemory(size_t capacity);
  static std::byte* MapHuge(size_t capacity);  // 2 MiB-aligned, THP advised
  static void FreeMemory(std::byte* data, size_t capacity);

  struct Slab {
    std::byte* data;
    size_t bytes;
  };
  bool InSlabLocked(const std::byte* data) const REQUIRES(mu_);

  const uint64_t max_free_bytes_;
  mutable Mutex mu_;
  std::multimap<size_t, std::byte*> free_ GUARDED_BY(mu_);  // capacity → memory
  std::vector<Slab> slabs_ GUARDED_BY(mu_);                 // Prefault's mappings
  BufferPoolStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_BUFFER_POOL_H_
