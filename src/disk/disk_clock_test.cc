// Disk recency across wall-clock steps (issue 33): the access times
// eviction orders by form one increasing sequence per folder, so blocks
// written while the clock ran ahead do not outlive the ones written after
// it stepped back.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "disk/disk_index.h"
#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk::AccessTimes;
using disk::DiskIndex;
using disk::IndexOptions;
using disk::IndexRow;
using disk_test::ControlledEnv;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using testing::IsOk;

constexpr int64_t kDayUs = int64_t{24} * 3600 * 1'000'000;

// Stores blocks [first, first + count) and waits until they are indexed.
void StoreAll(DiskTier* t, uint64_t first, uint64_t count) {
  for (uint64_t i = first; i < first + count; ++i) {
    ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(t->Flush(), IsOk());
}

uint64_t CountPresent(DiskTier* t, uint64_t first, uint64_t count) {
  uint64_t n = 0;
  for (uint64_t i = first; i < first + count; ++i) n += t->Contains(TestBlockKey(i)) ? 1 : 0;
  return n;
}

// A tier holding at most `entries` blocks; one writer, so that one batch
// evicts at a time and the counts are exact.
Result<std::unique_ptr<DiskTier>> OpenLimited(const std::string& dir, uint64_t entries,
                                              Env* env) {
  DiskTierOptions o = TestOptions(dir);
  o.max_bytes = 0;
  o.max_entries = entries;
  o.writer_threads = 1;
  return DiskTier::Open(o, env);
}

TEST(DiskClockStepTest, BlocksWrittenWhileTheClockRanAheadDoNotOutliveFreshOnes) {
  TempDir dir;
  ControlledEnv env(Env::Default());
  auto t = OpenLimited(dir.path(), 1000, &env);
  ASSERT_THAT(t, IsOk());
  env.StepUnix(kDayUs);  // the clock runs a day ahead
  StoreAll(t->get(), 0, 1000);
  env.StepUnix(-kDayUs);  // and is set right
  StoreAll(t->get(), 1000, 1000);
  ASSERT_THAT((*t)->EnforceLimit(), IsOk());
  EXPECT_EQ(CountPresent(t->get(), 0, 1000), 0u);
  EXPECT_EQ(CountPresent(t->get(), 1000, 1000), 1000u);
  DiskTierStats s = (*t)->Stats();
  EXPECT_EQ(s.entries, 1000u);
  EXPECT_EQ(s.evictions, 1000u);
  EXPECT_EQ(s.saves_persisted, 2000u);
}

TEST(DiskClockStepTest, ReadAfterTheStepBackKeepsABlockOverOlderOnes) {
  TempDir dir;
  ControlledEnv env(Env::Default());
  auto t = OpenLimited(dir.path(), 100, &env);
  ASSERT_THAT(t, IsOk());
  StoreAll(t->get(), 0, 50);  // written on time
  env.StepUnix(-kDayUs);      // the clock steps back a day
  StoreAll(t->get(), 50, 50);
  // Blocks 0..9 are read now: the newest accesses of all.
  std::vector<std::byte> buf(MakeTestBlock(0)->size());
  for (uint64_t i = 0; i < 10; ++i) {
    auto r = (*t)->Load(TestBlockKey(i), buf);
    ASSERT_THAT(r, IsOk());
    ASSERT_TRUE(r->has_value());
  }
  ASSERT_THAT((*t)->Flush(), IsOk());              // the touches reach the index
  StoreAll(t->get(), 100, 60);                     // 60 more: 60 evictions, oldest first
  EXPECT_EQ(CountPresent(t->get(), 0, 10), 10u);   // read last: kept
  EXPECT_EQ(CountPresent(t->get(), 10, 40), 0u);   // written first: gone
  EXPECT_EQ(CountPresent(t->get(), 50, 50), 30u);  // the next 20 gone
  EXPECT_EQ(CountPresent(t->get(), 50, 20), 0u);
  EXPECT_EQ(CountPresent(t->get(), 100, 60), 60u);
  EXPECT_EQ((*t)->Stats().evictions, 60u);
}

IndexRow Row(uint64_t i, int64_t sig, int64_t at_us) {
  IndexRow r;
  r.key = TestBlockKey(i);
  r.sig_id = sig;
  r.size = 10;
  r.created_at_us = at_us;
  r.last_access_us = at_us;
  return r;
}

TEST(DiskClockStepTest, FreshRowsAndTouchesFollowTheNewestAccessTime) {
  TempDir dir;
  auto idx = DiskIndex::Open(dir.Sub("index.sqlite"), IndexOptions{});
  ASSERT_THAT(idx, IsOk());
  const int64_t sig = *(*idx)->SignatureId("s");
  // Adopted by a reconcile: dated by the file's mtime, as given.
  std::vector<IndexRow> adopted = {Row(1, sig, 5'000), Row(2, sig, 7'000)};
  ASSERT_THAT((*idx)->Upsert(adopted, AccessTimes::kAsGiven), IsOk());
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(2)))->last_access_us, 7'000);
  // Written by a clock that reads 1'000 now: after the newest (7'000).
  std::vector<IndexRow> fresh = {Row(3, sig, 1'000), Row(4, sig, 1'000)};
  ASSERT_THAT((*idx)->Upsert(fresh, AccessTimes::kFresh), IsOk());
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(3)))->last_access_us, 7'001);
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(4)))->last_access_us, 7'002);
  // A clock ahead of the index is taken as it is.
  std::vector<IndexRow> ahead = {Row(5, sig, 9'000)};
  ASSERT_THAT((*idx)->Upsert(ahead, AccessTimes::kFresh), IsOk());
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(5)))->last_access_us, 9'000);
  // A touch at 2'000 makes block 1 the newest.
  std::vector<std::pair<BlockKey, int64_t>> touch = {{TestBlockKey(1), 2'000}};
  ASSERT_THAT((*idx)->Touch(touch), IsOk());
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(1)))->last_access_us, 9'001);
  auto lru = (*idx)->LruRows(10);
  ASSERT_THAT(lru, IsOk());
  std::vector<BlockKey> order;
  for (const IndexRow& r : *lru) order.push_back(r.key);
  EXPECT_EQ(order, (std::vector<BlockKey>{TestBlockKey(2), TestBlockKey(3), TestBlockKey(4),
                                          TestBlockKey(5), TestBlockKey(1)}));
  // The created_at times stay the wall clock's (retention reads them).
  EXPECT_EQ((*(*idx)->Lookup(TestBlockKey(3)))->created_at_us, 1'000);
}

}  // namespace
}  // namespace kvtier
