// TieredCache::LoadShared: a host hit is the host entry's own buffer, a
// disk hit is read once into a buffer that becomes the promoted entry,
// every key reaches the callback exactly once, and read buffers are
// recycled, also under concurrent loads.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/memory_env.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Blocks;
using cache_test::DiskOptions;
using cache_test::GateEnv;
using cache_test::HostOnlyOptions;
using cache_test::Keys;
using cache_test::OpenCache;
using cache_test::Seed;
using cache_test::TempDir;
using cache_test::TinyLayout;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

// What the callbacks of one LoadShared saw, per key position.
struct Arrivals {
  std::mutex mu;
  std::map<size_t, std::vector<LoadedBlock>> by_index;
  std::set<std::thread::id> threads;

  LoadedBlockCallback Callback() {
    return [this](size_t i, const LoadedBlock& b) {
      std::lock_guard<std::mutex> lock(mu);
      by_index[i].push_back(b);
      threads.insert(std::this_thread::get_id());
    };
  }
};

TEST(CacheSharedLoad, AHostHitIsTheHostEntrysOwnBuffer) {
  auto cache = OpenCache(HostOnlyOptions(8));
  const auto keys = Keys(0, 3);
  const auto blocks = Blocks(keys);
  ASSERT_THAT(cache->Store(keys, blocks), IsOk());

  auto f = cache->LoadShared(keys);
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*got)[i].tier, CacheTier::kHost);
    EXPECT_EQ((*got)[i].bytes, BlockBytes());
    // The very buffer Store was given: nothing was copied.
    EXPECT_EQ((*got)[i].block.get(), blocks[i].get()) << i;
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits_host, 3u);
  EXPECT_EQ(s.bytes_loaded_host, 3 * BlockBytes());
  EXPECT_EQ(s.read_buffers, 0u);
}

// A size query (SharedLoadOptions::uncounted, the C API's kvtier_cache_load
// with dst = NULL) hands the blocks out like any load but is no lookup, hit
// or miss: the load that follows is the one the stats count.
TEST(CacheSharedLoad, AnUncountedLoadIsNoLookupHitOrMiss) {
  TempDir dir;
  const auto keys = Keys(0, 3);
  Seed(dir.path(), keys);
  auto cache = OpenCache(DiskOptions(dir.path(), 8));
  std::vector<BlockKey> asked = keys;
  asked.push_back(Keys(100, 1)[0]);  // nobody stored it: a miss

  SharedLoadOptions uncounted;
  uncounted.uncounted = true;
  auto f = cache->LoadShared(asked, std::move(uncounted));
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE((*got)[i].block, nullptr) << i;
    EXPECT_EQ((*got)[i].block->size(), BlockBytes());
  }
  EXPECT_EQ((*got)[3].block, nullptr);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.lookups, 0u);
  EXPECT_EQ(s.hits_host + s.hits_disk + s.hits_remote, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.bytes_loaded_disk + s.bytes_loaded_host, 0u);

  // The loads after it count as usual (host hits now: the blocks were
  // promoted, as after any disk read).
  auto counted = cache->LoadShared(asked);
  ASSERT_THAT(counted, IsOk());
  ASSERT_THAT(counted->Get(), IsOk());
  s = cache->Stats();
  EXPECT_EQ(s.lookups, 4u);
  EXPECT_EQ(s.hits_host + s.hits_disk, 3u);
  EXPECT_EQ(s.misses, 1u);
}

