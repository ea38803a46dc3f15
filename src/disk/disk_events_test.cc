// The disk tier's events (DESIGN.md §7) reach DiskTierOptions::info_log, one
// line per kind however many times it happens (rate-limited): free-disk
// pressure, ENOSPC, quarantine, the inline-write fallback and drops of a
// full queue, failed writes; and the distinct causes of failed writes are
// counted in DiskTierStats::write_failures.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <fstream>

#include "disk/disk_events.h"
#include "disk/disk_test_util.h"
#include "disk/kill_points.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/fault_env.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::BlockFilePath;
using disk_test::BlockFolderBytes;
using disk_test::ControlledEnv;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using testing::IsOk;
using testing::RecordingLogger;
using testing::StatusIs;

class DiskEventsTest : public ::testing::Test {
 protected:
  DiskEventsTest() : env_(Env::Default()) {}

  DiskTierOptions Options() {
    DiskTierOptions o = TestOptions(dir_.path());
    o.writer_threads = 1;
    o.info_log = &logger_;
    return o;
  }
  std::unique_ptr<DiskTier> Open(const DiskTierOptions& o, Env* env = nullptr) {
    auto t = DiskTier::Open(o, env != nullptr ? env : &env_);
    EXPECT_THAT(t, IsOk());
    return t.ok() ? std::move(t).value() : nullptr;
  }

  TempDir dir_;
  ControlledEnv env_;
  RecordingLogger logger_;
};

TEST_F(DiskEventsTest, FreeDiskPressureIsOneWarning) {
  const uint64_t size = MakeTestBlock(0)->size();
  const std::string dir = dir_.path();
  // A disk with room for 5 blocks, whatever the configured limit says.
  const uint64_t disk = 5 * size;
  env_.SetFreeSpace([dir, disk] { return disk - std::min(disk, BlockFolderBytes(dir)); });
  DiskTierOptions o = Options();
  o.writer_threads = 0;
  o.free_space_ttl_micros = 0;
  o.free_space_fraction = 1.0;
  auto t = Open(o);
  for (uint64_t i = 0; i < 12; ++i) {
    ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  EXPECT_GT(t->Stats().evictions, 1u);
  auto lines = logger_.Matching("nearly full");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
  EXPECT_THAT(lines[0].message, HasSubstr("disk: " + dir));
  EXPECT_THAT(lines[0].message, HasSubstr("stores evict"));
}

TEST_F(DiskEventsTest, EnospcIsOneErrorAndItsCauseIsCounted) {
  FaultInjectionEnv faults(&env_);
  auto t = Open(Options(), &faults);
  faults.FailAll(OpKind::kAppend, ENOSPC);
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(t->Flush(), IsOk());
  const DiskTierStats s = t->Stats();
  EXPECT_EQ(s.errors, 4u);
  auto lines = logger_.Matching("no space left");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kError);
  EXPECT_THAT(lines[0].message, HasSubstr("No space left on device"));
  ASSERT_THAT(s.write_failures, SizeIs(1));
  EXPECT_EQ(s.write_failures[0].count, 4u);
  EXPECT_THAT(s.write_failures[0].cause, HasSubstr("No space left on device"));
  EXPECT_THAT(s.write_failures[0].cause, HasSubstr("<key>"));
  EXPECT_THAT(s.write_failures[0].cause, Not(HasSubstr(TestBlockKey(0).Hex())));
  // The failed writes themselves: one line for the four.
  EXPECT_THAT(logger_.Matching("block write failed"), SizeIs(1));
}

