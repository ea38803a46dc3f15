// A cache folder this process cannot write (issue 33 item 10): a read-only
// mount or an image. The tests run as root, whom chmod does not stop, so the
// folder is made read-only through the Env (FaultInjectionEnv failing every
// create, rename, remove, mkdir and chmod with EROFS, as a read-only mount
// does); SQLite, which does its own I/O, then finds the index opened
// read-only by the tier.
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "testing/fault_env.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::RecordingLogger;
using testing::StatusIs;

constexpr OpKind kWrites[] = {OpKind::kCreate, OpKind::kCreateDir, OpKind::kRename,
                              OpKind::kRemove, OpKind::kChmod,     OpKind::kRemoveDir};

void FillFolder(const std::string& dir, uint64_t blocks) {
  auto t = DiskTier::Open(TestOptions(dir), Env::Default());
  ASSERT_THAT(t, IsOk());
  for (uint64_t i = 0; i < blocks; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*t)->Close(), IsOk());
}

TEST(DiskReadOnlyTest, ServesEveryBlockAndSkipsStores) {
  TempDir dir;
  FillFolder(dir.path(), 10);
  FaultInjectionEnv env(Env::Default());
  for (OpKind k : kWrites) env.FailAll(k, EROFS);
  RecordingLogger log;
  DiskTierOptions o = TestOptions(dir.path());
  o.info_log = &log;
  o.reconcile_on_open = true;  // asked for, and skipped: nothing may be written
  std::vector<BlockKey> told;
  o.write_failure_listener = [&told](const BlockKey& k) { told.push_back(k); };
  auto t = DiskTier::Open(o, &env);
  ASSERT_THAT(t, IsOk());
  (*t)->WaitForBackgroundReconcile();
  std::vector<std::byte> buf(MakeTestBlock(0)->size());
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_TRUE((*t)->Contains(TestBlockKey(i)));
    auto r = (*t)->Load(TestBlockKey(i), buf);
    ASSERT_THAT(r, IsOk());
    ASSERT_TRUE(r->has_value());
    ASSERT_EQ(**r, buf.size());
    const SharedBlock want = MakeTestBlock(i);
    EXPECT_TRUE(std::equal(buf.begin(), buf.end(), want->span().begin())) << i;
  }
  for (uint64_t i = 10; i < 15; ++i) {
    EXPECT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*t)->Flush(), IsOk());
  for (uint64_t i = 10; i < 15; ++i) EXPECT_FALSE((*t)->Contains(TestBlockKey(i)));
  EXPECT_EQ(told.size(), 5u);
  EXPECT_THAT((*t)->Erase(TestBlockKey(0)), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT((*t)->Clear(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT((*t)->EnforceLimit(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT((*t)->Reconcile(), StatusIs(StatusCode::kFailedPrecondition));
  DiskTierStats s = (*t)->Stats();
  EXPECT_EQ(s.read_only_skips, 5u);
  EXPECT_EQ(s.saves, 0u);
  EXPECT_EQ(s.hits, 10u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.entries, 10u);
  EXPECT_EQ(s.reconcile_passes, 0u);
  ASSERT_THAT((*t)->Close(), IsOk());
  // Not one write reached the folder: every attempt was a probe refused.
  EXPECT_EQ(env.Calls(OpKind::kCreate), 1);
  EXPECT_EQ(env.Calls(OpKind::kRename), 0);
  EXPECT_EQ(env.Calls(OpKind::kRemove), 0);
  ASSERT_EQ(log.Count("read-only"), 1u);
  EXPECT_THAT(log.Matching("read-only")[0].message, HasSubstr(dir.path()));
  EXPECT_THAT(log.Matching("read-only")[0].message, HasSubstr("read_only_skips"));
  // Writable again: everything is there, the skipped blocks are not.
  auto again = DiskTier::Open(TestOptions(dir.path()), Env::Default());
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ((*again)->Stats().entries, 10u);
  EXPECT_FALSE((*again)->Contains(TestBlockKey(10)));
}

TEST(DiskReadOnlyTest, AnotherLayoutsFolderIsAllMisses) {
  TempDir dir;
  FillFolder(dir.path(), 3);
  FaultInjectionEnv env(Env::Default());
  for (OpKind k : kWrites) env.FailAll(k, EACCES);
  DiskTierOptions o = TestOptions(dir.path());
  o.layout_signature = "another layout";
  auto t = DiskTier::Open(o, &env);
  ASSERT_THAT(t, IsOk());
  std::vector<std::byte> buf(MakeTestBlock(0)->size());
  auto r = (*t)->Load(TestBlockKey(0), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE((*t)->Contains(TestBlockKey(0)));
  EXPECT_EQ((*t)->Stats().entries, 3u);
}

TEST(DiskReadOnlyTest, OtherCreateErrorsStillFailTheOpen) {
  TempDir dir;
  FillFolder(dir.path(), 1);
  FaultInjectionEnv env(Env::Default());
  env.FailAll(OpKind::kCreate, EIO);
  auto t = DiskTier::Open(TestOptions(dir.path()), &env);
  EXPECT_THAT(t, StatusIs(StatusCode::kIOError));
}

}  // namespace
}  // namespace kvtier
