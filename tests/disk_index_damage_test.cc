// A damaged index that SQLite still opens (issue 33 item 2): index pages
// overwritten with garbage, the file cut short, a checkpoint killed with
// kill -9 followed by a lost WAL. A tier that finds the damage at any time
// (not only at open) sets the index aside once no other process has the
// folder open, rebuilds it and reconciles the block files into it: no valid
// block is lost, writes and gc work, orphans are adopted, and one log line
// names the cause.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "disk/disk_test_util.h"
#include "disk/kill_points.h"
#include "disk_child.h"
#include "disk_verify.h"
#include "kvtier/cache_folder.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using testing::IsOk;
using testing::RecordingLogger;

constexpr uint64_t kBlocks = 1200;
constexpr uint64_t kPageBytes = 4096;  // SQLite's default page size

// Options of the tier that meets the damage: loads go through the index
// row (a retention makes every load ask for its row), so damage under any
// row is found by a load.
DiskTierOptions ServingOptions(const std::string& dir, Logger* log) {
  DiskTierOptions o = TestOptions(dir);
  o.retention_seconds = int64_t{10} * 365 * 24 * 3600;
  o.info_log = log;
  return o;
}

void Fill(const std::string& dir, uint64_t first, uint64_t count) {
  auto t = DiskTier::Open(TestOptions(dir), Env::Default());
  ASSERT_THAT(t, IsOk());
  for (uint64_t i = first; i < first + count; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*t)->Close(), IsOk());
}

// Overwrites 1-based page `page` of the index with bytes that are no
// SQLite page.
void DamagePage(const std::string& index, uint64_t page, uint64_t seed) {
  std::fstream f(index, std::ios::binary | std::ios::in | std::ios::out);
  ASSERT_TRUE(f.good());
  std::mt19937_64 rng(seed);
  std::vector<char> garbage(kPageBytes);
  for (char& c : garbage) c = static_cast<char>(rng());
  f.seekp(static_cast<std::streamoff>((page - 1) * kPageBytes));
  f.write(garbage.data(), static_cast<std::streamsize>(garbage.size()));
}

uint64_t IndexPages(const std::string& dir) {
  return fs::file_size(dir + "/index.sqlite") / kPageBytes;
}

// Loads blocks [first, first + count) and counts those served with exactly
// their bytes; `wrong` counts any other bytes.
uint64_t Served(DiskTier* t, uint64_t first, uint64_t count, uint64_t* wrong) {
  uint64_t served = 0;
  std::vector<std::byte> buf(MakeTestBlock(0)->size());
  for (uint64_t i = first; i < first + count; ++i) {
    auto r = t->Load(TestBlockKey(i), buf);
    if (!r.ok() || !r->has_value()) continue;
    const SharedBlock want = MakeTestBlock(i);
    if (**r == want->size() && std::equal(buf.begin(), buf.end(), want->span().begin())) {
      ++served;
    } else {
      ++*wrong;
    }
  }
  return served;
}

// Block writes that failed, all causes.
uint64_t FailedWrites(const DiskTierStats& s) {
  uint64_t n = 0;
  for (const WriteFailureCause& c : s.write_failures) n += c.count;
  return n;
}

// What a tier that meets a damaged index does, end to end: every call a
// serving process makes (contains, loads, a walk of the keys, the limit),
// then the repair it asked for, then every block served, new writes, gc.
void ServeRepairAndCheck(const std::string& dir, uint64_t blocks) {
  RecordingLogger log;
  auto t = DiskTier::Open(ServingOptions(dir, &log), Env::Default());
  ASSERT_THAT(t, IsOk());
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < blocks; ++i) (void)(*t)->Contains(TestBlockKey(i));
  (void)Served(t->get(), 0, blocks, &wrong);
  (void)(*t)->ForEachKey([](const BlockKey&, uint64_t) {});
  (void)(*t)->EnforceLimit();
  (void)(*t)->Flush();  // the loads' access times, on this thread: damage they meet is seen now
  (*t)->WaitForBackgroundReconcile();
  // Repaired (or never damaged where these calls look): all served.
  EXPECT_EQ(Served(t->get(), 0, blocks, &wrong), blocks);
  // Writes work: 50 new blocks, all served. Each is persisted, or (when
  // its row's commit is what met the damage) a failed write whose file
  // the repair adopted.
  const uint64_t persisted_before = (*t)->Stats().saves_persisted;
  const uint64_t failed_before = FailedWrites((*t)->Stats());
  for (uint64_t i = blocks; i < blocks + 50; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*t)->Flush(), IsOk());
  (*t)->WaitForBackgroundReconcile();  // damage only a write reached
  const DiskTierStats written = (*t)->Stats();
  EXPECT_EQ(written.saves_persisted - persisted_before + FailedWrites(written) - failed_before,
            50u);
  EXPECT_EQ(Served(t->get(), blocks, 50, &wrong), 50u);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ((*t)->Stats().entries, blocks + 50);
  EXPECT_LE(log.Count("the index is damaged"), 1u);
  ASSERT_THAT((*t)->Close(), IsOk());
  t->reset();  // the folder lock goes with the tier
  // gc works (its quick check finds whatever no call above reached) and
  // adopts the orphans: a file with no row, made by Forget().
  {
    auto f = DiskTier::Open(TestOptions(dir), Env::Default());
    ASSERT_THAT(f, IsOk());
    ASSERT_THAT((*f)->Forget(TestBlockKey(0)), IsOk());
    ASSERT_THAT((*f)->Close(), IsOk());
  }
  CacheFolderOptions fo;
  fo.dir = dir;
  fo.access = CacheFolderAccess::kReadWrite;
  auto folder = CacheFolder::Open(fo, Env::Default());
  ASSERT_THAT(folder, IsOk());
  auto plan = (*folder)->PlanGc(CacheGcRequest{});
  ASSERT_THAT(plan, IsOk());
  ASSERT_THAT((*folder)->ApplyGc(*plan), IsOk());
  folder->reset();
  EXPECT_EQ(disk_test::IndexIntegrity(dir), "ok");
  auto after = DiskTier::Open(TestOptions(dir), Env::Default());
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ((*after)->Stats().entries, blocks + 50);
  EXPECT_EQ(Served(after->get(), 0, blocks + 50, &wrong), blocks + 50);
  EXPECT_EQ(wrong, 0u);
}

