// Disk-full and I/O errors: a real ENOSPC on a small tmpfs this test mounts,
// and ENOSPC/EIO injected through FaultInjectionEnv at every step of a write
// and a read. A failed store is never visible, nothing half-written is ever
// served, no temp file is left behind, and the tier recovers when the fault
// goes away.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "disk/disk_test_util.h"
#include "disk_verify.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/fault_env.h"
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

bool HitExact(DiskTier* t, uint64_t i) {
  std::vector<std::byte> buf(8192);
  auto r = t->Load(TestBlockKey(i), buf);
  if (!r.ok() || !r->has_value()) return false;
  return CheckBlockFile(std::span(buf).first(**r), TinyLayout(), TestBlockKey(i)).ok();
}

// Stores block i and waits for its write.
void Put(DiskTier* t, uint64_t i) {
  ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  ASSERT_THAT(t->Flush(), IsOk());
}

// A tmpfs of `bytes` mounted for the test's life.
class ScopedTmpfs {
 public:
  ScopedTmpfs(const std::string& where, uint64_t bytes) : where_(where) {
    fs::create_directories(where);
    std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    if (::mount("tmpfs", where.c_str(), "tmpfs", 0, opts.c_str()) == 0) {
      mounted_ = true;
    } else {
      error_ = std::strerror(errno);
    }
  }
  ~ScopedTmpfs() {
    if (mounted_) ::umount2(where_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& error() const { return error_; }

 private:
  std::string where_;
  bool mounted_ = false;
  std::string error_;
};

// Writes zeros to `path` until the file system is full.
void FillDisk(const std::string& path) {
  std::ofstream f(path, std::ios::binary);
  std::vector<char> chunk(4096, 0);
  while (f.write(chunk.data(), static_cast<std::streamsize>(chunk.size()))) f.flush();
}

TEST(DiskFaultTest, RealEnospcOnASmallTmpfsFailsCleanlyAndRecovers) {
  TempDir dir;
  ScopedTmpfs tmpfs(dir.Sub("mnt"), 1 << 20);
  if (!tmpfs.mounted()) GTEST_SKIP() << "mount -t tmpfs refused: " << tmpfs.error();
  const std::string cache = dir.Sub("mnt/cache");
  DiskTierOptions o = TestOptions(cache);
  o.writer_threads = 1;
  o.max_bytes = 0;                             // only the disk bounds it
  o.free_space_ttl_micros = 3'600'000'000ull;  // keep the stale reading until ENOSPC
  auto tier = DiskTier::Open(o, Env::Default());
  ASSERT_THAT(tier, IsOk());
  DiskTier* t = tier->get();
  for (uint64_t i = 0; i < 20; ++i) Put(t, i);
  for (uint64_t i = 0; i < 20; ++i) ASSERT_TRUE(HitExact(t, i));

  FillDisk(dir.Sub("mnt/filler"));
  for (uint64_t i = 20; i < 30; ++i) Put(t, i);
  DiskTierStats s = t->Stats();
  EXPECT_GE(s.errors, 1u);  // the first store after the disk filled failed
  // Every store either made it whole or is invisible; nothing torn is served.
  uint64_t visible = 0;
  for (uint64_t i = 0; i < 30; ++i) {
    std::vector<std::byte> buf(8192);
    auto r = t->Load(TestBlockKey(i), buf);
    ASSERT_THAT(r, IsOk());
    if (!r->has_value()) continue;
    ++visible;
    EXPECT_THAT(CheckBlockFile(std::span(buf).first(**r), TinyLayout(), TestBlockKey(i)), IsOk());
  }
  EXPECT_EQ(t->Stats().quarantined, 0u);
  // How many survive is not fixed: a write that finds the disk full evicts
  // the oldest blocks to make room and tries again (up to 8 times), and
  // what it frees the index's journal may take first; a loaded tsan run
  // ended with none of the 30 visible (stop 39's fresh-clone run). What is
  // fixed: each one served is whole (above), and stores work again once
  // space returns (below).
  std::cout << "visible after ENOSPC: " << visible << " of 30\n";

  // Space returns: stores work again.
  fs::remove(dir.Sub("mnt/filler"));
  for (uint64_t i = 100; i < 110; ++i) Put(t, i);
  for (uint64_t i = 100; i < 110; ++i) EXPECT_TRUE(HitExact(t, i)) << i;
  ASSERT_THAT(t->Close(), IsOk());
  tier->reset();
  disk_test::FolderReport rep = disk_test::VerifyFolder(cache, &o);
  EXPECT_EQ(rep.wrong, 0u);
  EXPECT_EQ(rep.temp_files, 0u);
  EXPECT_EQ(rep.rows, rep.block_files);
  EXPECT_EQ(rep.served.size(), rep.block_files);
}

struct WriteFault {
  OpKind op;
  int err;
  bool fsync;
  const char* name;
};

void PrintTo(const WriteFault& f, std::ostream* os) { *os << f.name; }

class DiskWriteFaultTest : public ::testing::TestWithParam<WriteFault> {};

TEST_P(DiskWriteFaultTest, FailedStoreIsNeverVisibleAndLeavesNoFile) {
  const WriteFault f = GetParam();
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  env.SetTornAppendBytes(100);  // a failed append leaves a torn prefix behind
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 1;
  o.durability = f.fsync ? Durability::kFsync : Durability::kChecksum;
  auto tier = DiskTier::Open(o, &env);
  ASSERT_THAT(tier, IsOk());
  DiskTier* t = tier->get();
  Put(t, 0);  // also creates block 0's subfolder
  env.FailNth(f.op, 1, f.err);
  Put(t, 1);
  EXPECT_FALSE(t->Contains(TestBlockKey(1)));
  EXPECT_FALSE(HitExact(t, 1));
  EXPECT_FALSE(fs::exists(BlockFilePath(dir.path(), TestBlockKey(1))));
  std::string sub = fs::path(BlockFilePath(dir.path(), TestBlockKey(1))).parent_path();
  if (fs::exists(sub)) {
    for (auto& e : fs::directory_iterator(sub)) {
      EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
    }
  }
  EXPECT_EQ(t->Stats().errors, 1u);
  EXPECT_EQ(t->Stats().saves_persisted, 1u);
  // The fault is gone: the same block stores fine.
  Put(t, 1);
  EXPECT_TRUE(HitExact(t, 1));
  EXPECT_TRUE(HitExact(t, 0));
}

INSTANTIATE_TEST_SUITE_P(
    Faults, DiskWriteFaultTest,
    ::testing::Values(WriteFault{OpKind::kCreate, ENOSPC, false, "CreateEnospc"},
                      WriteFault{OpKind::kAppend, ENOSPC, false, "AppendEnospc"},
                      WriteFault{OpKind::kAppend, EIO, false, "AppendEio"},
                      WriteFault{OpKind::kClose, EIO, false, "CloseEio"},
                      WriteFault{OpKind::kRename, EIO, false, "RenameEio"},
                      WriteFault{OpKind::kSync, EIO, true, "FsyncEio"},
                      WriteFault{OpKind::kSyncDir, EIO, true, "DirFsyncEio"},
                      WriteFault{OpKind::kAppend, ENOSPC, true, "AppendEnospcFsync"}),
    [](const ::testing::TestParamInfo<WriteFault>& info) { return std::string(info.param.name); });

TEST(DiskFaultTest, ReadErrorsAreMissesWithoutQuarantine) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  auto tier = DiskTier::Open(TestOptions(dir.path()), &env);
  ASSERT_THAT(tier, IsOk());
  DiskTier* t = tier->get();
  Put(t, 0);
  env.FailNth(OpKind::kRead, 1, EIO);
  EXPECT_FALSE(HitExact(t, 0));
  EXPECT_EQ(t->Stats().errors, 1u);
  EXPECT_EQ(t->Stats().quarantined, 0u);
  env.FailNth(OpKind::kOpenRead, 1, EIO);
  EXPECT_FALSE(HitExact(t, 0));
  EXPECT_EQ(t->Stats().errors, 2u);
  // The file was fine all along: the next read serves it.
  EXPECT_TRUE(HitExact(t, 0));
  EXPECT_EQ(t->Stats().misses, 2u);
  EXPECT_EQ(t->Stats().hits, 1u);
}

TEST(DiskFaultTest, FreeSpaceErrorFallsBackToTheConfiguredLimit) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  env.FailAll(OpKind::kFreeSpace, EIO);
  DiskTierOptions o = TestOptions(dir.path());
  // Three blocks as the file system allocates them (the unit of the limit).
  o.max_bytes = 3 * disk_test::AllocatedOnDisk(dir.path(), MakeTestBlock(0)->size());
  auto tier = DiskTier::Open(o, &env);
  ASSERT_THAT(tier, IsOk());
  for (uint64_t i = 0; i < 5; ++i) Put(tier->get(), i);
  EXPECT_EQ((*tier)->Stats().entries, 3u);
  EXPECT_TRUE(HitExact(tier->get(), 4));
}

TEST(DiskFaultTest, ReconcileListingErrorIsReportedAndTheTierKeepsServing) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  auto tier = DiskTier::Open(TestOptions(dir.path()), &env);
  ASSERT_THAT(tier, IsOk());
  Put(tier->get(), 0);
  env.FailNth(OpKind::kListDir, 1, EIO);
  EXPECT_THAT((*tier)->Reconcile(), testing::StatusIs(StatusCode::kIOError));
  EXPECT_TRUE(HitExact(tier->get(), 0));
  EXPECT_THAT((*tier)->Reconcile(), IsOk());
}

}  // namespace
}  // namespace kvtier
