#include "kvtier/read_buffers.h"

#include <memory>

#include "cache/buffer_pool.h"

namespace kvtier {

ReadBufferAllocator RecycledReadBuffers(uint64_t max_free_bytes) {
  std::shared_ptr<cache_internal::BufferPool> pool =
      cache_internal::BufferPool::Create(max_free_bytes);
  return [pool = std::move(pool)](size_t bytes) { return pool->Take(bytes); };
}

}  // namespace kvtier
