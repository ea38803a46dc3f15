// Test helpers for src/host tests: keys and block bytes that are pure
// functions of an integer id, so any reader can check any block it gets.
// (Until src/testing/block_generator.h lands on main.)
#ifndef KVTIER_HOST_TEST_BLOCKS_H_
#define KVTIER_HOST_TEST_BLOCKS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"

namespace kvtier::host_testing {

inline uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// A uniform-looking key for `id` (distinct ids give distinct keys).
inline BlockKey KeyOf(uint64_t id) {
  BlockKey k;
  uint64_t state = id;
  for (size_t i = 0; i < k.bytes.size(); i += 8) {
    uint64_t v = SplitMix64(state);
    std::memcpy(k.bytes.data() + i, &v, 8);
  }
  return k;
}

// `size` bytes derived from `key`.
inline std::shared_ptr<const BlockBuffer> BlockOf(const BlockKey& key, size_t size) {
  auto buf = BlockBuffer::Allocate(size);
  if (!buf.ok()) return nullptr;
  uint64_t state;
  std::memcpy(&state, key.bytes.data(), 8);
  std::byte* p = buf->data();
  for (size_t i = 0; i < size; i += 8) {
    uint64_t v = SplitMix64(state);
    std::memcpy(p + i, &v, std::min<size_t>(8, size - i));
  }
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

// True if `block` holds exactly the bytes BlockOf(key, size) makes.
inline bool BlockMatches(const BlockKey& key, const BlockBuffer& block, size_t size) {
  if (block.size() != size) return false;
  auto want = BlockOf(key, size);
  return want != nullptr && std::memcmp(want->data(), block.data(), size) == 0;
}

}  // namespace kvtier::host_testing

#endif  // KVTIER_HOST_TEST_BLOCKS_H_
