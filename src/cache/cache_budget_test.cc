// TieredCache and the host budget: never exceeded under concurrent stores
// and loads; several caches on one shared budget evict in one global LRU
// order, protected keys stay, a closed cache gives its share back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Blocks;
using cache_test::Buffers;
using cache_test::CheckLoaded;
using cache_test::DiskOptions;
using cache_test::Keys;
using cache_test::MakeBlock;
using cache_test::OpenCache;
using cache_test::TempDir;
using ::kvtier::testing::IsOk;
using ::testing::ElementsAre;

constexpr CacheTier kHost = CacheTier::kHost;
constexpr CacheTier kDisk = CacheTier::kDisk;

// Threads store and load random keys (write-back and write-through) while a
// watcher samples the budget; every load is a hit with exact bytes (nothing
// is lost: evicted dirty blocks go to disk), and used + reserved never
// exceeds the capacity.
TEST(CacheBudget, NeverExceededUnderConcurrentStoresAndLoads) {
  TempDir dir;
  constexpr uint64_t kCapacityBlocks = 6;
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 150;
  constexpr uint64_t kKeys = 24;
  auto cache = OpenCache(DiskOptions(dir.path(), kCapacityBlocks));
  const uint64_t capacity = kCapacityBlocks * BlockBytes();
  const auto keys = Keys(0, kKeys);
  const auto blocks = Blocks(keys);
  // A key is loaded only after its store returned.
  std::array<std::atomic<bool>, kKeys> stored{};

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> worst{0}, samples{0};
  std::thread watcher([&] {
    while (!stop.load()) {
      HostBudgetStats b = cache->host_budget()->Stats();
      const uint64_t total = b.used_bytes + b.reserved_bytes;
      uint64_t w = worst.load();
      while (total > w && !worst.compare_exchange_weak(w, total)) {
      }
      samples.fetch_add(1);
      std::this_thread::yield();
    }
  });
  // At least one sample while the workers run, however the threads are
  // scheduled.
  while (samples.load() == 0) std::this_thread::yield();
  std::atomic<int> bad_loads{0}, misses{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([&, t] {
      uint64_t rng = 1000 + t;
      Buffers buf(3);
      for (int op = 0; op < kOpsPerThread; ++op) {
        const uint64_t r = SplitMix64Next(rng);
        const size_t k = r % kKeys;
        if (r % 3 == 0 || !stored[k].load()) {
          StoreOptions so;
          so.write_policy =
              (r >> 8) % 4 == 0 ? WritePolicy::kWriteThrough : WritePolicy::kWriteBack;
          if (!cache->Store(std::span(keys).subspan(k, 1), std::span(blocks).subspan(k, 1), so)
                   .ok()) {
            bad_loads.fetch_add(1);
          }
          stored[k] = true;
          continue;
        }
        // A batch of up to 3 stored keys.
        std::vector<BlockKey> want;
        for (size_t j = 0; j < 3; ++j) {
          const size_t kk = (k + j * 7) % kKeys;
          if (stored[kk].load()) want.push_back(keys[kk]);
        }
        auto f = cache->Load(want, std::span(buf.spans).first(want.size()));
        if (!f.ok()) {
          bad_loads.fetch_add(1);
          continue;
        }
        auto got = f->Get();
        if (!got.ok()) {
          bad_loads.fetch_add(1);
          continue;
        }
        for (size_t j = 0; j < want.size(); ++j) {
          if ((*got)[j].tier == CacheTier::kNone) {
            misses.fetch_add(1);
          } else if (!CheckLoaded(want[j], buf.spans[j], (*got)[j].bytes).ok()) {
            bad_loads.fetch_add(1);
          }
        }
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  watcher.join();

  EXPECT_EQ(bad_loads.load(), 0);
  EXPECT_EQ(misses.load(), 0);
  EXPECT_GT(samples.load(), 0u);
  EXPECT_LE(worst.load(), capacity);
  CacheStats s = cache->Stats();
  EXPECT_LE(s.host_budget.used_bytes + s.host_budget.reserved_bytes, capacity);
  EXPECT_EQ(s.host_budget.reserved_bytes, 0u);
  EXPECT_GT(s.host.evictions, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.write_back_errors, 0u);
  EXPECT_EQ(s.lookups, s.hits_host + s.hits_disk);
}

struct TwoCaches {
  TempDir dir_a, dir_b;
  std::shared_ptr<SharedHostBudget> budget;
  std::unique_ptr<TieredCache> a, b;

  explicit TwoCaches(uint64_t capacity_blocks) {
    budget = SharedHostBudget::Create(capacity_blocks * BlockBytes()).value();
    CacheOptions oa = DiskOptions(dir_a.path(), 1);
    oa.host.shared_budget = budget;
    CacheOptions ob = DiskOptions(dir_b.path(), 1);
    ob.host.shared_budget = budget;
    a = OpenCache(oa);
    b = OpenCache(ob);
  }
};

void StoreOne(TieredCache& c, const BlockKey& key) {
  std::vector<BlockKey> k = {key};
  ASSERT_THAT(c.Store(k, Blocks(k)), IsOk());
}

void LoadOne(TieredCache& c, const BlockKey& key, CacheTier want) {
  Buffers buf(1);
  std::vector<BlockKey> k = {key};
  auto got = c.Load(k, buf.spans).value().Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, want);
  EXPECT_THAT(CheckLoaded(key, buf.spans[0], (*got)[0].bytes), IsOk());
}

TEST(CacheBudget, TwoCachesOnOneBudgetEvictInGlobalLruOrder) {
  TwoCaches t(4);
  const auto ka = Keys(0, 3);
  const auto kb = Keys(10, 3);
  StoreOne(*t.a, ka[0]);
  StoreOne(*t.b, kb[0]);
  StoreOne(*t.a, ka[1]);
  StoreOne(*t.b, kb[1]);
  LoadOne(*t.a, ka[0], kHost);  // LRU order now: b0, a1, b1, a0

  StoreOne(*t.b, kb[2]);  // evicts b0 (b's own)
  EXPECT_THAT(t.b->Match(std::vector<BlockKey>{kb[0], kb[1], kb[2]}).tiers,
              ElementsAre(kDisk, kHost, kHost));
  StoreOne(*t.b, ka[2]);  // evicts a1: another cache's entry, written to a's disk
  EXPECT_THAT(t.a->Match(std::vector<BlockKey>{ka[0], ka[1]}).tiers, ElementsAre(kHost, kDisk));
  EXPECT_EQ(t.a->Stats().write_backs, 1u);
  EXPECT_EQ(t.b->Stats().write_backs, 1u);
  StoreOne(*t.a, ka[2]);  // evicts b1
  EXPECT_THAT(t.b->Match(std::vector<BlockKey>{kb[1], kb[2]}).tiers, ElementsAre(kDisk, kHost));

  // Every evicted block comes back byte-exact from its own cache's disk.
  LoadOne(*t.a, ka[1], kDisk);
  LoadOne(*t.b, kb[0], kDisk);
  EXPECT_EQ(t.budget->Stats().evictions, 5u);  // 3 above + 2 for the promotions
  EXPECT_LE(t.budget->Stats().used_bytes, 4 * BlockBytes());
}

TEST(CacheBudget, ProtectedKeysAreNeverEvicted) {
  TwoCaches t(6);
  const auto ka = Keys(0, 3);
  const auto kb = Keys(10, 3);
  for (size_t i = 0; i < 3; ++i) {
    StoreOne(*t.a, ka[i]);
    StoreOne(*t.b, kb[i]);
  }
  const std::vector<BlockKey> keep = {ka[0], kb[2]};
  EXPECT_EQ(t.budget->ShrinkTo(0, keep), 4 * BlockBytes());
  EXPECT_THAT(t.a->Match(ka).tiers, ElementsAre(kHost, kDisk, kDisk));
  EXPECT_THAT(t.b->Match(kb).tiers, ElementsAre(kDisk, kDisk, kHost));
  EXPECT_EQ(t.a->Stats().write_backs + t.b->Stats().write_backs, 4u);

  // One cache's own shrink protects too, and leaves the other cache alone.
  const std::vector<BlockKey> keep_a = {ka[0]};
  EXPECT_EQ(t.a->ShrinkHost(0, keep_a), 0u);
  EXPECT_EQ(t.b->ShrinkHost(0), BlockBytes());
  EXPECT_EQ(t.a->Stats().host.entries, 1u);
  LoadOne(*t.b, kb[2], kDisk);
  LoadOne(*t.a, ka[1], kDisk);
}

TEST(CacheBudget, AClosedCacheGivesItsShareBack) {
  TwoCaches t(4);
  StoreOne(*t.a, Keys(0, 1)[0]);
  StoreOne(*t.a, Keys(1, 1)[0]);
  StoreOne(*t.b, Keys(10, 1)[0]);
  EXPECT_EQ(t.budget->Stats().tiers, 2u);
  EXPECT_EQ(t.budget->Stats().used_bytes, 3 * BlockBytes());
  ASSERT_THAT(t.a->Close(), IsOk());
  HostBudgetStats s = t.budget->Stats();
  EXPECT_EQ(s.tiers, 1u);
  EXPECT_EQ(s.used_bytes, BlockBytes());
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(t.a->Stats().write_backs, 2u);
}

}  // namespace
}  // namespace kvtier
