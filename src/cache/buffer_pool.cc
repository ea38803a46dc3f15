#include "cache/buffer_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace kvtier::cache_internal {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeRounding = size_t{64} << 10;
// No block file is this large (DESIGN.md §4 caps the header at 1 MiB and
// the CLI caps layouts far below); a bigger request is a bug or an attack.
constexpr size_t kMaxBufferBytes = size_t{1} << 40;

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

size_t CapacityFor(size_t bytes) {
  return bytes >= BufferPool::kHugeFromBytes ? RoundUp(bytes, kHugeRounding)
                                             : RoundUp(bytes, BlockBuffer::kAlignment);
}

}  // namespace

std::shared_ptr<BufferPool> BufferPool::Create(uint64_t max_free_bytes) {
  return std::shared_ptr<BufferPool>(new BufferPool(max_free_bytes));
}

BufferPool::~BufferPool() {
  // Every buffer handed out holds the pool alive, so only free ones remain.
  for (auto& [capacity, data] : free_) {
    if (!InSlabLocked(data)) FreeMemory(data, capacity);
  }
  for (const Slab& slab : slabs_) ::munmap(slab.data, slab.bytes);
}

bool BufferPool::InSlabLocked(const std::byte* data) const {
  for (const Slab& slab : slabs_) {
    if (data >= slab.data && data < slab.data + slab.bytes) return true;
  }
  return false;
}

std::byte* BufferPool::NewMemory(size_t capacity) {
  if (capacity < kHugeFromBytes) {
    return static_cast<std::byte*>(std::aligned_alloc(BlockBuffer::kAlignment, capacity));
  }
  return MapHuge(capacity);
}

std::byte* BufferPool::MapHuge(size_t capacity) {
  // Over-map by one huge page, then trim, so the memory starts on a 2 MiB
  // boundary and its full huge pages can be backed by THP.
  const size_t span = capacity + kHugePage;
  void* raw = ::mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = RoundUp(base, kHugePage);
  if (start > base) ::munmap(raw, start - base);
  const uintptr_t end = start + capacity;
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  auto* p = reinterpret_cast<std::byte*>(start);
  (void)::madvise(p, capacity, MADV_HUGEPAGE);  // advice only: fine if refused
  return p;
}

void BufferPool::FreeMemory(std::byte* data, size_t capacity) {
  if (capacity < kHugeFromBytes) {
    std::free(data);
  } else {
    ::munmap(data, capacity);
  }
}

Result<BlockBuffer> BufferPool::Take(size_t bytes) {
  if (bytes == 0 || bytes > kMaxBufferBytes) {
    return Status::ResourceExhausted("read buffer of " + std::to_string(bytes) +
                                     " bytes refused (1.." + std::to_string(kMaxBufferBytes) + ")");
  }
  std::byte* data = nullptr;
  size_t capacity = 0;
  {
    MutexLock lock(&mu_);
    ++stats_.takes;
    // Reuse a buffer no more than 1/8 larger than needed (rounded up to
    // the allocation unit), so blocks of one layout, whose sizes differ by
    // a few header bytes, share buffers and little memory is wasted.
    const size_t limit = CapacityFor(bytes + bytes / 8);
    auto it = free_.lower_bound(bytes);
    if (it != free_.end() && it->first <= limit) {
      // Of the buffers of that capacity, the one freed last (a multimap
      // keeps equal keys in insertion order): its lines are likeliest
      // still in the CPU's caches, so the read's copy into it and the
      // checksum after it stay there (a restore that recycles its buffers
      // reads ~1.4x faster from the page cache, docs/tiers.md).
      it = std::prev(free_.upper_bound(it->first));
      capacity = it->first;
      data = it->second;
      free_.erase(it);
      ++stats_.reused;
      stats_.free_bytes -= capacity;
      --stats_.free_buffers;
    }
  }
  if (data == nullptr) {
    capacity = CapacityFor(bytes);
    data = NewMemory(capacity);
    if (data == nullptr) {
      return Status::ResourceExhausted("cannot allocate a read buffer of " + std::to_string(bytes) +
                                       " bytes");
    }
    MutexLock lock(&mu_);
    stats_.fresh_bytes += capacity;
  }
  return BlockBuffer::Adopt(data, bytes, capacity, shared_from_this());
}

Result<uint64_t> BufferPool::Prefault(size_t bytes, uint64_t count) {
  if (bytes == 0 || bytes > kMaxBufferBytes) {
    return Status::InvalidArgument("read buffers of " + std::to_string(bytes) +
                                   " bytes refused (1.." + std::to_string(kMaxBufferBytes) + ")");
  }
  const size_t capacity = CapacityFor(bytes);
  uint64_t fit = 0;
  {
    MutexLock lock(&mu_);
    const uint64_t room =
        max_free_bytes_ > stats_.free_bytes ? max_free_bytes_ - stats_.free_bytes : 0;
    fit = std::min<uint64_t>(count, room / capacity);
  }
  if (fit == 0) return uint64_t{0};
  // One mapping for all of them (fit * capacity <= max_free_bytes, which
  // the caller sized from RAM).
  const size_t used = static_cast<size_t>(fit) * capacity;
  const size_t slab_bytes =
      RoundUp(used, used >= kHugeFromBytes ? kHugePage : BlockBuffer::kAlignment);
  std::byte* slab = MapHuge(slab_bytes);
  if (slab == nullptr) {
    return Status::ResourceExhausted("cannot map " + std::to_string(slab_bytes) +
                                     " bytes of read buffers");
  }
  std::memset(slab, 0, slab_bytes);  // the page faults happen here, not in a read
  MutexLock lock(&mu_);
  try {
    slabs_.push_back({slab, slab_bytes});
  } catch (const std::bad_alloc&) {
    ::munmap(slab, slab_bytes);
    return Status::ResourceExhausted("no memory for the read buffer pool's slab list");
  }
  uint64_t added = 0;
  for (; added < fit; ++added) {
    try {
      free_.emplace(capacity, slab + added * capacity);
    } catch (const std::bad_alloc&) {
      break;  // the rest of the slab stays unused until the pool goes
    }
    stats_.free_bytes += capacity;
    ++stats_.free_buffers;
    ++stats_.prefaulted;
  }
  stats_.fresh_bytes += slab_bytes;
  if (added == 0) return Status::ResourceExhausted("no memory for the read buffer pool's free list");
  return added;
}

void BufferPool::Recycle(std::byte* data, size_t capacity) noexcept {
  {
    MutexLock lock(&mu_);
    // A slab's buffer cannot be given back on its own: it is always kept.
    const bool in_slab = InSlabLocked(data);
    if (stats_.free_bytes + capacity <= max_free_bytes_ || in_slab) {
      try {
        free_.emplace(capacity, data);
        stats_.free_bytes += capacity;
        ++stats_.free_buffers;
        return;
      } catch (const std::bad_alloc&) {
        // No node for the free list: give the memory back instead (a
        // slab's stays unused until the pool goes).
      }
    }
    ++stats_.released;
    if (in_slab) return;
  }
  FreeMemory(data, capacity);
}

BufferPoolStats BufferPool::Stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

}  // namespace kvtier::cache_internal
