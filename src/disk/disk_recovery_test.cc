// Recovery from what a chaos run left behind (issue 25): block files with no
// row (a writer killed between publish and commit) adopted by every writer's
// Open(), a bounded share at a time, and by `gc` before it enforces a limit;
// an index.sqlite that is a symlink, a folder, a FIFO or garbage, named by
// every reader and set aside and rebuilt by every writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "disk/folder_lock.h"
#include "kvtier/cache_folder.h"
#include "kvtier/disk_tier.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

constexpr uint64_t kRecoveryBlocks = 40;

size_t FilesIn(const std::string& dir) {
  size_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    ++n;
  }
  return n;
}

class DiskRecoveryTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskTier> Open(const DiskTierOptions& o) {
    auto t = DiskTier::Open(o, Env::Default());
    EXPECT_THAT(t, IsOk());
    return t.ok() ? std::move(t).value() : nullptr;
  }
  // kRecoveryBlocks blocks on disk, of which the rows of the first `orphans` are
  // dropped (Forget keeps the file): what kill -9 between the publish and
  // the commit leaves.
  void MakeFolder(uint64_t orphans) {
    auto t = Open(TestOptions(dir_.path()));
    ASSERT_NE(t, nullptr);
    for (uint64_t i = 0; i < kRecoveryBlocks; ++i) {
      ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
    }
    ASSERT_THAT(t->Flush(), IsOk());
    for (uint64_t i = 0; i < orphans; ++i) ASSERT_THAT(t->Forget(TestBlockKey(i)), IsOk());
    EXPECT_EQ(t->Stats().entries, kRecoveryBlocks - orphans);
  }
  // As `kvtier synth --cache` opens a folder: no background reconcile.
  DiskTierOptions WriterOptions() {
    DiskTierOptions o = TestOptions(dir_.path());
    o.open_reconcile_entries = DiskTierOptions().open_reconcile_entries;
    return o;
  }
  std::string IndexPath() const { return dir_.path() + "/index.sqlite"; }

  TempDir dir_;
};

TEST_F(DiskRecoveryTest, EveryWritersOpenAdoptsOrphanedFiles) {
  MakeFolder(10);
  // A header that does not verify is not adopted: it is set aside.
  const std::string bad = disk_test::BlockFilePath(dir_.path(), TestBlockKey(0));
  {
    std::fstream f(bad, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(8);
    f.write("garbage!", 8);
  }
  auto t = Open(WriterOptions());
  ASSERT_NE(t, nullptr);
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.reconcile_adopted, 9u);
  EXPECT_EQ(s.entries, kRecoveryBlocks - 1);
  EXPECT_EQ(s.quarantined, 1u);
  EXPECT_FALSE(fs::exists(bad));
  std::vector<std::byte> buf(8192);
  auto got = t->Load(TestBlockKey(5), buf);
  ASSERT_THAT(got, IsOk());
  EXPECT_TRUE(got->has_value());
}

TEST_F(DiskRecoveryTest, AnOpenReconcilesABoundedShare) {
  MakeFolder(kRecoveryBlocks);  // every file an orphan, spread over the subfolders
  DiskTierOptions o = WriterOptions();
  o.open_reconcile_entries = 1;  // one subfolder per open
  uint64_t adopted = 0;
  for (int open = 0; open < 3; ++open) {
    auto t = Open(o);
    ASSERT_NE(t, nullptr);
    const uint64_t now = t->Stats().entries;
    EXPECT_LT(now - adopted, kRecoveryBlocks / 4) << "open " << open << " walked too much";
    adopted = now;
  }
  EXPECT_LT(adopted, kRecoveryBlocks);
  o.open_reconcile_entries = 0;  // none at all
  auto t = Open(o);
  EXPECT_EQ(t->Stats().entries, adopted);
  EXPECT_EQ(t->Stats().reconcile_adopted, 0u);
}

