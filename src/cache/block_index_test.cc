#include "cache/block_index.h"

#include <gtest/gtest.h>

#include <map>
#include <thread>
#include <vector>

#include "synth/block_generator.h"

namespace kvtier {
namespace {

constexpr TierMask kHostBit = TierBit(IndexTier::kHost);
constexpr TierMask kDiskBit = TierBit(IndexTier::kDisk);
constexpr TierMask kRemoteBit = TierBit(IndexTier::kRemote);

TEST(BlockIndex, TracksEachTierSeparately) {
  BlockIndex index;
  const BlockKey a = TestBlockKey(1), b = TestBlockKey(2);
  EXPECT_EQ(index.Lookup(a), 0);
  index.Add(a, IndexTier::kHost);
  index.Add(a, IndexTier::kDisk);
  index.Add(b, IndexTier::kRemote);
  EXPECT_EQ(index.Lookup(a), kHostBit | kDiskBit);
  EXPECT_EQ(index.Lookup(b), kRemoteBit);
  EXPECT_EQ(index.KeyCount(), 2u);
  EXPECT_EQ(index.KeyCount(IndexTier::kHost), 1u);
  EXPECT_EQ(index.KeyCount(IndexTier::kDisk), 1u);
  EXPECT_EQ(index.KeyCount(IndexTier::kRemote), 1u);

  index.Remove(a, IndexTier::kHost);
  EXPECT_EQ(index.Lookup(a), kDiskBit);
  index.Remove(a, IndexTier::kDisk);
  EXPECT_EQ(index.Lookup(a), 0);
  EXPECT_EQ(index.KeyCount(), 1u);
  EXPECT_EQ(index.KeyCount(IndexTier::kHost), 0u);
  EXPECT_EQ(index.KeyCount(IndexTier::kDisk), 0u);
}

TEST(BlockIndex, KeysDifferingInTheirLastByteAreDistinct) {
  BlockIndex index;
  BlockKey a = TestBlockKey(7);
  BlockKey b = a;
  b.bytes[31] ^= 1;
  index.Add(a, IndexTier::kHost);
  EXPECT_EQ(index.Lookup(a), kHostBit);
  EXPECT_EQ(index.Lookup(b), 0);
}

TEST(BlockIndex, RemoveAheadOfItsAddConverges) {
  BlockIndex index;
  const BlockKey k = TestBlockKey(3);
  index.Remove(k, IndexTier::kHost);  // the remove overtook its add
  EXPECT_EQ(index.Lookup(k), 0);
  EXPECT_EQ(index.KeyCount(), 0u);
  index.Add(k, IndexTier::kHost);
  EXPECT_EQ(index.Lookup(k), 0);  // add + remove: absent
  index.Add(k, IndexTier::kHost);
  EXPECT_EQ(index.Lookup(k), kHostBit);
  EXPECT_EQ(index.KeyCount(), 1u);
  EXPECT_EQ(index.KeyCount(IndexTier::kHost), 1u);
}

TEST(BlockIndex, MatchPrefixStopsAtTheFirstAbsentKey) {
  BlockIndex index;
  std::vector<BlockKey> chain;
  for (uint64_t i = 0; i < 6; ++i) chain.push_back(TestBlockKey(100 + i));
  index.Add(chain[0], IndexTier::kHost);
  index.Add(chain[1], IndexTier::kDisk);
  index.Add(chain[2], IndexTier::kHost);
  index.Add(chain[2], IndexTier::kDisk);
  index.Add(chain[4], IndexTier::kHost);  // after the gap at 3
  std::vector<TierMask> masks(chain.size(), 0xFF);
  EXPECT_EQ(index.MatchPrefix(chain, masks), 3u);
  EXPECT_EQ(masks[0], kHostBit);
  EXPECT_EQ(masks[1], kDiskBit);
  EXPECT_EQ(masks[2], kHostBit | kDiskBit);
  EXPECT_EQ(masks[3], 0xFF);  // not written past the match
  EXPECT_EQ(index.MatchPrefix(chain), 3u);
  EXPECT_EQ(index.MatchPrefix(std::span<const BlockKey>()), 0u);
}

// Random adds and removes (with growth and backward-shift deletion in
// crowded tables) against a reference map.
TEST(BlockIndex, AgreesWithAReferenceMapUnderRandomOperations) {
  BlockIndex::Options opts;
  opts.hash_seed = 12345;
  BlockIndex index(opts);
  std::map<std::pair<uint64_t, size_t>, int> ref;  // (id, tier) → count
  uint64_t rng = 99;
  constexpr uint64_t kIds = 20000;
  for (int op = 0; op < 200000; ++op) {
    const uint64_t id = SplitMix64Next(rng) % kIds;
    const size_t tier = SplitMix64Next(rng) % kIndexTierCount;
    int& c = ref[{id, tier}];
    // Mostly well-ordered events, with the occasional remove first.
    const bool add = c <= 0 ? SplitMix64Next(rng) % 8 != 0 : false;
    if (add) {
      index.Add(TestBlockKey(id), static_cast<IndexTier>(tier));
      ++c;
    } else {
      index.Remove(TestBlockKey(id), static_cast<IndexTier>(tier));
      --c;
    }
  }
  std::vector<size_t> per_tier(kIndexTierCount, 0);
  size_t held = 0;
  for (uint64_t id = 0; id < kIds; ++id) {
    TierMask want = 0;
    for (size_t t = 0; t < kIndexTierCount; ++t) {
      auto it = ref.find({id, t});
      if (it != ref.end() && it->second > 0) {
        want |= TierMask(1u << t);
        ++per_tier[t];
      }
    }
    if (want != 0) ++held;
    ASSERT_EQ(index.Lookup(TestBlockKey(id)), want) << "id " << id;
  }
  EXPECT_EQ(index.KeyCount(), held);
  for (size_t t = 0; t < kIndexTierCount; ++t) {
    EXPECT_EQ(index.KeyCount(static_cast<IndexTier>(t)), per_tier[t]) << "tier " << t;
  }

  // Settle every count to 0: the table empties completely.
  for (auto& [k, c] : ref) {
    for (; c > 0; --c) index.Remove(TestBlockKey(k.first), static_cast<IndexTier>(k.second));
    for (; c < 0; ++c) index.Add(TestBlockKey(k.first), static_cast<IndexTier>(k.second));
  }
  EXPECT_EQ(index.KeyCount(), 0u);
  for (uint64_t id = 0; id < kIds; ++id) ASSERT_EQ(index.Lookup(TestBlockKey(id)), 0) << id;
}

TEST(BlockIndex, MemoryStaysWithinTwoHundredBytesPerKey) {
  BlockIndex index;
  constexpr uint64_t kKeys = 100000;
  for (uint64_t i = 0; i < kKeys; ++i) index.Add(TestBlockKey(i), IndexTier::kDisk);
  EXPECT_EQ(index.KeyCount(), kKeys);
  EXPECT_LE(index.MemoryBytes(), 200 * kKeys);
  // Pre-sizing for the keys needs no growth and about half the worst case.
  BlockIndex::Options opts;
  opts.expected_keys = kKeys;
  BlockIndex sized(opts);
  const size_t before = sized.MemoryBytes();
  for (uint64_t i = 0; i < kKeys; ++i) sized.Add(TestBlockKey(i), IndexTier::kDisk);
  EXPECT_EQ(sized.MemoryBytes(), before);
}

// Several threads apply the events of their own keys, each key's events
// split between two threads in a random order; the final answer is exact.
TEST(BlockIndex, ConcurrentEventsConverge) {
  BlockIndex index;
  constexpr int kThreads = 4;
  constexpr uint64_t kKeysPerThread = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&index, t] {
      // Thread t adds keys of block t and removes keys of block t+1 (mod
      // kThreads); the owner of that block adds them twice, so each key
      // nets one add whatever the interleaving.
      for (uint64_t i = 0; i < kKeysPerThread; ++i) {
        const BlockKey mine = TestBlockKey(t * kKeysPerThread + i);
        index.Add(mine, IndexTier::kHost);
        index.Add(mine, IndexTier::kHost);
        const BlockKey next = TestBlockKey(((t + 1) % kThreads) * kKeysPerThread + i);
        index.Remove(next, IndexTier::kHost);
        index.Add(mine, IndexTier::kDisk);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (uint64_t id = 0; id < kThreads * kKeysPerThread; ++id) {
    ASSERT_EQ(index.Lookup(TestBlockKey(id)), kHostBit | kDiskBit) << id;
  }
  EXPECT_EQ(index.KeyCount(), kThreads * kKeysPerThread);
  EXPECT_EQ(index.KeyCount(IndexTier::kHost), kThreads * kKeysPerThread);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// MarkPresent/MarkAbsent set a tier's state; repeats change nothing, and
// other tiers' counts are left alone.
TEST(BlockIndex, MarkPresentAndAbsentAreIdempotent) {
  BlockIndex index;
  const BlockKey a = TestBlockKey(1), b = TestBlockKey(2);
  index.MarkAbsent(a, IndexTier::kDisk);  // unknown key: nothing stored
  EXPECT_EQ(index.Lookup(a), 0);
  EXPECT_EQ(index.KeyCount(), 0u);

  index.MarkPresent(a, IndexTier::kDisk);
  index.MarkPresent(a, IndexTier::kDisk);
  index.Add(a, IndexTier::kHost);
  index.MarkPresent(b, IndexTier::kDisk);
  EXPECT_EQ(index.Lookup(a), kHostBit | kDiskBit);
  EXPECT_EQ(index.KeyCount(IndexTier::kDisk), 2u);
  EXPECT_EQ(index.KeyCount(), 2u);

  index.MarkAbsent(a, IndexTier::kDisk);  // once is enough after two marks
  EXPECT_EQ(index.Lookup(a), kHostBit);
  index.MarkAbsent(a, IndexTier::kDisk);
  EXPECT_EQ(index.Lookup(a), kHostBit);
  index.Remove(a, IndexTier::kHost);
  EXPECT_EQ(index.Lookup(a), 0);
  EXPECT_EQ(index.KeyCount(), 1u);
  EXPECT_EQ(index.KeyCount(IndexTier::kDisk), 1u);
  index.MarkAbsent(b, IndexTier::kDisk);
  EXPECT_EQ(index.KeyCount(), 0u);
  EXPECT_EQ(index.Lookup(b), 0);
}

}  // namespace
}  // namespace kvtier