TEST_F(DiskEventsTest, DistinctWriteFailureCausesAreCountedOnce) {
  FaultInjectionEnv faults(&env_);
  auto t = Open(Options(), &faults);
  faults.FailAll(OpKind::kCreate, EACCES);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(t->Flush(), IsOk());
  faults.Clear();
  faults.FailAll(OpKind::kRename, EIO);
  for (uint64_t i = 10; i < 12; ++i) {
    ASSERT_THAT(t->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(t->Flush(), IsOk());
  const DiskTierStats s = t->Stats();
  EXPECT_EQ(s.errors, 8u);
  ASSERT_THAT(s.write_failures, SizeIs(2));
  EXPECT_EQ(s.write_failures[0].count, 6u);  // most frequent first
  EXPECT_THAT(s.write_failures[0].cause, HasSubstr("Permission denied"));
  EXPECT_EQ(s.write_failures[1].count, 2u);
  EXPECT_THAT(s.write_failures[1].cause, HasSubstr("Input/output error"));
  auto lines = logger_.Matching("block write failed");
  ASSERT_THAT(lines, SizeIs(1));  // rate-limited
  EXPECT_EQ(lines[0].level, LogLevel::kError);
  EXPECT_THAT(lines[0].message, HasSubstr("Permission denied"));
}

TEST_F(DiskEventsTest, QuarantineIsAWarningNamingTheFile) {
  auto t = Open(Options());
  ASSERT_THAT(t->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(t->Flush(), IsOk());
  const std::string path = BlockFilePath(dir_.path(), TestBlockKey(1));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  std::vector<std::byte> buf(1 << 20);
  auto r = t->Load(TestBlockKey(1), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ(t->Stats().quarantined, 1u);
  auto lines = logger_.Matching("quarantine");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
  EXPECT_THAT(lines[0].message, HasSubstr(path));
}

// The first write waits at a kill point until released; the others pass.
struct FirstWriteGate {
  disk::KillHook Hook() {
    return [this](DiskKillPoint p) {
      if (p != DiskKillPoint::kBeforeWrite || first.exchange(false) == false) return;
      std::unique_lock<std::mutex> lock(mu);
      arrived = true;
      cv.notify_all();
      cv.wait(lock, [&] { return open; });
    };
  }
  void WaitArrived() {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return arrived; });
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  std::atomic<bool> first{true};
  std::mutex mu;
  std::condition_variable cv;
  bool arrived = false;
  bool open = false;
};

TEST_F(DiskEventsTest, AFullQueueWritesInlineAndSaysSoOnce) {
  DiskTierOptions o = Options();
  o.queue_max_bytes = MakeTestBlock(0)->size();  // one block
  o.queue_wait_micros = 0;
  FirstWriteGate gate;
  auto t = disk::OpenWithKillHook(o, &env_, gate.Hook());
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT((*t)->Store(TestBlockKey(0), MakeTestBlock(0)), IsOk());
  gate.WaitArrived();  // block 0 holds the queue's bytes while it is written
  for (uint64_t i = 1; i < 4; ++i) {
    ASSERT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  gate.Release();
  ASSERT_THAT((*t)->Flush(), IsOk());
  EXPECT_EQ((*t)->Stats().inline_writes, 3u);
  auto lines = logger_.Matching("written on the caller's thread");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
}

TEST_F(DiskEventsTest, AFullQueueDropsAndSaysSoOnce) {
  DiskTierOptions o = Options();
  o.queue_max_bytes = MakeTestBlock(0)->size();
  o.queue_wait_micros = 0;
  o.on_pressure = OnPressure::kDrop;
  FirstWriteGate gate;
  auto t = disk::OpenWithKillHook(o, &env_, gate.Hook());
  ASSERT_THAT(t, IsOk());
  ASSERT_THAT((*t)->Store(TestBlockKey(0), MakeTestBlock(0)), IsOk());
  gate.WaitArrived();
  for (uint64_t i = 1; i < 4; ++i) {
    EXPECT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)),
                StatusIs(StatusCode::kResourceExhausted));
  }
  gate.Release();
  ASSERT_THAT((*t)->Flush(), IsOk());
  EXPECT_EQ((*t)->Stats().drops, 3u);
  auto lines = logger_.Matching("dropped (on_pressure=drop)");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
}

TEST_F(DiskEventsTest, NoLoggerNoLinesAndTheCausesStillCounted) {
  FaultInjectionEnv faults(&env_);
  DiskTierOptions o = Options();
  o.info_log = nullptr;
  auto t = Open(o, &faults);
  faults.FailAll(OpKind::kCreate, EACCES);
  ASSERT_THAT(t->Store(TestBlockKey(0), MakeTestBlock(0)), IsOk());
  ASSERT_THAT(t->Flush(), IsOk());
  EXPECT_THAT(logger_.Lines(), SizeIs(0));
  ASSERT_THAT(t->Stats().write_failures, SizeIs(1));
}

TEST(WriteFailureCause, LeavesOutWhatDiffersBetweenBlocks) {
  const std::string hex = TestBlockKey(3).Hex();
  Status s(StatusCode::kIOError,
           "write block " + hex + ": create /c/blocks/" + hex.substr(0, 2) + "/" + hex +
               ".safetensors.tmp.4242.17: Permission denied",
           EACCES);
  EXPECT_EQ(disk::WriteFailureCauseOf(s),
            "write block <key>: create /c/blocks/*/<key>.safetensors.tmp.*: Permission denied");
  Status sql(StatusCode::kIOError,
             "index block " + hex +
                 ": index: INSERT INTO blocks(key, sig, size) VALUES(?1, ?2, ?3): attempt to "
                 "write a readonly database",
             EPERM);
  EXPECT_EQ(disk::WriteFailureCauseOf(sql),
            "index block <key>: index: INSERT ...: attempt to write a readonly database "
            "(Operation not permitted)");
  EXPECT_EQ(disk::WriteFailureCauseOf(Status(StatusCode::kIOError, "mkdir /c/blocks/ab: x", 0)),
            "mkdir /c/blocks/*: x");
}

}  // namespace
}  // namespace kvtier
