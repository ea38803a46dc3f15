// BufferPool: the exact-size buffers disk (and later remote) hits are read
// into, recycled so that a restore does not pay page faults.
//
// A buffer that a read fills either becomes a host entry (promotion) or is
// dropped once the engine has copied it; in both cases its memory comes
// back here when the last SharedBlock goes (BlockBuffer::Adopt), already
// faulted in, and the next read of a similar size reuses it. Up to
// `max_free_bytes` of free memory is kept; the rest goes back to the OS.
//
// Memory: buffers of kHugeFromBytes and more are their own mappings,
// starting on a 2 MiB boundary and asked to use transparent huge pages, so
// a fresh one costs one page fault per 2 MiB instead of one per 4 KiB;
// smaller ones come from the heap.
//
// Thread safety: every method may be called from any thread; one mutex
// guards the free lists (no allocation or unmapping under it).
#ifndef KVTIER_CACHE_BUFFER_POOL_H_
#define KVTIER_CACHE_BUFFER_POOL_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>

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

  // Adds up to `count` free buffers that fit blocks of `bytes`, written
  // once so their pages are faulted in now rather than during a read;
  // stops where the free memory would pass max_free_bytes. Returns how
  // many were added; kResourceExhausted if memory runs out first.
  Result<uint64_t> Prefault(size_t bytes, uint64_t count);

  void Recycle(std::byte* data, size_t capacity) noexcept override;

  BufferPoolStats Stats() const;

 private:
  explicit BufferPool(uint64_t max_free_bytes) : max_free_bytes_(max_free_bytes) {}
  static std::byte* NewMemory(size_t capacity);
  static void FreeMemory(std::byte* data, size_t capacity);

  const uint64_t max_free_bytes_;
  mutable Mutex mu_;
  std::multimap<size_t, std::byte*> free_ GUARDED_BY(mu_);  // capacity → memory
  BufferPoolStats stats_ GUARDED_BY(mu_);
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_BUFFER_POOL_H_
