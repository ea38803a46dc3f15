// The Match index's disk hints against writes that fail (issue 31): a block
// the disk tier accepted (queued) but could not write on a full disk must
// not stay claimed by Match or Contains.
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/fault_env.h"
#include "testing/status_matchers.h"

namespace kvtier::cache_test {
namespace {

using ::kvtier::testing::IsOk;

// Stores `keys` with `policy` on a disk whose every block-file write fails
// with ENOSPC, flushes, and drops the host copies: what Match, Contains and
// the counters say then.
struct FullDiskRun {
  MatchResult match;
  std::vector<CacheTier> contains;
  CacheStats stats;
};

FullDiskRun StoreOnFullDisk(const std::vector<BlockKey>& keys, WritePolicy policy) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), keys.size());
  o.disk->durability = Durability::kChecksum;
  std::unique_ptr<TieredCache> c = OpenCache(std::move(o), &env);
  FullDiskRun run;
  if (c == nullptr) return run;
  env.FailAll(OpKind::kAppend, ENOSPC);
  StoreOptions so;
  so.write_policy = policy;
  EXPECT_THAT(c->Store(keys, Blocks(keys), so), IsOk());
  // Write-back: the host entries go down to the disk tier here; the
  // writers fail them.
  (void)c->Flush();
  EXPECT_EQ(c->ShrinkHost(0, {}), keys.size() * BlockBytes());
  run.match = c->Match(keys);
  for (const BlockKey& k : keys) run.contains.push_back(c->Contains(k));
  run.stats = c->Stats();
  env.Clear();
  EXPECT_THAT(c->Close(), IsOk());
  return run;
}

class FullDiskHintTest : public ::testing::TestWithParam<WritePolicy> {};

TEST_P(FullDiskHintTest, FailedWriteDropsItsDiskHint) {
  const std::vector<BlockKey> keys = Keys(0, 4);
  FullDiskRun run = StoreOnFullDisk(keys, GetParam());
  EXPECT_EQ(run.match.blocks, 0u);
  EXPECT_EQ(run.match.disk_blocks, 0u);
  for (CacheTier t : run.contains) EXPECT_EQ(t, CacheTier::kNone);
  ASSERT_TRUE(run.stats.disk.has_value());
  EXPECT_EQ(run.stats.disk->saves, 4u);
  EXPECT_EQ(run.stats.disk->saves_persisted, 0u);
  uint64_t failed = 0;
  for (const WriteFailureCause& c : run.stats.disk->write_failures) failed += c.count;
  EXPECT_EQ(failed, 4u);
  // Each failed write dropped one hint; no load was needed to find out.
  EXPECT_EQ(run.stats.stale_disk_hints, 4u);
  EXPECT_EQ(run.stats.lookups, 0u);
}

INSTANTIATE_TEST_SUITE_P(Policies, FullDiskHintTest,
                         ::testing::Values(WritePolicy::kWriteBack, WritePolicy::kWriteThrough));

TEST(FullDiskHint, StoreAfterTheDiskHasRoomAgainIsMatchedFromDisk) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  std::unique_ptr<TieredCache> c = OpenCache(DiskOptions(dir.path(), 4), &env);
  ASSERT_NE(c, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 4);
  StoreOptions so;
  so.write_policy = WritePolicy::kWriteThrough;
  env.FailAll(OpKind::kAppend, ENOSPC);
  ASSERT_THAT(c->Store(keys, Blocks(keys), so), IsOk());
  ASSERT_THAT(c->Flush(), IsOk());
  env.Clear();
  ASSERT_EQ(c->ShrinkHost(0, {}), 4 * BlockBytes());
  EXPECT_EQ(c->Match(keys).blocks, 0u);
  ASSERT_THAT(c->Store(keys, Blocks(keys), so), IsOk());
  ASSERT_THAT(c->Flush(), IsOk());
  ASSERT_EQ(c->ShrinkHost(0, {}), 4 * BlockBytes());
  MatchResult m = c->Match(keys);
  EXPECT_EQ(m.blocks, 4u);
  EXPECT_EQ(m.disk_blocks, 4u);
  CacheStats s = c->Stats();
  ASSERT_TRUE(s.disk.has_value());
  EXPECT_EQ(s.disk->saves_persisted, 4u);
  EXPECT_EQ(s.stale_disk_hints, 4u);
  EXPECT_THAT(c->Close(), IsOk());
}

}  // namespace
}  // namespace kvtier::cache_test
