#include "server_client/key_table.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

namespace kvtier::server {

uint64_t KeyTable::WordsFor(uint32_t slot_count) {
  return std::bit_ceil(std::max<uint64_t>(2, uint64_t{slot_count} * 2));
}

uint32_t KeyTable::Tag(const BlockKey& key) {
  // Keys are hashes already; the mix keeps a table of crafted keys (test
  // keys that differ in one byte) from piling into one run.
  uint64_t h;
  std::memcpy(&h, key.bytes.data() + 8, sizeof(h));
  uint64_t l;
  std::memcpy(&l, key.bytes.data(), sizeof(l));
  h ^= l * 0x9e3779b97f4a7c15ull;
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return static_cast<uint32_t>(h);
}

void KeyTable::Insert(const BlockKey& key, uint32_t slot) {
  const uint64_t word = (uint64_t{Tag(key)} << 32) | (uint64_t{slot} + 1);
  uint64_t i = Home(word);
  while (Load(i) != 0) i = (i + 1) & mask_;
  Store(i, word);
}

bool KeyTable::Erase(const BlockKey& key, uint32_t slot) {
  const uint64_t word = (uint64_t{Tag(key)} << 32) | (uint64_t{slot} + 1);
  uint64_t hole = Home(word);
  for (uint64_t n = 0;; hole = (hole + 1) & mask_, ++n) {
    const uint64_t w = Load(hole);
    if (w == 0 || n > mask_) return false;
    if (w == word) break;
  }
  // Backward shift: each later word of the run whose home is not in
  // (hole, j] moves into the hole, which moves on to j. The moved word is
  // written before its old place is overwritten, so a reader behind the
  // hole still finds it (one ahead of it may miss it: a miss).
  for (uint64_t j = (hole + 1) & mask_;; j = (j + 1) & mask_) {
    const uint64_t w = Load(j);
    if (w == 0) break;
    const uint64_t home = Home(w);
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    Store(hole, w);
    hole = j;
  }
  Store(hole, 0);
  return true;
}

}  // namespace kvtier::server
