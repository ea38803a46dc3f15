#include <cassert>
#include <cstdlib>
#include <cstring>

#include "kvtier/block_file.h"

namespace kvtier {

namespace {
constexpr size_t kAlignment = 4096;
}

void BlockBuffer::Free::operator()(std::byte* p) const { std::free(p); }

Result<BlockBuffer> BlockBuffer::Allocate(size_t size) {
  // aligned_alloc wants a size that is a multiple of the alignment; round up
  // so O_DIRECT reads may fill whole pages past the logical end.
  size_t rounded = (size + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < size) return Status::ResourceExhausted("block buffer size overflows");
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  if (p == nullptr) {
    return Status::ResourceExhausted("cannot allocate " + std::to_string(size) + " bytes");
  }
  BlockBuffer buf;
  buf.data_.reset(static_cast<std::byte*>(p));
  buf.size_ = size;
  return buf;
}

Result<BlockBuffer> BlockBuffer::CopyOf(std::span<const std::byte> bytes) {
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, Allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(buf.data(), bytes.data(), bytes.size());
  return buf;
}

void BlockBuffer::Truncate(size_t n) {
  assert(n <= size_);
  size_ = n;
}

}  // namespace kvtier
