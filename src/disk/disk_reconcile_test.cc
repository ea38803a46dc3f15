// Reconcile and quarantine: adopting files with no row, dropping rows with
// no file, temp files of dead and live writers, foreign entries, other
// layouts, a lost or corrupt index, enforcing the limit on open.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using disk_test::BlockFilePath;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using disk_test::TinyLayout;
using testing::IsOk;

class DiskReconcileTest : public ::testing::Test {
 protected:
  std::unique_ptr<DiskTier> Open(DiskTierOptions o) {
    auto t = DiskTier::Open(o, Env::Default());
    EXPECT_THAT(t, IsOk());
    return t.ok() ? std::move(t).value() : nullptr;
  }
  std::unique_ptr<DiskTier> Open() { return Open(TestOptions(dir_.path())); }
  void StoreAll(DiskTier* t, uint64_t from, uint64_t to) {
    for (uint64_t i = from; i < to; ++i) {
      ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
    }
    ASSERT_THAT(t->Flush(), IsOk());
  }
  bool HitExact(DiskTier* t, uint64_t i) {
    std::vector<std::byte> buf(8192);
    auto r = t->Load(TestBlockKey(i), buf);
    if (!r.ok() || !r->has_value()) return false;
    return CheckBlockFile(std::span(buf).first(**r), TinyLayout(), TestBlockKey(i)).ok();
  }
  // Writes block i's file by hand, as another process (or a lost index)
  // would leave it.
  void WriteBlockFile(uint64_t i, const ModelLayout& layout = TinyLayout()) {
    SharedBlock b = MakeTestBlock(layout, TestBlockKey(i));
    std::string path = BlockFilePath(dir_.path(), TestBlockKey(i));
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
  }
  std::string Subdir(uint64_t i) {
    return fs::path(BlockFilePath(dir_.path(), TestBlockKey(i))).parent_path();
  }
  size_t QuarantineCount() {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir_.Sub("quarantine"))) {
      (void)e;
      ++n;
    }
    return n;
  }

  TempDir dir_;
};

TEST_F(DiskReconcileTest, LostIndexIsRebuiltFromTheFilesInTheBackground) {
  {
    auto t = Open();
    StoreAll(t.get(), 0, 5);
  }
  for (const char* f : {"index.sqlite", "index.sqlite-wal", "index.sqlite-shm"}) {
    fs::remove(dir_.Sub(f));
  }
  DiskTierOptions o = TestOptions(dir_.path());
  o.reconcile_on_open = true;
  auto t = Open(o);
  t->WaitForBackgroundReconcile();
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.reconcile_passes, 1u);
  EXPECT_EQ(s.reconcile_adopted, 5u);
  EXPECT_EQ(s.entries, 5u);
  EXPECT_FALSE(s.reconcile_running);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(HitExact(t.get(), i)) << i;
}

TEST_F(DiskReconcileTest, RowsWhoseFileIsGoneAreDropped) {
  auto t = Open();
  StoreAll(t.get(), 0, 3);
  fs::remove(BlockFilePath(dir_.path(), TestBlockKey(1)));
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->rows_dropped, 1u);
  EXPECT_EQ(r->files_seen, 2u);
  EXPECT_EQ(r->adopted, 0u);
  EXPECT_EQ(t->Stats().entries, 2u);
  EXPECT_FALSE(t->Contains(TestBlockKey(1)));
}

TEST_F(DiskReconcileTest, MissingFileIsAMissNotACrashAndDropsTheRow) {
  auto t = Open();
  StoreAll(t.get(), 0, 2);
  fs::remove(BlockFilePath(dir_.path(), TestBlockKey(0)));
  EXPECT_TRUE(t->Contains(TestBlockKey(0)));  // the index does not know yet
  EXPECT_FALSE(HitExact(t.get(), 0));
  EXPECT_FALSE(t->Contains(TestBlockKey(0)));
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.quarantined, 0u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_TRUE(HitExact(t.get(), 1));
}

pid_t DeadPid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

void SetMtime(const std::string& path, int64_t seconds_ago) {
  struct timeval tv[2];
  tv[0].tv_sec = tv[1].tv_sec = time(nullptr) - seconds_ago;
  tv[0].tv_usec = tv[1].tv_usec = 0;
  ASSERT_EQ(utimes(path.c_str(), tv), 0);
}