TEST(CacheSharedLoad, ADiskHitIsReadOnceAndItsBufferBecomesTheHostEntry) {
  TempDir dir;
  const auto keys = Keys(0, 4);
  Seed(dir.path(), keys);
  auto cache = OpenCache(DiskOptions(dir.path(), 8));

  auto first = cache->LoadShared(keys);
  ASSERT_THAT(first, IsOk());
  auto got = first->Get();
  ASSERT_THAT(got, IsOk());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ((*got)[i].tier, CacheTier::kDisk) << i;
    ASSERT_NE((*got)[i].block, nullptr);
    EXPECT_EQ((*got)[i].block->size(), BlockBytes());
    EXPECT_THAT(CheckBlockFile((*got)[i].block->span(), TinyLayout(), keys[i]), IsOk());
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.disk->loads, 4u);
  EXPECT_EQ(s.hits_disk, 4u);
  EXPECT_EQ(s.promotions, 4u);
  EXPECT_EQ(s.bytes_promoted, 4 * BlockBytes());
  EXPECT_EQ(s.read_buffers, 4u);
  EXPECT_EQ(s.host.entries, 4u);

  // Now host hits: the same buffers the reads filled, and no second read.
  auto second = cache->LoadShared(keys);
  ASSERT_THAT(second, IsOk());
  auto again = second->Get();
  ASSERT_THAT(again, IsOk());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ((*again)[i].tier, CacheTier::kHost);
    EXPECT_EQ((*again)[i].block.get(), (*got)[i].block.get()) << i;
  }
  EXPECT_EQ(cache->Stats().disk->loads, 4u);
}

TEST(CacheSharedLoad, EveryKeyReachesTheCallbackExactlyOnce) {
  TempDir dir;
  const auto on_disk = Keys(0, 3);
  Seed(dir.path(), on_disk);
  auto cache = OpenCache(DiskOptions(dir.path(), 8));
  const auto in_ram = Keys(10, 2);
  ASSERT_THAT(cache->Store(in_ram, Blocks(in_ram)), IsOk());
  // host, disk, miss, disk, host, miss, disk
  const std::vector<BlockKey> keys = {in_ram[0], on_disk[0],       TestBlockKey(99), on_disk[1],
                                      in_ram[1], TestBlockKey(98), on_disk[2]};
  const std::vector<CacheTier> want = {CacheTier::kHost, CacheTier::kDisk, CacheTier::kNone,
                                       CacheTier::kDisk, CacheTier::kHost, CacheTier::kNone,
                                       CacheTier::kDisk};
  Arrivals seen;
  SharedLoadOptions o;
  o.on_block = seen.Callback();
  auto f = cache->LoadShared(keys, o);
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(seen.by_index.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(seen.by_index[i].size(), 1u) << i;
    const LoadedBlock& b = seen.by_index[i][0];
    EXPECT_EQ(b.tier, want[i]) << i;
    EXPECT_EQ((*got)[i].tier, want[i]) << i;
    // With a callback, the future does not hold the blocks.
    EXPECT_EQ((*got)[i].block, nullptr) << i;
    if (want[i] == CacheTier::kNone) {
      EXPECT_EQ(b.block, nullptr);
      EXPECT_EQ(b.bytes, 0u);
    } else {
      ASSERT_NE(b.block, nullptr);
      EXPECT_EQ(b.bytes, BlockBytes());
      EXPECT_EQ((*got)[i].bytes, BlockBytes());
      EXPECT_THAT(CheckBlockFile(b.block->span(), TinyLayout(), keys[i]), IsOk());
    }
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.hits_host, 2u);
  EXPECT_EQ(s.hits_disk, 3u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.lookups, 7u);
}

// Without promotion a read buffer is only the callback's: it goes back to
// the pool when the callback drops it, and the next load reuses it.
TEST(CacheSharedLoad, ReadBuffersComeBackAndAreReused) {
  TempDir dir;
  const auto keys = Keys(0, 4);
  Seed(dir.path(), keys);
  CacheOptions o = DiskOptions(dir.path(), 8);
  o.promote_disk_hits = false;
  auto cache = OpenCache(o);
  SharedLoadOptions so;
  so.on_block = [](size_t, const LoadedBlock& b) { EXPECT_EQ(b.tier, CacheTier::kDisk); };
  for (int round = 0; round < 3; ++round) {
    auto f = cache->LoadShared(keys, so);
    ASSERT_THAT(f, IsOk());
    ASSERT_THAT(f->Get(), IsOk());
  }
  CacheStats s = cache->Stats();
  const uint64_t capacity = (BlockBytes() + 4095) / 4096 * 4096;
  EXPECT_EQ(s.read_buffers, 12u);
  // Every buffer is new memory or a recycled one; at most round 1's four
  // were new (fewer when a read reused a buffer an earlier key of the same
  // load had already handed back).
  EXPECT_EQ(s.read_buffers_reused + s.read_buffer_fresh_bytes / capacity, 12u);
  EXPECT_GE(s.read_buffers_reused, 8u);
  EXPECT_LE(s.read_buffer_fresh_bytes, 4 * capacity);
  EXPECT_EQ(s.read_buffer_free_bytes, s.read_buffer_fresh_bytes);
  EXPECT_EQ(s.disk->loads, 12u);
}

