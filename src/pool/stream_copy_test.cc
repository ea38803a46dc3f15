#include "pool/stream_copy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace kvtier::pool_internal {
namespace {

// Sizes around the streaming threshold, destinations at the start, 1, 16
// and 63 bytes into a cache line, two source alignments: the copy is the source's bytes exactly,
// and the bytes just before and after the destination are untouched.
TEST(StreamCopyTest, CopiesExactlyTheBytesAroundTheThresholdAtEachAlignment) {
  const size_t kMax = kStreamFromBytes + 4096;
  std::vector<std::byte> src(kMax + 64);
  uint64_t x = 0x9E3779B97F4A7C15u;
  for (std::byte& b : src) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<std::byte>(x);
  }
  std::vector<std::byte> dst(kMax + 256);
  const std::vector<size_t> sizes = {0,
                                     1,
                                     63,
                                     64,
                                     4096,
                                     kStreamFromBytes - 1,
                                     kStreamFromBytes,
                                     kStreamFromBytes + 1,
                                     kStreamFromBytes + 63,
                                     kMax};
  // Offsets of the destination giving it each of these alignments within
  // a 64-byte line (at least 64 bytes into dst, for the guard before it).
  const size_t to_line = (64 - reinterpret_cast<uintptr_t>(dst.data()) % 64) % 64;
  for (size_t n : sizes) {
    for (size_t misalign : {size_t{0}, size_t{1}, size_t{16}, size_t{63}}) {
      const size_t dst_off = 64 + to_line + misalign;
      for (size_t src_off : {size_t{0}, size_t{3}}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xEE});
        StreamCopy(dst.data() + dst_off, src.data() + src_off, n);
        EXPECT_EQ(std::memcmp(dst.data() + dst_off, src.data() + src_off, n), 0)
            << "n " << n << ", dst " << misalign << " past a line, src+" << src_off;
        EXPECT_EQ(dst[dst_off - 1], std::byte{0xEE}) << n << " " << misalign;
        EXPECT_EQ(dst[dst_off + n], std::byte{0xEE}) << n << " " << misalign;
      }
    }
  }
}

}  // namespace
}  // namespace kvtier::pool_internal