TEST_F(DiskReconcileTest, TempFilesNoWriterHoldsGoLiveOnesStay) {
  const pid_t dead = DeadPid();
  auto t = Open();
  StoreAll(t.get(), 0, 1);
  const std::string base = BlockFilePath(dir_.path(), TestBlockKey(0));
  const std::string dead_tmp = base + ".tmp." + std::to_string(dead) + ".1";
  const std::string own_tmp = base + ".tmp." + std::to_string(getpid()) + ".999999";
  const std::string unlocked_tmp = base + ".tmp.1.5";  // pid 1 is alive, but holds nothing
  const std::string stale_tmp = base + ".tmp.1.6";
  const std::string live_tmp = base + ".tmp." + std::to_string(dead) + ".7";
  for (const std::string& p : {dead_tmp, own_tmp, unlocked_tmp, stale_tmp}) {
    std::ofstream(p) << "x";
  }
  SetMtime(stale_tmp, 7200);
  // A writer (in any process, any pid namespace) holds its temp file locked
  // while it is open: whatever pid its name carries, it stays.
  WriteFileOptions wo;
  wo.lock = true;
  auto writer = Env::Default()->CreateFile(live_tmp, wo);
  ASSERT_THAT(writer, IsOk());
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->temps_removed, 4u);
  EXPECT_FALSE(fs::exists(dead_tmp));
  EXPECT_FALSE(fs::exists(own_tmp));
  EXPECT_FALSE(fs::exists(unlocked_tmp));
  EXPECT_FALSE(fs::exists(stale_tmp));
  EXPECT_TRUE(fs::exists(live_tmp));
  EXPECT_EQ(r->quarantined, 0u);
  EXPECT_EQ(t->Stats().reconcile_temps_removed, 4u);
  EXPECT_TRUE(HitExact(t.get(), 0));
  ASSERT_THAT((*writer)->Close(), IsOk());
  r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->temps_removed, 1u);
  EXPECT_FALSE(fs::exists(live_tmp));
}

TEST_F(DiskReconcileTest, ForeignEntriesAreQuarantinedAndNeverServed) {
  auto t = Open();
  StoreAll(t.get(), 0, 1);
  const std::string sub = Subdir(0);
  std::string hex1 = TestBlockKey(1).Hex();
  std::string sub1 = Subdir(1);
  fs::create_directories(sub1);
  // A valid block of key 2, reachable only through a symlink named for key 1.
  WriteBlockFile(2);
  std::string upper = TestBlockKey(3).Hex();
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  fs::create_directories(Subdir(3));
  std::ofstream(sub + "/notes.txt") << "hello";
  std::ofstream(Subdir(3) + "/" + upper + ".safetensors") << "x";
  fs::create_symlink(BlockFilePath(dir_.path(), TestBlockKey(2)),
                     sub1 + "/" + hex1 + ".safetensors");
  std::string hex4 = TestBlockKey(4).Hex();
  fs::create_directories(Subdir(4));
  ASSERT_EQ(mkfifo((Subdir(4) + "/" + hex4 + ".safetensors").c_str(), 0600), 0);
  std::string hex5 = TestBlockKey(5).Hex();
  fs::create_directories(Subdir(5) + "/" + hex5 + ".safetensors");
  std::ofstream(dir_.Sub("blocks/README")) << "x";
  fs::create_directories(dir_.Sub("blocks/zz"));
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->quarantined, 7u);
  EXPECT_EQ(r->adopted, 1u);  // the real file of key 2
  EXPECT_EQ(QuarantineCount(), 7u);
  EXPECT_FALSE(fs::exists(sub + "/notes.txt"));
  EXPECT_FALSE(fs::exists(dir_.Sub("blocks/zz")));
  EXPECT_FALSE(t->Contains(TestBlockKey(1)));
  EXPECT_FALSE(HitExact(t.get(), 1));
  EXPECT_FALSE(HitExact(t.get(), 4));
  EXPECT_TRUE(HitExact(t.get(), 0));
  EXPECT_TRUE(HitExact(t.get(), 2));
  EXPECT_EQ(t->Stats().quarantine_files, 7u);
}

TEST_F(DiskReconcileTest, SymlinkWithARowIsAMissAndQuarantinedOnLoad) {
  auto t = Open();
  StoreAll(t.get(), 0, 1);
  std::string path = BlockFilePath(dir_.path(), TestBlockKey(0));
  std::string elsewhere = dir_.Sub("elsewhere.safetensors");
  fs::rename(path, elsewhere);
  fs::create_symlink(elsewhere, path);
  EXPECT_FALSE(HitExact(t.get(), 0));
  EXPECT_EQ(t->Stats().quarantined, 1u);
  EXPECT_FALSE(fs::is_symlink(path));
  EXPECT_FALSE(t->Contains(TestBlockKey(0)));
}

