#include "server_client/key_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <vector>

namespace kvtier::server {
namespace {

BlockKey KeyOf(uint64_t i) {
  BlockKey k;
  for (size_t b = 0; b < 8; ++b) k.bytes[b] = static_cast<uint8_t>(i >> (8 * b));
  k.bytes[31] = 0x77;
  return k;
}

// Keys whose home word in a table of `words` words is `home`.
std::vector<BlockKey> KeysAt(uint64_t home, uint64_t words, size_t n, uint64_t* next) {
  std::vector<BlockKey> out;
  while (out.size() < n) {
    BlockKey k = KeyOf((*next)++);
    if ((KeyTable::Tag(k) & (words - 1)) == home) out.push_back(k);
  }
  return out;
}

// The slot the table holds for `key`, where the model says which slot
// holds which key (as a slot's header does).
std::optional<uint32_t> FindIn(const KeyTable& t, const std::map<uint32_t, BlockKey>& holder,
                               const BlockKey& key) {
  return t.Find(key, [&](uint32_t slot) {
    auto it = holder.find(slot);
    return it != holder.end() && it->second == key;
  });
}

size_t Used(const std::vector<uint64_t>& words) {
  size_t n = 0;
  for (uint64_t w : words) n += w != 0;
  return n;
}

TEST(KeyTable, WordsAreAPowerOfTwoAtLeastTwiceTheSlots) {
  EXPECT_EQ(KeyTable::WordsFor(1), 2u);
  EXPECT_EQ(KeyTable::WordsFor(3), 8u);
  EXPECT_EQ(KeyTable::WordsFor(4), 8u);
  EXPECT_EQ(KeyTable::WordsFor(5), 16u);
  EXPECT_EQ(KeyTable::WordsFor(1u << 24), uint64_t{1} << 25);
}

// A run of keys with the same home that wraps past the table's end; erasing
// any one of them leaves every other one findable and no word behind.
TEST(KeyTable, EraseShiftsTheRunBackAcrossTheEnd) {
  constexpr uint64_t kWords = 16;
  uint64_t next = 0;
  for (size_t victim = 0; victim < 5; ++victim) {
    std::vector<uint64_t> words(kWords, 0);
    KeyTable t(words);
    std::map<uint32_t, BlockKey> holder;
    std::vector<BlockKey> keys = KeysAt(kWords - 2, kWords, 3, &next);  // words 14, 15, 0
    for (const BlockKey& k : KeysAt(0, kWords, 2, &next)) keys.push_back(k);  // 1, 2
    for (uint32_t s = 0; s < keys.size(); ++s) {
      t.Insert(keys[s], s);
      holder[s] = keys[s];
    }
    ASSERT_EQ(Used(words), 5u);
    ASSERT_TRUE(t.Erase(keys[victim], static_cast<uint32_t>(victim)));
    EXPECT_FALSE(t.Erase(keys[victim], static_cast<uint32_t>(victim)));
    holder.erase(static_cast<uint32_t>(victim));
    EXPECT_EQ(Used(words), 4u);
    for (uint32_t s = 0; s < keys.size(); ++s) {
      EXPECT_EQ(FindIn(t, holder, keys[s]), s == victim ? std::nullopt : std::optional(s))
          << "victim " << victim << ", key " << s;
    }
  }
}

// Random inserts and erases against a map, at the fullest the arena lets
// the table be (one entry per slot, half the words): after every step
// each key is found in its slot, and each key erased is not.
TEST(KeyTable, AgreesWithAMapThroughRandomInsertsAndErases) {
  constexpr uint32_t kSlots = 64;
  std::vector<uint64_t> words(KeyTable::WordsFor(kSlots), 0);
  KeyTable t(words);
  std::map<uint32_t, BlockKey> holder;
  std::vector<BlockKey> gone;
  std::mt19937_64 rng(7);
  uint64_t next = 0;
  for (int step = 0; step < 20'000; ++step) {
    const uint32_t slot = static_cast<uint32_t>(rng() % kSlots);
    auto it = holder.find(slot);
    if (it == holder.end()) {
      const BlockKey k = KeyOf(next++);
      t.Insert(k, slot);
      holder[slot] = k;
    } else {
      ASSERT_TRUE(t.Erase(it->second, slot));
      gone.push_back(it->second);
      holder.erase(it);
    }
    ASSERT_EQ(Used(words), holder.size());
    if (step % 97 != 0) continue;
    for (const auto& [s, k] : holder) ASSERT_EQ(FindIn(t, holder, k), std::optional(s));
    for (size_t g = gone.size() > 50 ? gone.size() - 50 : 0; g < gone.size(); ++g) {
      ASSERT_EQ(FindIn(t, holder, gone[g]), std::nullopt);
    }
  }
}

// A table whose words some client overwrote (no empty word left) ends the
// probe after one pass: a miss, not a loop.
TEST(KeyTable, AFullTableOfGarbageIsAMiss) {
  std::vector<uint64_t> words(8, 0x123456789ull);
  KeyTable t(words);
  int asked = 0;
  EXPECT_EQ(t.Find(KeyOf(1), [&](uint32_t) { return ++asked, false; }), std::nullopt);
  EXPECT_LE(asked, 8);
}

}  // namespace
}  // namespace kvtier::server
