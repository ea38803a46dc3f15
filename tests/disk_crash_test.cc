// Crash safety of the disk tier: a child process storing blocks is killed
// with SIGKILL at random moments (100 times) and at each whitebox kill point;
// after every kill the folder reopens with a sound index and every block it
// serves is exactly the block its key names.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <set>
#include <thread>

#include "disk/disk_test_util.h"
#include "disk_child.h"
#include "disk_verify.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

using disk_child::ChildParams;
using disk_child::ProgressPipe;
using disk_child::SpawnDiskChild;
using disk_child::WaitChild;
using disk_test::FolderReport;
using disk_test::TempDir;
using disk_test::VerifyFolder;

constexpr int kKilled = 128 + SIGKILL;

// Each child is killed at a random moment of its store loop, but only after
// it has reported a random number of blocks persisted: what reaches the disk
// before the kill depends on the child's progress, not on the machine's
// speed.
TEST(DiskCrashTest, HundredRandomKillsLeaveAConsistentFolder) {
  TempDir dir;
  const uint64_t block = disk_test::MakeTestBlock(0)->size();
  std::mt19937_64 rng(20240601);
  std::set<BlockKey> before;  // served after the previous kill
  uint64_t max_served = 0;
  for (int iter = 0; iter < 100; ++iter) {
    ChildParams p;
    p.mode = "store_loop";
    p.dir = dir.path();
    p.seed = static_cast<uint64_t>(iter);
    p.max_bytes = 120 * block;  // small: evictions happen and checks stay fast
    p.fsync = iter % 4 == 3;
    p.writer_threads = 1 + iter % 2;
    const uint64_t persisted = 1 + rng() % 60;
    const auto extra = std::chrono::microseconds(rng() % 20'000);
    ProgressPipe progress;
    pid_t pid = SpawnDiskChild(p, &progress);
    ASSERT_GT(pid, 0);
    if (!progress.WaitFor(persisted)) {
      FAIL() << "iteration " << iter << ": the child exited with " << WaitChild(pid) << " after "
             << progress.last() << " blocks persisted";
    }
    // The loop goes on meanwhile: the kill lands anywhere in a store.
    std::this_thread::sleep_for(extra);
    ASSERT_EQ(kill(pid, SIGKILL), 0);
    ASSERT_EQ(WaitChild(pid), kKilled) << "iteration " << iter << ": the child exited on its own";
    FolderReport rep = VerifyFolder(dir.path());
    ASSERT_EQ(rep.wrong, 0u) << "iteration " << iter;
    ASSERT_EQ(rep.temp_files, 0u) << "iteration " << iter;
    ASSERT_EQ(rep.quarantined, 0u) << "iteration " << iter;  // a kill never tears a file
    ASSERT_EQ(rep.served.size(), rep.block_files) << "iteration " << iter;
    ASSERT_EQ(rep.rows, rep.block_files) << "iteration " << iter;
    // Every block the child reported persisted survived the kill, less at
    // most the two its own loop erased (blocks 39 and 89: it erases block
    // i - 10 after store i when i % 50 == 49). Older children's blocks are
    // evicted before any of this child's, and up to 60 of them fit.
    uint64_t fresh = 0;
    for (const BlockKey& k : rep.served) fresh += before.count(k) == 0 ? 1 : 0;
    ASSERT_GE(fresh + 2, persisted)
        << "iteration " << iter << ": " << progress.last() << " reported persisted";
    before = rep.served;
    max_served = std::max<uint64_t>(max_served, rep.served.size());
  }
  EXPECT_GT(max_served, 20u);  // the children did get blocks onto disk
}

struct KillCase {
  DiskKillPoint point;
  bool fsync;
};

void PrintTo(const KillCase& c, std::ostream* os) {
  *os << "point " << static_cast<int>(c.point) << (c.fsync ? " fsync" : " checksum");
}

class DiskKillPointTest : public ::testing::TestWithParam<KillCase> {};

TEST_P(DiskKillPointTest, CrashAtThePointLosesAtMostTheBlockInFlight) {
  const KillCase c = GetParam();
  TempDir dir;
  const uint64_t block = disk_test::MakeTestBlock(0)->size();
  ChildParams p;
  p.mode = "kill_point";
  p.dir = dir.path();
  p.seed = 7;
  p.fsync = c.fsync;
  p.kill_point = static_cast<int>(c.point);
  // Stores are one at a time; die during the third (or the first eviction,
  // which the fifth block of a four-block folder causes).
  p.kill_at = 3;
  if (c.point == DiskKillPoint::kMidEviction) {
    p.max_bytes = 4 * block;
    p.kill_at = 1;
  }
  pid_t pid = SpawnDiskChild(p);
  ASSERT_GT(pid, 0);
  ASSERT_EQ(WaitChild(pid), kKilled);

  DiskTierOptions o = disk_test::TestOptions(dir.path());
  if (p.max_bytes != 0) o.max_bytes = p.max_bytes;
  FolderReport rep = VerifyFolder(dir.path(), &o);
  EXPECT_EQ(rep.wrong, 0u);
  EXPECT_EQ(rep.temp_files, 0u);
  EXPECT_EQ(rep.quarantined, 0u);
  EXPECT_EQ(rep.rows, rep.block_files);
  EXPECT_EQ(rep.served.size(), rep.block_files);
  auto key = [](uint64_t i) { return TestBlockKey(7 * 1'000'000 + i); };
  std::set<BlockKey> expected;
  switch (c.point) {
    case DiskKillPoint::kBeforeWrite:
    case DiskKillPoint::kMidWrite:
    case DiskKillPoint::kBeforeRename:
      expected = {key(0), key(1)};  // the third never became visible
      break;
    case DiskKillPoint::kBeforeDirSync:
    case DiskKillPoint::kBeforeIndexCommit:
    case DiskKillPoint::kAfterIndexCommit:
      expected = {key(0), key(1), key(2)};  // renamed: adopted by the reconcile
      break;
    case DiskKillPoint::kMidEviction:
      expected = {key(1), key(2), key(3)};  // block 0 was being evicted, 4 never written
      break;
  }
  EXPECT_EQ(rep.served, expected);
}

std::string KillCaseName(const ::testing::TestParamInfo<KillCase>& info) {
  static const char* const kNames[] = {"BeforeWrite",   "MidWrite",          "BeforeRename",
                                       "BeforeDirSync", "BeforeIndexCommit", "MidEviction",
                                       "AfterIndexCommit"};
  return std::string(kNames[static_cast<int>(info.param.point)]) +
         (info.param.fsync ? "_Fsync" : "_Checksum");
}

INSTANTIATE_TEST_SUITE_P(AllPoints, DiskKillPointTest,
                         ::testing::Values(KillCase{DiskKillPoint::kBeforeWrite, false},
                                           KillCase{DiskKillPoint::kMidWrite, false},
                                           KillCase{DiskKillPoint::kBeforeRename, false},
                                           KillCase{DiskKillPoint::kBeforeIndexCommit, false},
                                           KillCase{DiskKillPoint::kMidEviction, false},
                                           KillCase{DiskKillPoint::kBeforeWrite, true},
                                           KillCase{DiskKillPoint::kMidWrite, true},
                                           KillCase{DiskKillPoint::kBeforeRename, true},
                                           KillCase{DiskKillPoint::kBeforeDirSync, true},
                                           KillCase{DiskKillPoint::kBeforeIndexCommit, true},
                                           KillCase{DiskKillPoint::kMidEviction, true}),
                         KillCaseName);

}  // namespace
}  // namespace kvtier