class DamagedPageTest : public ::testing::TestWithParam<int> {};

// The page: 1 (the header), 2 and 3, then at 1/4, 1/2, 3/4 of the file and
// the last page.
TEST_P(DamagedPageTest, NoValidBlockIsLost) {
  TempDir dir;
  Fill(dir.path(), 0, kBlocks);
  const uint64_t pages = IndexPages(dir.path());
  ASSERT_GE(pages, 20u);
  uint64_t page = 0;
  switch (GetParam()) {
    case 0:
      page = 1;
      break;
    case 1:
      page = 2;
      break;
    case 2:
      page = 3;
      break;
    case 3:
      page = pages / 4;
      break;
    case 4:
      page = pages / 2;
      break;
    case 5:
      page = pages * 3 / 4;
      break;
    default:
      page = pages;
      break;
  }
  DamagePage(dir.path() + "/index.sqlite", page, 1000 + page);
  ServeRepairAndCheck(dir.path(), kBlocks);
}

INSTANTIATE_TEST_SUITE_P(Pages, DamagedPageTest, ::testing::Range(0, 7));

// The damage met by a block write's own commit (its file in place, its row
// not): the write fails, and its file stays for the repair to adopt. It
// was removed as for any failed commit, and the block lost (CI: 48 of 50
// writes in DamagedPageTest/6 when the writes, not the loads, met the
// damaged last page).
TEST(DamagedIndexTest, AWriteWhoseCommitMeetsTheDamageKeepsItsBlock) {
  TempDir dir;
  Fill(dir.path(), 0, kBlocks);
  const std::string index = dir.path() + "/index.sqlite";
  RecordingLogger log;
  bool damaged = false;
  auto t = disk::OpenWithKillHook(ServingOptions(dir.path(), &log), Env::Default(),
                                  [&](DiskKillPoint point) {
                                    if (point != DiskKillPoint::kBeforeIndexCommit || damaged) {
                                      return;
                                    }
                                    damaged = true;  // every page but the header
                                    for (uint64_t p = 2; p <= IndexPages(dir.path()); ++p) {
                                      DamagePage(index, p, 99 + p);
                                    }
                                  });
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT((*t)->Store(TestBlockKey(kBlocks), MakeTestBlock(kBlocks)), IsOk());
  ASSERT_THAT((*t)->Flush(), IsOk());
  (*t)->WaitForBackgroundReconcile();
  ASSERT_TRUE(damaged);
  const DiskTierStats s = (*t)->Stats();
  EXPECT_EQ(s.saves_persisted, 0u);
  ASSERT_EQ(s.write_failures.size(), 1u);
  EXPECT_THAT(s.write_failures[0].cause, ::testing::HasSubstr("malformed"));
  EXPECT_EQ(s.reconcile_adopted, kBlocks + 1);
  EXPECT_EQ(s.entries, kBlocks + 1);
  EXPECT_EQ(log.Count("set aside in quarantine/ and rebuilt"), 1u);
  uint64_t wrong = 0;
  EXPECT_EQ(Served(t->get(), 0, kBlocks + 1, &wrong), kBlocks + 1);
  EXPECT_EQ(wrong, 0u);
}

class TruncatedIndexTest : public ::testing::TestWithParam<int> {};

// Cut to a whole number of pages (1/3, 2/3) and mid-page.
TEST_P(TruncatedIndexTest, NoValidBlockIsLost) {
  TempDir dir;
  Fill(dir.path(), 0, kBlocks);
  const std::string index = dir.path() + "/index.sqlite";
  const uint64_t size = fs::file_size(index);
  uint64_t to = 0;
  switch (GetParam()) {
    case 0:
      to = size / kPageBytes / 3 * kPageBytes;
      break;
    case 1:
      to = size / kPageBytes * 2 / 3 * kPageBytes;
      break;
    default:
      to = size / 2 + 1234;
      break;
  }
  fs::resize_file(index, to);
  ServeRepairAndCheck(dir.path(), kBlocks);
}