TEST_F(DiskRecoveryTest, GcAdoptsOrphansBeforeItEnforcesTheLimit) {
  MakeFolder(30);  // 10 rows, 40 files
  CacheFolderOptions co;
  co.dir = dir_.path();
  co.access = CacheFolderAccess::kReadWrite;
  auto folder = CacheFolder::Open(co, Env::Default());
  ASSERT_THAT(folder, IsOk());
  auto info = Env::Default()->Stat(disk_test::BlockFilePath(dir_.path(), TestBlockKey(39)));
  ASSERT_THAT(info, IsOk());
  CacheGcRequest req;
  req.max_bytes = 20 * info->allocated_bytes;
  auto plan = (*folder)->PlanGc(req);
  ASSERT_THAT(plan, IsOk());
  EXPECT_EQ(plan->size(), 20u);  // the orphans count toward the limit too
  ASSERT_THAT((*folder)->ApplyGc(*plan), IsOk());
  auto entries = (*folder)->ListEntries();
  ASSERT_THAT(entries, IsOk());
  EXPECT_EQ(entries->size(), 20u);
  auto scan = (*folder)->Scan();
  ASSERT_THAT(scan, IsOk());
  EXPECT_EQ(scan->blocks.size(), 20u);  // every file has its row
  uint64_t allocated = 0;
  for (const auto& f : scan->blocks) allocated += f.allocated_bytes;
  EXPECT_LE(allocated, *req.max_bytes);
  auto verdicts = (*folder)->Verify({});
  ASSERT_THAT(verdicts, IsOk());
  for (const CacheFileVerdict& v : *verdicts) EXPECT_EQ(v.reason, "") << v.path << v.message;
}

// Replaces index.sqlite by `kind`.
void Spoil(const std::string& path, const std::string& kind) {
  for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
  if (kind == "symlink") {
    fs::create_symlink("/dev/zero", path);
  } else if (kind == "folder") {
    fs::create_directory(path);
  } else if (kind == "fifo") {
    ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  } else {
    std::ofstream(path) << std::string(8192, 'x');
  }
}

class HostileIndexTest : public DiskRecoveryTest,
                         public ::testing::WithParamInterface<std::string> {};

TEST_P(HostileIndexTest, ReadersNameItAndWritersSetItAsideAndRebuild) {
  MakeFolder(0);
  Spoil(IndexPath(), GetParam());
  CacheFolderOptions co;
  co.dir = dir_.path();
  EXPECT_TRUE(CacheFolder::Exists(Env::Default(), co.dir));
  // A reader (stats, ls, verify) says which file and what is wrong with it.
  const std::string what = GetParam() == "garbage" ? "is not a usable SQLite database"
                           : GetParam() == "fifo"  ? "is a FIFO, not a regular file"
                           : GetParam() == "folder"
                               ? "is a folder, not a regular file"
                               : "is a symlink, not a regular file";
  EXPECT_THAT(CacheFolder::Open(co, Env::Default()),
              StatusIs(StatusCode::kCorruption, HasSubstr("index " + IndexPath() + " " + what)));
  // A writer with the folder to itself sets it aside and starts anew...
  auto t = Open(WriterOptions());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(FilesIn(dir_.path() + "/quarantine"), 1u);
  struct stat st;
  ASSERT_EQ(lstat(IndexPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  // ... and the reconcile fills the new index from the files.
  auto rep = t->Reconcile();
  ASSERT_THAT(rep, IsOk());
  EXPECT_EQ(t->Stats().entries, kRecoveryBlocks);
  ASSERT_THAT(t->Store(TestBlockKey(100), MakeTestBlock(100)), IsOk());
  ASSERT_THAT(t->Flush(), IsOk());
  EXPECT_EQ(t->Stats().errors, 0u);
}

TEST_P(HostileIndexTest, GcSetsItAsideAndAdoptsEveryFile) {
  MakeFolder(0);
  Spoil(IndexPath(), GetParam());
  CacheFolderOptions co;
  co.dir = dir_.path();
  co.access = CacheFolderAccess::kReadWrite;
  {
    // Not while a tier has the folder open: it would go on with the old one.
    auto other = disk::FolderLock::Acquire(Env::Default(), disk::FolderLayout(dir_.path()),
                                           FileLock::kShared, 0600, 0);
    ASSERT_THAT(other, IsOk());
    EXPECT_THAT(CacheFolder::Open(co, Env::Default()),
                StatusIs(StatusCode::kUnavailable, HasSubstr(IndexPath())));
  }
  auto folder = CacheFolder::Open(co, Env::Default());
  ASSERT_THAT(folder, IsOk());
  CacheGcRequest req;
  req.quarantine = false;  // keep the old index for inspection
  auto plan = (*folder)->PlanGc(req);
  ASSERT_THAT(plan, IsOk());
  EXPECT_TRUE(plan->empty());
  ASSERT_THAT((*folder)->ApplyGc(*plan), IsOk());
  auto entries = (*folder)->ListEntries();
  ASSERT_THAT(entries, IsOk());
  EXPECT_EQ(entries->size(), kRecoveryBlocks);
  EXPECT_EQ(FilesIn(dir_.path() + "/quarantine"), 1u);
}

INSTANTIATE_TEST_SUITE_P(Kinds, HostileIndexTest,
                         ::testing::Values("symlink", "folder", "fifo", "garbage"));

}  // namespace
}  // namespace kvtier