// Buffers faulted in at startup serve the first disk restore: no new
// memory during the reads.
TEST(CacheSharedLoad, PrefaultedReadBuffersServeTheFirstRestore) {
  TempDir dir;
  const auto keys = Keys(0, 4);
  Seed(dir.path(), keys);
  auto cache = OpenCache(DiskOptions(dir.path(), 8));
  auto added = cache->PrefaultReadBuffers(TinyLayout(), 4);
  ASSERT_THAT(added, IsOk());
  EXPECT_EQ(*added, 4u);
  const uint64_t before = cache->Stats().read_buffer_fresh_bytes;
  auto f = cache->LoadShared(keys);
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  for (const LoadedBlock& b : *got) EXPECT_EQ(b.tier, CacheTier::kDisk);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.read_buffers_prefaulted, 4u);
  EXPECT_EQ(s.read_buffers_reused, 4u);
  EXPECT_EQ(s.read_buffer_fresh_bytes, before);
  ModelLayout other = TinyLayout();
  other.layers.pop_back();
  EXPECT_THAT(cache->PrefaultReadBuffers(other, 1), StatusIs(StatusCode::kInvalidArgument));
  ASSERT_THAT(cache->Close(), IsOk());
  EXPECT_THAT(cache->PrefaultReadBuffers(TinyLayout(), 1),
              StatusIs(StatusCode::kFailedPrecondition));
}

// Read buffers are faulted in only where the kernel has the memory: a
// prefault past MemAvailable (the Env's /proc/meminfo) is refused before
// any buffer is allocated, naming both figures, instead of growing until
// the OOM killer ends the process (issue 33 item 8). On 1229907 the 4
// buffers were faulted in.
TEST(CacheSharedLoad, PrefaultPastMemAvailableIsRefusedUpFront) {
  MemoryEnv env;
  ASSERT_THAT(env.CreateDirs("/proc", 0755), IsOk());
  const std::string meminfo =
      "MemTotal:        1048576 kB\nMemFree:             4 kB\nMemAvailable:       12 kB\n"
      "Buffers:               0 kB\n";
  ASSERT_THAT(env.WriteFileAtomic("/proc/meminfo", std::as_bytes(std::span(meminfo)), {}), IsOk());
  auto cache = OpenCache(HostOnlyOptions(8), &env);
  ASSERT_NE(cache, nullptr);
  EXPECT_THAT(cache->PrefaultReadBuffers(TinyLayout(), 4),
              StatusIs(StatusCode::kResourceExhausted,
                       ::testing::HasSubstr("bytes of RAM; 12288 are available (MemAvailable)")));
  EXPECT_EQ(cache->Stats().read_buffers_prefaulted, 0u);
  EXPECT_EQ(cache->Stats().read_buffer_fresh_bytes, 0u);
  // One buffer (a tiny block file, ~5 KB) fits.
  auto added = cache->PrefaultReadBuffers(TinyLayout(), 1);
  ASSERT_THAT(added, IsOk());
  EXPECT_EQ(*added, 1u);
  EXPECT_EQ(cache->Stats().read_buffers_prefaulted, 1u);
  ASSERT_THAT(cache->Close(), IsOk());
}

