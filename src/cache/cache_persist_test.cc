// TieredCache persistence: dirty entries survive eviction and Close (a
// reopened cache finds them on disk, byte-exact); Close is bounded by
// close_timeout_ms.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Blocks;
using cache_test::Buffers;
using cache_test::CheckLoaded;
using cache_test::DiskOptions;
using cache_test::GateEnv;
using cache_test::Keys;
using cache_test::OpenCache;
using cache_test::TempDir;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

// Loads `keys` and returns how many came back; each one must be byte-exact
// and from disk.
size_t CountOnDisk(TieredCache& cache, const std::vector<BlockKey>& keys) {
  Buffers buf(keys.size());
  auto got = cache.Load(keys, buf.spans).value().Get();
  EXPECT_THAT(got, IsOk());
  if (!got.ok()) return 0;
  size_t n = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*got)[i].tier == CacheTier::kNone) continue;
    EXPECT_EQ((*got)[i].tier, CacheTier::kDisk) << i;
    EXPECT_THAT(CheckLoaded(keys[i], buf.spans[i], (*got)[i].bytes), IsOk()) << i;
    ++n;
  }
  return n;
}

TEST(CachePersist, DirtyEntriesSurviveEvictionAndClose) {
  TempDir dir;
  const auto keys = Keys(0, 20);
  {
    auto cache = OpenCache(DiskOptions(dir.path(), 5));
    ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
    CacheStats s = cache->Stats();
    EXPECT_EQ(s.write_backs, 15u);  // evicted to make room
    EXPECT_EQ(s.host.dirty_entries, 5u);
    ASSERT_THAT(cache->Close(), IsOk());
    s = cache->Stats();
    EXPECT_EQ(s.write_backs, 20u);  // Close wrote the last five
    EXPECT_EQ(s.close_dropped, 0u);
    EXPECT_EQ(s.disk->saves_persisted, 20u);
  }
  auto reopened = OpenCache(DiskOptions(dir.path(), 5));
  EXPECT_EQ(reopened->Match(keys).blocks, 20u);
  CacheOptions o = DiskOptions(dir.path(), 5);
  o.promote_disk_hits = false;
  auto reader = OpenCache(o);
  EXPECT_EQ(CountOnDisk(*reader, keys), 20u);
}

TEST(CachePersist, DestroyingTheCacheClosesIt) {
  TempDir dir;
  const auto keys = Keys(0, 3);
  {
    auto cache = OpenCache(DiskOptions(dir.path(), 8));
    ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  }
  CacheOptions o = DiskOptions(dir.path(), 8);
  o.promote_disk_hits = false;
  auto reader = OpenCache(o);
  EXPECT_EQ(CountOnDisk(*reader, keys), 3u);
}

// A clock that races ahead makes the close deadline pass: the dirty blocks
// Close handed down before it are on disk, the rest were dropped, counted,
// and Close says so.
TEST(CachePersist, CloseStopsWritingBackAtItsDeadline) {
  TempDir dir;
  GateEnv env(Env::Default());
  const auto keys = Keys(0, 8);
  CacheOptions o = DiskOptions(dir.path(), 8);
  o.close_timeout_ms = 2500;  // the clock advances 1 s per reading below
  uint64_t written = 0, dropped = 0;
  {
    auto cache = OpenCache(o, &env);
    ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
    env.clock_jump_micros = 1'000'000;
    EXPECT_THAT(cache->Close(),
                StatusIs(StatusCode::kUnavailable, ::testing::HasSubstr("close_timeout_ms=2500")));
    env.clock_jump_micros = 0;
    CacheStats s = cache->Stats();
    written = s.write_backs;
    dropped = s.close_dropped;
  }
  EXPECT_GT(dropped, 0u);
  EXPECT_LT(written, keys.size());
  EXPECT_EQ(written + dropped, keys.size());
  CacheOptions r = DiskOptions(dir.path(), 8);
  r.promote_disk_hits = false;
  auto reader = OpenCache(r);
  EXPECT_EQ(CountOnDisk(*reader, keys), written);
}

TEST(CachePersist, WithoutATimeoutCloseWritesEverything) {
  TempDir dir;
  GateEnv env(Env::Default());
  const auto keys = Keys(0, 8);
  CacheOptions o = DiskOptions(dir.path(), 8);
  o.close_timeout_ms = 0;
  auto cache = OpenCache(o, &env);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  env.clock_jump_micros = 1'000'000;
  EXPECT_THAT(cache->Close(), IsOk());
  env.clock_jump_micros = 0;
  EXPECT_EQ(cache->Stats().write_backs, keys.size());
  EXPECT_EQ(cache->Stats().close_dropped, 0u);
}

}  // namespace
}  // namespace kvtier