INSTANTIATE_TEST_SUITE_P(Cuts, TruncatedIndexTest, ::testing::Range(0, 3));

TEST(DamagedIndexTest, WhileAnotherTierHasTheFolderOpenItServesFromFilesAndWaits) {
  TempDir dir;
  Fill(dir.path(), 0, kBlocks);
  RecordingLogger log;
  DiskTierOptions o = ServingOptions(dir.path(), &log);
  auto first = DiskTier::Open(o, Env::Default());
  ASSERT_THAT(first, IsOk());
  auto other = DiskTier::Open(TestOptions(dir.path()), Env::Default());
  ASSERT_THAT(other, IsOk());
  // Damaged under both (as a lost WAL or a torn write leaves it): a run of
  // pages from the middle on, some of them the blocks table's.
  for (uint64_t p = IndexPages(dir.path()) / 2; p < IndexPages(dir.path()) - 1; ++p) {
    DamagePage(dir.path() + "/index.sqlite", p, 7 + p);
  }
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < kBlocks; ++i) (void)(*first)->Contains(TestBlockKey(i));
  (void)Served(first->get(), 0, kBlocks, &wrong);
  (void)(*first)->Flush();
  (*first)->WaitForBackgroundReconcile();
  EXPECT_EQ(wrong, 0u);
  ASSERT_GE(log.Count("other processes have the folder open"), 1u);
  EXPECT_THAT(log.Matching("the index is damaged")[0].message,
              ::testing::HasSubstr("database disk image is malformed"));
  // The other one closes: the next damage found repairs it.
  ASSERT_THAT((*other)->Close(), IsOk());
  other->reset();
  for (uint64_t i = 0; i < kBlocks; ++i) (void)(*first)->Contains(TestBlockKey(i));
  (void)Served(first->get(), 0, kBlocks, &wrong);
  (void)(*first)->Flush();
  (*first)->WaitForBackgroundReconcile();
  EXPECT_EQ(Served(first->get(), 0, kBlocks, &wrong), kBlocks);
  EXPECT_EQ(wrong, 0u);
  EXPECT_EQ(log.Count("set aside in quarantine/ and rebuilt"), 1u);
  EXPECT_EQ((*first)->Stats().entries, kBlocks);
}

// kill -9 of a writer while it checkpoints (the WAL is checkpointed every
// 256 pages, so a writer storing without pause is often in one), then the
// WAL lost, as a volatile disk cache loses it. Several cycles, each on the
// folder the last one left.
TEST(DamagedIndexTest, CheckpointKillThenLostWal) {
  TempDir dir;
  Fill(dir.path(), 0, 200);
  uint64_t wrong = 0;
  for (int cycle = 0; cycle < 6; ++cycle) {
    disk_child::ChildParams p;
    p.mode = "store_loop";
    p.dir = dir.path();
    p.seed = static_cast<uint64_t>(cycle + 1);
    disk_child::ProgressPipe progress;
    const pid_t pid = disk_child::SpawnDiskChild(p, &progress);
    ASSERT_GT(pid, 0);
    // Past a few checkpoints' worth of rows, at a point that differs from
    // cycle to cycle.
    ASSERT_TRUE(progress.WaitFor(300 + 97 * static_cast<uint64_t>(cycle)));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    std::error_code ec;
    fs::remove(dir.path() + "/index.sqlite-wal", ec);
    // Every block file that verifies must be served after the repair.
    RecordingLogger log;
    DiskTierOptions o = ServingOptions(dir.path(), &log);
    o.reconcile_on_open = true;  // the rows the WAL held are gone: adopt their files
    auto t = DiskTier::Open(o, Env::Default());
    ASSERT_THAT(t, IsOk()) << "cycle " << cycle;
    (*t)->WaitForBackgroundReconcile();
    (void)(*t)->ForEachKey([](const BlockKey&, uint64_t) {});
    (void)(*t)->EnforceLimit();
    (*t)->WaitForBackgroundReconcile();
    ASSERT_THAT((*t)->Close(), IsOk());
    t->reset();
    disk_test::FolderReport rep = disk_test::VerifyFolder(dir.path());
    EXPECT_EQ(rep.wrong, 0u) << "cycle " << cycle;
    EXPECT_EQ(rep.served.size(), rep.block_files) << "cycle " << cycle;
    EXPECT_EQ(rep.rows, rep.block_files) << "cycle " << cycle;
    for (uint64_t i = 0; i < 200; ++i) {
      EXPECT_EQ(rep.served.count(TestBlockKey(i)), 1u) << "cycle " << cycle << " block " << i;
    }
  }
  (void)wrong;
}

}  // namespace
}  // namespace kvtier