// Promoted buffers come back when the host budget evicts their entries.
TEST(CacheSharedLoad, AnEvictedPromotedBufferIsReused) {
  TempDir dir;
  const auto keys = Keys(0, 4);
  Seed(dir.path(), keys);
  auto cache = OpenCache(DiskOptions(dir.path(), 2));
  for (size_t i = 0; i < keys.size(); ++i) {
    // With a callback the load keeps no reference: the host entry is the
    // buffer's only owner once the callback returns.
    CacheTier tier = CacheTier::kNone;
    SharedLoadOptions so;
    so.on_block = [&](size_t, const LoadedBlock& b) { tier = b.tier; };
    auto f = cache->LoadShared(std::span(keys).subspan(i, 1), so);
    ASSERT_THAT(f, IsOk());
    ASSERT_THAT(f->Get(), IsOk());
    EXPECT_EQ(tier, CacheTier::kDisk);
  }
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.promotions, 4u);
  // Loads 3 and 4 evicted entries 1 and 2 to reserve their budget; those
  // buffers (nobody else held them) served the reads.
  EXPECT_EQ(s.read_buffers_reused, 2u);
}

TEST(CacheSharedLoad, ConcurrentLoadsRecycleTheirBuffers) {
  TempDir dir;
  constexpr size_t kBlocks = 16, kThreads = 4, kRounds = 20;
  const auto keys = Keys(0, kBlocks);
  Seed(dir.path(), keys);
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.promote_disk_hits = false;
  auto cache = OpenCache(o);
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (size_t t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t r = 0; r < kRounds; ++r) {
        const size_t first = (t * 5 + r) % (kBlocks - 4);
        std::span<const BlockKey> want = std::span(keys).subspan(first, 4);
        SharedLoadOptions so;
        so.on_block = [&](size_t i, const LoadedBlock& b) {
          if (b.block == nullptr || !CheckBlockFile(b.block->span(), TinyLayout(), want[i]).ok())
            ++wrong;
        };
        auto f = cache->LoadShared(want, so);
        if (!f.ok() || !f->Get().ok()) ++wrong;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.read_buffers, kThreads * kRounds * 4);
  EXPECT_EQ(s.hits_disk, kThreads * kRounds * 4);
  // At most every thread's batch in flight at once was ever new memory.
  const uint64_t capacity = (BlockBytes() + 4095) / 4096 * 4096;
  EXPECT_LE(s.read_buffer_fresh_bytes, kThreads * 4 * capacity);
  EXPECT_GE(s.read_buffers_reused, kThreads * (kRounds - 1) * 4);
}

// LoadShared of `keys` (stored as `blocks`) calls back once per key with
// the host entry's own buffer; `seen` records on which threads.
void LoadEachOnce(TieredCache* cache, const std::vector<BlockKey>& keys,
                  const std::vector<SharedBlock>& blocks, Arrivals* seen) {
  SharedLoadOptions so;
  so.on_block = seen->Callback();
  auto f = cache->LoadShared(keys, so);
  ASSERT_THAT(f, IsOk());
  ASSERT_THAT(f->Get(), IsOk());
  ASSERT_EQ(seen->by_index.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_EQ(seen->by_index[i].size(), 1u) << i;
    EXPECT_EQ(seen->by_index[i][0].block.get(), blocks[i].get()) << i;
  }
}