TEST_F(DiskReconcileTest, UnreadableHeaderIsQuarantinedNotAdopted) {
  auto t = Open();
  std::string path = BlockFilePath(dir_.path(), TestBlockKey(7));
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << std::string(5000, 'z');
  WriteBlockFile(8);
  fs::create_directories(Subdir(9));
  fs::copy_file(BlockFilePath(dir_.path(), TestBlockKey(8)),
                BlockFilePath(dir_.path(), TestBlockKey(9)));  // header names key 8
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->adopted, 1u);
  EXPECT_EQ(r->quarantined, 2u);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_TRUE(HitExact(t.get(), 8));
  EXPECT_FALSE(HitExact(t.get(), 9));
}

TEST_F(DiskReconcileTest, TruncatedIndexedFileIsQuarantinedAndItsRowDropped) {
  auto t = Open();
  StoreAll(t.get(), 0, 2);
  fs::resize_file(BlockFilePath(dir_.path(), TestBlockKey(0)), 3000);
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->quarantined, 1u);
  EXPECT_EQ(r->rows_dropped, 1u);
  EXPECT_FALSE(t->Contains(TestBlockKey(0)));
  EXPECT_TRUE(HitExact(t.get(), 1));
}

TEST_F(DiskReconcileTest, OtherLayoutsAreAdoptedCountedAndKeptButNeverServed) {
  ModelLayout other = ModelLayout::Preset("tiny", 32).value();
  auto t = Open();
  StoreAll(t.get(), 0, 2);
  WriteBlockFile(50, other);
  WriteBlockFile(51, other);
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->adopted, 2u);
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.entries, 4u);
  EXPECT_EQ(s.compatible_entries, 2u);
  ASSERT_EQ(s.per_signature.size(), 2u);
  for (const SignatureUsage& u : s.per_signature) {
    EXPECT_EQ(u.blocks, 2u);
    EXPECT_EQ(u.compatible, u.signature == TinyLayout().Signature());
  }
  EXPECT_FALSE(HitExact(t.get(), 50));
  EXPECT_TRUE(fs::exists(BlockFilePath(dir_.path(), TestBlockKey(50))));
  auto again = t->Reconcile();
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->adopted, 0u);
  EXPECT_EQ(again->quarantined, 0u);
}

TEST_F(DiskReconcileTest, OpeningAnOverBudgetFolderEnforcesTheLimit) {
  {
    auto t = Open();
    StoreAll(t.get(), 0, 10);
  }
  DiskTierOptions o = TestOptions(dir_.path());
  o.max_bytes = 4 * MakeTestBlock(0)->size();
  o.reconcile_on_open = true;
  // A disk that allocates file lengths exactly, so the limit in file bytes
  // is the limit in allocated bytes.
  disk_test::ControlledEnv exact(Env::Default());
  auto opened = DiskTier::Open(o, &exact);
  ASSERT_THAT(opened, IsOk());
  auto t = std::move(opened).value();
  t->WaitForBackgroundReconcile();
  EXPECT_EQ(t->Stats().entries, 4u);
  EXPECT_EQ(t->Stats().evictions, 6u);
  EXPECT_EQ(disk_test::BlockFolderBytes(dir_.path()), o.max_bytes);
}

TEST_F(DiskReconcileTest, CorruptIndexIsSetAsideAndRebuilt) {
  {
    auto t = Open();
    StoreAll(t.get(), 0, 5);
  }
  fs::remove(dir_.Sub("index.sqlite-wal"));
  fs::remove(dir_.Sub("index.sqlite-shm"));
  std::ofstream(dir_.Sub("index.sqlite"), std::ios::trunc) << std::string(4096, 'q');
  DiskTierOptions o = TestOptions(dir_.path());
  o.reconcile_on_open = true;
  auto t = Open(o);
  ASSERT_NE(t, nullptr);
  t->WaitForBackgroundReconcile();
  EXPECT_EQ(t->Stats().entries, 5u);
  for (uint64_t i = 0; i < 5; ++i) EXPECT_TRUE(HitExact(t.get(), i));
  EXPECT_EQ(QuarantineCount(), 1u);
}

TEST_F(DiskReconcileTest, QuarantinedFilesAreRemovedAfterTheirRetention) {
  auto t = Open();
  fs::create_directories(dir_.Sub("quarantine"));
  int64_t now = time(nullptr);
  std::string old_name = std::to_string(now - 8 * 24 * 3600) + "-1-1-x.safetensors";
  std::string new_name = std::to_string(now - 3600) + "-1-2-y.safetensors";
  std::ofstream(dir_.Sub("quarantine/" + old_name)) << "x";
  std::ofstream(dir_.Sub("quarantine/" + new_name)) << "y";
  auto r = t->Reconcile();
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->quarantine_removed, 1u);
  EXPECT_FALSE(fs::exists(dir_.Sub("quarantine/" + old_name)));
  EXPECT_TRUE(fs::exists(dir_.Sub("quarantine/" + new_name)));
}

}  // namespace
}  // namespace kvtier
