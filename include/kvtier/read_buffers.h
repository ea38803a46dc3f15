// RecycledReadBuffers: an allocator for DiskTier::LoadBuffers() and
// RemoteTier::LoadBuffers() that hands out exact-size buffers and takes
// their memory back when the last BlockBuffer (or SharedBlock) made from one
// goes, as TieredCache does for its disk and remote hits: a buffer's pages
// are faulted in once, not on every read. Up to `max_free_bytes` of free
// memory is kept for reuse; the rest goes back to the OS. A buffer may
// outlive the allocator.
//
// Thread safety: the allocator may be called from any thread, and its
// buffers destroyed on any thread.
#ifndef KVTIER_READ_BUFFERS_H_
#define KVTIER_READ_BUFFERS_H_

#include <cstddef>
#include <cstdint>
#include <functional>

#include "kvtier/block_buffer.h"
#include "kvtier/status.h"

namespace kvtier {

// The shape of DiskTier::BufferAllocator and RemoteTier::BufferAllocator.
using ReadBufferAllocator = std::function<Result<BlockBuffer>(size_t bytes)>;

// A buffer of size() == bytes per call: a free one that fits, else new
// memory. kResourceExhausted if memory runs out or `bytes` is 0 or absurd.
ReadBufferAllocator RecycledReadBuffers(uint64_t max_free_bytes);

}  // namespace kvtier

#endif  // KVTIER_READ_BUFFERS_H_
