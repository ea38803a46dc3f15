// What the disk tier says about faults (issue 33 item 5, disk half): an I/O
// error reading a block file, the index's own I/O errors (naming the file
// and the system call, not only "disk I/O error"), the "nearly full"
// warning for blocks smaller than an allocation unit, and a block that does
// not fit under the limit (saying what exceeds what).
#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <vector>

#include "disk/disk_test_util.h"
#include "disk/sqlite_db.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "testing/fault_env.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk::SqliteDb;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::RecordingLogger;
using testing::StatusIs;

// Blocks of a few hundred bytes: far below a 4 KiB allocation unit.
const ModelLayout& SmallLayout() {
  static const ModelLayout* layout =
      new ModelLayout(ModelLayout::Attention("small", 1, 1, 4, DType::kF16, 1));
  return *layout;
}

// The real Env with a made-up free disk (and real allocation units, which
// ControlledEnv hides).
class FreeSpaceEnv final : public EnvWrapper {
 public:
  FreeSpaceEnv(Env* base, uint64_t free) : EnvWrapper(base), free_(free) {}
  Result<uint64_t> FreeSpace(const std::string&) override { return free_; }

 private:
  const uint64_t free_;
};

TEST(DiskFaultLogTest, ReadIoErrorIsAMissAndOneLineNamingIt) {
  TempDir dir;
  FaultInjectionEnv env(Env::Default());
  RecordingLogger log;
  DiskTierOptions o = TestOptions(dir.path());
  o.info_log = &log;
  auto t = DiskTier::Open(o, &env);
  ASSERT_THAT(t, IsOk());
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*t)->Flush(), IsOk());
  env.FailAll(OpKind::kRead, EIO);
  std::vector<std::byte> buf(MakeTestBlock(0)->size());
  for (uint64_t i = 0; i < 3; ++i) {
    auto r = (*t)->Load(TestBlockKey(i), buf);
    ASSERT_THAT(r, IsOk());
    EXPECT_FALSE(r->has_value());
  }
  env.Clear();
  EXPECT_EQ((*t)->Stats().errors, 3u);
  EXPECT_EQ((*t)->Stats().quarantined, 0u);  // an I/O error is no verdict on the file
  ASSERT_EQ(log.Count("reading a block file failed"), 1u);  // rate-limited: one line
  EXPECT_THAT(log.Matching("reading a block file failed")[0].message,
              HasSubstr("Input/output error"));
  // The files are fine: served once the device reads again.
  auto r = (*t)->Load(TestBlockKey(0), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->has_value());
}

TEST(DiskFaultLogTest, IndexIoErrorNamesTheFileAndTheCall) {
  TempDir dir;
  const std::string path = dir.Sub("index.sqlite");
  {
    auto db = SqliteDb::Open(path, SqliteDb::OpenMode::kReadWriteCreate, 1000);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("PRAGMA journal_mode=WAL; CREATE TABLE t(x);"), IsOk());
  }
  // The WAL cannot be opened (a folder in its place: as root, the one
  // fault no permission bit can fake).
  std::filesystem::create_directory(path + "-wal");
  auto db = SqliteDb::Open(path, SqliteDb::OpenMode::kReadWrite, 1000);
  ASSERT_THAT(db, IsOk());
  Status s = (*db)->Exec("INSERT INTO t VALUES(1)");
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("(" + path + "-wal)"));
  EXPECT_THAT(s.message(), HasSubstr("open"));
  EXPECT_THAT(s.message(), HasSubstr("Is a directory"));
}

TEST(DiskFaultLogTest, NearlyFullFiresForBlocksSmallerThanAnAllocationUnit) {
  TempDir dir;
  const uint64_t file = MakeTestBlock(SmallLayout(), TestBlockKey(0))->size();
  const uint64_t unit = disk_test::AllocatedOnDisk(dir.path(), file);
  ASSERT_GE(unit, 2 * file) << "needs a file system with allocation units above " << file;
  // Half of (held + free) may be used, with 11 units free (read again before
  // the limit binds): k blocks held and one more reach it from k = 10 on in
  // allocated bytes ((k + 1) units > (k + 11) / 2 units); in file lengths
  // they never do.
  FreeSpaceEnv env(Env::Default(), 11 * unit);
  RecordingLogger log;
  DiskTierOptions o = TestOptions(dir.path(), SmallLayout());
  o.info_log = &log;
  o.free_space_fraction = 0.5;
  o.free_space_ttl_micros = 3600ull * 1'000'000;
  o.writer_threads = 1;
  auto t = DiskTier::Open(o, &env);
  ASSERT_THAT(t, IsOk());
  for (uint64_t i = 0; i < 16; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(SmallLayout(), TestBlockKey(i))),
                IsOk());
    ASSERT_THAT((*t)->Flush(), IsOk());
  }
  ASSERT_EQ(log.Count("nearly full"), 1u);
  EXPECT_THAT(log.Matching("nearly full")[0].message, HasSubstr(dir.path()));
  EXPECT_GT((*t)->Stats().evictions, 0u);
}

TEST(DiskFaultLogTest, TooLargeSaysWhatExceedsWhat) {
  TempDir dir;
  const uint64_t file = MakeTestBlock(SmallLayout(), TestBlockKey(0))->size();
  const uint64_t unit = disk_test::AllocatedOnDisk(dir.path(), file);
  ASSERT_GT(unit, file);
  DiskTierOptions o = TestOptions(dir.path(), SmallLayout());
  o.max_bytes = unit - 1;  // a file's length fits; what it takes does not
  o.writer_threads = 1;
  auto t = DiskTier::Open(o, Env::Default());
  ASSERT_THAT(t, IsOk());
  // The first write teaches the tier the allocation unit; the rest fail.
  for (uint64_t i = 0; i < 3; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(SmallLayout(), TestBlockKey(i))),
                IsOk());
    ASSERT_THAT((*t)->Flush(), IsOk());
  }
  DiskTierStats s = (*t)->Stats();
  ASSERT_EQ(s.write_failures.size(), 1u);
  EXPECT_EQ(s.write_failures[0].count, 2u);
  EXPECT_EQ(s.write_failures[0].cause,
            "a block file of " + std::to_string(file) + " bytes would take " +
                std::to_string(unit) + " bytes of disk (in units of " + std::to_string(unit) +
                " bytes), which exceeds the disk tier's effective limit of " +
                std::to_string(unit - 1) + " bytes (on allocated bytes; set by max_bytes)");
}

}  // namespace
}  // namespace kvtier