// Many large host hits adding up to tens of megabytes go out on the load
// threads, each still exactly once.
TEST(CacheSharedLoad, ManyLargeHostHitsAreHandedOutOnTheLoadThreads) {
  // Tiny's tensors over 256 tokens: blocks of 64 KiB and a header.
  const ModelLayout layout = ModelLayout::Preset("tiny", 256).value();
  const uint64_t bytes = layout.BlockBytes() + 4096;                  // its header fits in 4 KiB
  const uint64_t n = (uint64_t{32} << 20) / layout.BlockBytes() + 1;  // over 32 MiB
  const auto all = Keys(0, n);
  std::vector<SharedBlock> blocks;
  BlockKey zero{};
  for (const BlockKey& k : all) {
    Result<BlockBuffer> b = MakeBlockFile(layout, k, zero, zero, 1'700'000'000);
    ASSERT_THAT(b, IsOk());
    ASSERT_LE(b->size(), bytes);
    blocks.push_back(std::make_shared<const BlockBuffer>(std::move(b).value()));
  }
  ASSERT_GE(layout.BlockBytes(), uint64_t{64} << 10);
  CacheOptions o = HostOnlyOptions(0);
  o.host.capacity_bytes = n * bytes;
  o.layout_signature = layout.Signature();
  o.load_threads = 2;
  auto cache = OpenCache(o);
  ASSERT_THAT(cache->Store(all, blocks), IsOk());
  Arrivals seen;
  LoadEachOnce(cache.get(), all, blocks, &seen);
  EXPECT_EQ(seen.threads.count(std::this_thread::get_id()), 0u);
  // Which of the two load threads takes each part depends on scheduling: on
  // a busy machine one may take them all.
  EXPECT_GE(seen.threads.size(), 1u);
  EXPECT_LE(seen.threads.size(), 2u);
}

// Small host hits stay on the caller's thread however many there are: per
// block, the hand-over and the threads' contention would cost more than
// the copy they spread.
TEST(CacheSharedLoad, ManySmallHostHitsAreHandedOutOnTheCallersThread) {
  const uint64_t n = (uint64_t{33} << 20) / BlockBytes() + 1;  // over 32 MiB
  CacheOptions o = HostOnlyOptions(n);
  o.load_threads = 2;
  auto cache = OpenCache(o);
  const auto keys = Keys(0, n);
  const auto blocks = Blocks(keys);
  ASSERT_THAT(cache->Store(keys, blocks), IsOk());
  Arrivals seen;
  LoadEachOnce(cache.get(), keys, blocks, &seen);
  EXPECT_EQ(seen.threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

// A load dropped while its read is held: the key still gets its one call,
// nothing is promoted, and the budget is given back.
TEST(CacheSharedLoad, ADroppedLoadStillCallsBackOncePerKey) {
  TempDir dir;
  const auto keys = Keys(0, 2);
  Seed(dir.path(), keys);
  GateEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.load_threads = 1;
  o.disk->read_threads = 0;
  auto cache = OpenCache(o, &env);

  env.reads.Close();
  Arrivals held, queued;
  SharedLoadOptions a, b;
  a.on_block = held.Callback();
  b.on_block = queued.Callback();
  auto first = cache->LoadShared(std::span(keys).first(1), a);
  ASSERT_THAT(first, IsOk());
  env.reads.AwaitWaiters(1);
  auto second = cache->LoadShared(std::span(keys).subspan(1, 1), b);
  ASSERT_THAT(second, IsOk());
  // The first read is let through only once the destructor has cancelled
  // the queued load, so that load never starts.
  std::shared_ptr<cache_internal::LoadState> state =
      cache_internal::LoadFutureAccess::State(*second);
  std::thread dropper([&] { LoadFuture gone = std::move(second).value(); });
  while (!state->cancelled.load()) std::this_thread::yield();
  env.reads.Open();
  dropper.join();
  ASSERT_THAT(first->Get(), IsOk());
  ASSERT_EQ(held.by_index[0].size(), 1u);
  EXPECT_EQ(held.by_index[0][0].tier, CacheTier::kDisk);
  ASSERT_EQ(queued.by_index[0].size(), 1u);
  EXPECT_EQ(queued.by_index[0][0].tier, CacheTier::kNone);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.loads_cancelled, 1u);
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.host_budget.reserved_bytes, 0u);
}

TEST(CacheSharedLoad, AClosedCacheRefusesWithoutCallingBack) {
  auto cache = OpenCache(HostOnlyOptions(4));
  ASSERT_THAT(cache->Close(), IsOk());
  int calls = 0;
  SharedLoadOptions so;
  so.on_block = [&](size_t, const LoadedBlock&) { ++calls; };
  EXPECT_THAT(cache->LoadShared(Keys(0, 2), so), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_EQ(calls, 0);
}

}  // namespace
}  // namespace kvtier
