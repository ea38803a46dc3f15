// Property test: random interleavings of store, load, evict, flush, preload
// and reopen against a reference map. Every load returns the reference
// bytes or a miss, never other bytes; with a disk tier (which keeps
// everything here) it never misses a stored key, and never hits an unstored
// one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Buffers;
using cache_test::CheckLoaded;
using cache_test::DiskOptions;
using cache_test::HostOnlyOptions;
using cache_test::MakeBlock;
using cache_test::OpenCache;
using cache_test::TempDir;
using ::kvtier::testing::IsOk;

constexpr uint64_t kKeys = 32;
constexpr int kOps = 300;

enum class Mode { kHostOnly, kWithDisk };

struct Model {
  // Reference: the block each stored key must load as (its content is a
  // function of the key, so the map holds the key's generated file).
  std::map<size_t, SharedBlock> stored;
};

void RunProperty(uint64_t seed, Mode mode) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  TempDir dir;
  uint64_t rng = seed;
  auto next = [&] { return SplitMix64Next(rng); };
  std::vector<BlockKey> keys;
  std::vector<SharedBlock> blocks;
  for (uint64_t i = 0; i < kKeys; ++i) {
    keys.push_back(TestBlockKey(seed * 1000 + i));
    blocks.push_back(MakeBlock(keys.back()));
  }

  auto options = [&] {
    CacheOptions o = mode == Mode::kWithDisk ? DiskOptions(dir.path(), 4 + next() % 5)
                                             : HostOnlyOptions(4 + next() % 5);
    o.promote_disk_hits = next() % 4 != 0;
    o.load_threads = static_cast<uint32_t>(next() % 3);
    o.write_policy = mode == Mode::kWithDisk && next() % 3 == 0 ? WritePolicy::kWriteThrough
                                                                : WritePolicy::kWriteBack;
    return o;
  };
  auto cache = OpenCache(options());
  Model model;
  uint64_t hits = 0, loads = 0;

  for (int op = 0; op < kOps; ++op) {
    const uint64_t r = next() % 100;
    if (r < 35) {  // store 1-3 keys
      const size_t n = 1 + next() % 3;
      std::vector<BlockKey> ks;
      std::vector<SharedBlock> bs;
      for (size_t j = 0; j < n; ++j) {
        const size_t k = next() % kKeys;
        ks.push_back(keys[k]);
        bs.push_back(blocks[k]);
        model.stored[k] = bs.back();
      }
      ASSERT_THAT(cache->Store(ks, bs), IsOk()) << "op " << op;
    } else if (r < 75) {  // load 1-4 keys, stored or not
      const size_t n = 1 + next() % 4;
      std::vector<size_t> ids;
      std::vector<BlockKey> ks;
      for (size_t j = 0; j < n; ++j) {
        ids.push_back(next() % kKeys);
        ks.push_back(keys[ids.back()]);
      }
      Buffers buf(n);
      auto f = cache->Load(ks, buf.spans);
      ASSERT_THAT(f, IsOk());
      // A cancelled load may miss, but never returns other bytes.
      const bool cancelled = next() % 10 == 0;
      if (cancelled) f->Cancel();
      auto got = f->Get();
      ASSERT_THAT(got, IsOk());
      for (size_t j = 0; j < n; ++j) {
        ++loads;
        const bool in_model = model.stored.count(ids[j]) != 0;
        if ((*got)[j].tier == CacheTier::kNone) {
          // With a disk tier nothing stored is ever lost.
          ASSERT_FALSE(mode == Mode::kWithDisk && in_model && !cancelled)
              << "op " << op << ": stored key " << ids[j] << " missed";
          continue;
        }
        ++hits;
        ASSERT_TRUE(in_model) << "op " << op << ": hit for a key never stored";
        const SharedBlock& want = model.stored[ids[j]];
        ASSERT_EQ((*got)[j].bytes, want->size());
        ASSERT_EQ(std::memcmp(buf.spans[j].data(), want->data(), want->size()), 0)
            << "op " << op << ": wrong bytes";
        ASSERT_THAT(CheckLoaded(ks[j], buf.spans[j], (*got)[j].bytes), IsOk());
      }
    } else if (r < 83) {  // evict
      cache->ShrinkHost((next() % 3) * BlockBytes());
    } else if (r < 88) {
      ASSERT_THAT(cache->Flush(), IsOk());
    } else if (r < 97) {  // preload
      std::vector<BlockKey> ks;
      for (size_t j = 0; j < 4; ++j) ks.push_back(keys[next() % kKeys]);
      ASSERT_THAT(cache->Preload(ks), IsOk());
    } else {  // reopen (host-only: a fresh, empty cache)
      ASSERT_THAT(cache->Close(), IsOk());
      cache.reset();
      if (mode == Mode::kHostOnly) model.stored.clear();
      cache = OpenCache(options());
    }
    // Match never claims more than was stored (no false positives: the
    // disk keeps everything in this test, so no stale hints either).
    std::vector<BlockKey> chain;
    for (size_t k = 0; k < 6; ++k) chain.push_back(keys[(op + k) % kKeys]);
    MatchResult m = cache->Match(chain);
    for (size_t k = 0; k < m.blocks; ++k) {
      ASSERT_TRUE(model.stored.count((op + k) % kKeys) != 0) << "op " << op << ": Match of " << k;
    }
    if (mode == Mode::kWithDisk) {
      size_t want = 0;
      while (want < chain.size() && model.stored.count((op + want) % kKeys) != 0) ++want;
      ASSERT_EQ(m.blocks, want) << "op " << op;
    }
  }
  // With a disk tier, every key ever stored loads at the end.
  if (mode == Mode::kWithDisk) {
    std::vector<BlockKey> ks;
    for (const auto& [k, block] : model.stored) ks.push_back(keys[k]);
    Buffers buf(ks.size());
    auto got = cache->Load(ks, buf.spans).value().Get();
    ASSERT_THAT(got, IsOk());
    for (size_t j = 0; j < ks.size(); ++j) {
      ASSERT_NE((*got)[j].tier, CacheTier::kNone) << "stored key " << j << " was lost";
      ASSERT_THAT(CheckLoaded(ks[j], buf.spans[j], (*got)[j].bytes), IsOk());
    }
    EXPECT_EQ(cache->Stats().write_back_errors, 0u);
  }
  EXPECT_GT(loads, 0u);
  EXPECT_GT(hits, 0u);
}

TEST(CacheProperty, WithDiskEveryLoadIsTheStoredBytesOrAMiss) {
  for (uint64_t seed = 1; seed <= 5; ++seed) RunProperty(seed, Mode::kWithDisk);
}

TEST(CacheProperty, HostOnlyEveryLoadIsTheStoredBytesOrAMiss) {
  for (uint64_t seed = 101; seed <= 110; ++seed) RunProperty(seed, Mode::kHostOnly);
}

}  // namespace
}  // namespace kvtier
