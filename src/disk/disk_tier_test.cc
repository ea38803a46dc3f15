// DiskTier: store/load round trips, restart from the index, the public
// operations (Erase, Forget, Clear, LoadMany, SizeOf), back-pressure modes,
// permissions and closing.
#include "kvtier/disk_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "disk/disk_test_util.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::BlockFilePath;
using disk_test::Gate;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using disk_test::TinyLayout;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

std::unique_ptr<DiskTier> OpenOrDie(const DiskTierOptions& o, disk::KillHook hook = {}) {
  auto t = hook ? disk::OpenWithKillHook(o, Env::Default(), std::move(hook))
                : DiskTier::Open(o, Env::Default());
  EXPECT_THAT(t, IsOk());
  return t.ok() ? std::move(t).value() : nullptr;
}

// Loads `key` and returns the bytes, or an empty vector on a miss.
std::vector<std::byte> LoadBytes(DiskTier* tier, const BlockKey& key) {
  std::vector<std::byte> buf(64 << 10);
  auto r = tier->Load(key, buf);
  EXPECT_THAT(r, IsOk());
  if (!r.ok() || !r->has_value()) return {};
  buf.resize(**r);
  return buf;
}

std::vector<std::byte> Bytes(const SharedBlock& b) {
  return std::vector<std::byte>(b->data(), b->data() + b->size());
}

uint32_t ModeOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return 0xffffffff;
  return st.st_mode & 0777;
}

TEST(DiskTierTest, StoreThenLoadReturnsExactBytesFromPendingAndDisk) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  std::vector<SharedBlock> blocks;
  for (uint64_t i = 0; i < 10; ++i) {
    blocks.push_back(MakeTestBlock(i));
    ASSERT_THAT(tier->Store(TestBlockKey(i), blocks.back()), IsOk());
    // Load right after Store returns: served from the pending buffer or disk.
    EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(i)), Bytes(blocks.back()));
  }
  ASSERT_THAT(tier->Flush(), IsOk());
  for (uint64_t i = 0; i < 10; ++i) {
    std::vector<std::byte> got = LoadBytes(tier.get(), TestBlockKey(i));
    EXPECT_EQ(got, Bytes(blocks[i]));
    EXPECT_THAT(CheckBlockFile(got, TinyLayout(), TestBlockKey(i)), IsOk());
    EXPECT_TRUE(std::filesystem::is_regular_file(BlockFilePath(dir.path(), TestBlockKey(i))));
  }
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.saves, 10u);
  EXPECT_EQ(s.saves_persisted, 10u);
  EXPECT_EQ(s.loads, 20u);
  EXPECT_EQ(s.hits, 20u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.bytes_written, 10 * blocks[0]->size());
  EXPECT_EQ(s.bytes_read, 20 * blocks[0]->size());
  EXPECT_EQ(s.entries, 10u);
  EXPECT_EQ(s.bytes, 10 * blocks[0]->size());
  EXPECT_EQ(s.compatible_entries, 10u);
  ASSERT_EQ(s.per_signature.size(), 1u);
  EXPECT_EQ(s.per_signature[0].signature, TinyLayout().Signature());
  EXPECT_TRUE(s.per_signature[0].compatible);
  EXPECT_EQ(s.queue_bytes, 0u);
  EXPECT_EQ(s.load_latency.Count(), 20u);
  EXPECT_EQ(s.write_latency.Count(), 10u);
}

TEST(DiskTierTest, BlockBeingWrittenIsServedFromThePendingBuffer) {
  TempDir dir;
  Gate gate;
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 1;
  disk::KillHook kill_hook = gate.Hook(DiskKillPoint::kBeforeWrite);
  auto tier = OpenOrDie(o, kill_hook);
  SharedBlock b = MakeTestBlock(7);
  ASSERT_THAT(tier->Store(TestBlockKey(7), b), IsOk());
  gate.WaitArrived(1);
  EXPECT_TRUE(tier->Contains(TestBlockKey(7)));
  EXPECT_EQ(tier->SizeOf(TestBlockKey(7)), b->size());
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(7)), Bytes(b));
  EXPECT_FALSE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(7))));
  EXPECT_EQ(tier->Stats().hits_pending, 1u);
  EXPECT_EQ(tier->Stats().queue_blocks, 1u);
  gate.Release();
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(7)), Bytes(b));
  EXPECT_EQ(tier->Stats().hits_pending, 1u);
  EXPECT_EQ(tier->Stats().queue_blocks, 0u);
}

TEST(DiskTierTest, UnknownKeyIsAMiss) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  std::vector<std::byte> buf(8192);
  auto r = tier->Load(TestBlockKey(1), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->has_value());
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
  EXPECT_EQ(tier->SizeOf(TestBlockKey(1)), std::nullopt);
  EXPECT_EQ(tier->Stats().misses, 1u);
  EXPECT_EQ(tier->Stats().hits, 0u);
}

TEST(DiskTierTest, ReopenServesHitsFromTheIndexWithoutAScan) {
  TempDir dir;
  std::vector<SharedBlock> blocks;
  {
    auto tier = OpenOrDie(TestOptions(dir.path()));
    for (uint64_t i = 0; i < 5; ++i) {
      blocks.push_back(MakeTestBlock(i));
      ASSERT_THAT(tier->Store(TestBlockKey(i), blocks.back()), IsOk());
    }
    ASSERT_THAT(tier->Close(), IsOk());
  }
  auto tier = OpenOrDie(TestOptions(dir.path()));
  for (uint64_t i = 0; i < 5; ++i) {
    EXPECT_TRUE(tier->Contains(TestBlockKey(i)));
    EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(i)), Bytes(blocks[i]));
  }
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.reconcile_passes, 0u);
  EXPECT_EQ(s.hits, 5u);
  EXPECT_EQ(s.entries, 5u);
}

TEST(DiskTierTest, LoadIntoTooSmallBufferNamesBothSizes) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  SharedBlock b = MakeTestBlock(3);
  ASSERT_THAT(tier->Store(TestBlockKey(3), b), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<std::byte> small(b->size() - 1);
  auto r = tier->Load(TestBlockKey(3), small);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          HasSubstr(std::to_string(b->size() - 1) + " bytes is smaller")));
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument,
                          HasSubstr("(" + std::to_string(b->size()) + " bytes)")));
  std::vector<std::byte> exact(b->size());
  auto ok = tier->Load(TestBlockKey(3), exact);
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ(*ok, b->size());
  EXPECT_EQ(exact, Bytes(b));
}

TEST(DiskTierTest, StoreRejectsBlocksOfAnotherKeyOrSignatureOrGarbage) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  // A valid block stored under another key.
  EXPECT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(1)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr(TestBlockKey(2).Hex())));
  // A block of another layout.
  ModelLayout other = ModelLayout::Preset("tiny", 32).value();
  EXPECT_THAT(tier->Store(TestBlockKey(5), MakeTestBlock(other, TestBlockKey(5))),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a block file of this tier")));
  // Garbage and empty.
  auto junk = std::make_shared<const BlockBuffer>(
      BlockBuffer::CopyOf(std::vector<std::byte>(100, std::byte{7})).value());
  EXPECT_THAT(tier->Store(TestBlockKey(6), junk), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(tier->Store(TestBlockKey(6), nullptr), StatusIs(StatusCode::kInvalidArgument));
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(disk_test::BlockFolderBytes(dir.path()), 0u);
  EXPECT_EQ(tier->Stats().saves, 0u);
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
}

TEST(DiskTierTest, EraseRemovesFileRowAndPendingWrite) {
  TempDir dir;
  Gate gate;
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 1;
  auto tier = OpenOrDie(o);
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  auto erased = tier->Erase(TestBlockKey(1));
  ASSERT_THAT(erased, IsOk());
  EXPECT_TRUE(*erased);
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
  EXPECT_FALSE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(1))));
  auto again = tier->Erase(TestBlockKey(1));
  ASSERT_THAT(again, IsOk());
  EXPECT_FALSE(*again);
  EXPECT_EQ(tier->Stats().entries, 0u);
}

TEST(DiskTierTest, EraseWhileBeingWrittenLeavesNothingBehind) {
  // The writer parked after renaming the file into place, before its row:
  // Erase waits for that write to end, so that no load in between could
  // read the erased block (the row committed, the clean-up not yet done).
  for (DiskKillPoint point : {DiskKillPoint::kBeforeIndexCommit, DiskKillPoint::kAfterIndexCommit}) {
    TempDir dir;
    Gate gate;
    DiskTierOptions o = TestOptions(dir.path());
    o.writer_threads = 1;
    disk::KillHook kill_hook = gate.Hook(point);
    auto tier = OpenOrDie(o, kill_hook);
    ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
    gate.WaitArrived(1);
    std::atomic<bool> returned{false};
    Result<bool> erased = false;
    std::thread eraser([&] {
      erased = tier->Erase(TestBlockKey(1));
      returned = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(returned.load()) << "Erase returned while the block was being written";
    gate.Release();
    eraser.join();
    ASSERT_THAT(erased, IsOk());
    EXPECT_TRUE(*erased);
    EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
    EXPECT_TRUE(LoadBytes(tier.get(), TestBlockKey(1)).empty());
    ASSERT_THAT(tier->Flush(), IsOk());
    EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
    EXPECT_FALSE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(1))));
    EXPECT_EQ(tier->Stats().entries, 0u);
  }
}

TEST(DiskTierTest, ForgetKeepsTheFileAndReconcileAdoptsItAgain) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  SharedBlock b = MakeTestBlock(4);
  ASSERT_THAT(tier->Store(TestBlockKey(4), b), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  auto forgot = tier->Forget(TestBlockKey(4));
  ASSERT_THAT(forgot, IsOk());
  EXPECT_TRUE(*forgot);
  EXPECT_FALSE(tier->Contains(TestBlockKey(4)));
  EXPECT_TRUE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(4))));
  auto report = tier->Reconcile();
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->adopted, 1u);
  EXPECT_EQ(report->files_seen, 1u);
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(4)), Bytes(b));
}

// The block file written before meta_checksum existed: the same header
// without that entry, padded with spaces to its old length.
SharedBlock WithoutMetaChecksum(const SharedBlock& b) {
  std::string file(reinterpret_cast<const char*>(b->data()), b->size());
  uint64_t n = 0;
  std::memcpy(&n, file.data(), 8);
  const std::string entry = ",\"meta_checksum\":\"xxh3-128:";
  const size_t at = file.find(entry);
  if (at == std::string::npos || at > 8 + n) return nullptr;
  const size_t len = entry.size() + 32 + 1;  // the 32 hex digits and the closing quote
  std::string header = file.substr(8, n);
  header.erase(at - 8, len);
  header.append(len, ' ');
  std::string out = file.substr(0, 8) + header + file.substr(8 + n);
  auto buf = BlockBuffer::Allocate(out.size());
  if (!buf.ok()) return nullptr;
  std::memcpy(buf->mutable_span().data(), out.data(), out.size());
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

// Without retention a small block is read file first: a file that verifies
// on its own is a hit without its index row (here dropped by Forget()).
// With retention the row is looked up first (its created_at decides), so the
// same file is a miss until the reconcile adopts it again.
TEST(DiskTierTest, SmallBlockIsServedFromItsFileWithoutALookupUnlessRetentionNeedsTheRow) {
  for (const int64_t retention : {int64_t{0}, int64_t{1} << 40}) {
    SCOPED_TRACE("retention_seconds " + std::to_string(retention));
    TempDir dir;
    DiskTierOptions o = TestOptions(dir.path());
    o.retention_seconds = retention;
    auto tier = OpenOrDie(o);
    SharedBlock b = MakeTestBlock(6);
    ASSERT_THAT(tier->Store(TestBlockKey(6), b), IsOk());
    ASSERT_THAT(tier->Flush(), IsOk());
    ASSERT_THAT(tier->Forget(TestBlockKey(6)), IsOk());
    EXPECT_FALSE(tier->Contains(TestBlockKey(6)));
    EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(6)),
              retention == 0 ? Bytes(b) : std::vector<std::byte>{});
    EXPECT_EQ(tier->Stats().hits, retention == 0 ? 1u : 0u);
    EXPECT_EQ(tier->Stats().quarantined, 0u);
    EXPECT_TRUE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(6))));
  }
}

// A load that finds the file of an indexed block gone misses and drops the
// stale row, so Contains() stops promising the block.
TEST(DiskTierTest, LoadOfAGoneFileMissesAndDropsItsRow) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  ASSERT_THAT(tier->Store(TestBlockKey(7), MakeTestBlock(7)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  ASSERT_TRUE(std::filesystem::remove(BlockFilePath(dir.path(), TestBlockKey(7))));
  EXPECT_TRUE(tier->Contains(TestBlockKey(7)));
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(7)), std::vector<std::byte>{});
  EXPECT_FALSE(tier->Contains(TestBlockKey(7)));
  EXPECT_EQ(tier->Stats().misses, 1u);
  EXPECT_EQ(tier->Stats().quarantined, 0u);
}

// A file without meta_checksum cannot vouch for its own header: it is served
// only when its index row's header hash matches, and quarantined when it
// stands in place of another file's row.
TEST(DiskTierTest, FileWithoutMetaChecksumIsServedOnlyWhenItsRowVouchesForIt) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  SharedBlock old8 = WithoutMetaChecksum(MakeTestBlock(8));
  ASSERT_NE(old8, nullptr);
  ASSERT_THAT(tier->Store(TestBlockKey(8), old8), IsOk());
  SharedBlock b9 = MakeTestBlock(9);
  ASSERT_THAT(tier->Store(TestBlockKey(9), b9), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(8)), Bytes(old8));
  SharedBlock old9 = WithoutMetaChecksum(b9);
  ASSERT_NE(old9, nullptr);
  const std::string path9 = BlockFilePath(dir.path(), TestBlockKey(9));
  {
    std::ofstream f(path9 + ".new", std::ios::binary);
    f.write(reinterpret_cast<const char*>(old9->data()),
            static_cast<std::streamsize>(old9->size()));
  }
  std::filesystem::rename(path9 + ".new", path9);
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(9)), std::vector<std::byte>{});
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.quarantined, 1u);
  EXPECT_FALSE(std::filesystem::exists(path9));
}

TEST(DiskTierTest, ClearRemovesEveryBlockOfEveryLayout) {
  TempDir dir;
  ModelLayout other = ModelLayout::Preset("tiny", 32).value();
  {
    auto t2 = OpenOrDie(TestOptions(dir.path(), other));
    for (uint64_t i = 100; i < 103; ++i) {
      ASSERT_THAT(t2->Store(TestBlockKey(i), MakeTestBlock(other, TestBlockKey(i))), IsOk());
    }
    ASSERT_THAT(t2->Close(), IsOk());
  }
  auto tier = OpenOrDie(TestOptions(dir.path()));
  for (uint64_t i = 0; i < 4; ++i) {
    ASSERT_THAT(tier->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(tier->Stats().entries, 7u);
  auto n = tier->Clear();
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 7u);
  EXPECT_EQ(tier->Stats().entries, 0u);
  EXPECT_EQ(disk_test::BlockFolderBytes(dir.path()), 0u);
  EXPECT_FALSE(tier->Contains(TestBlockKey(0)));
}

TEST(DiskTierTest, LoadManyReadsEachKeyIntoItsBuffer) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  for (uint64_t i = 0; i < 20; i += 2) {
    ASSERT_THAT(tier->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<BlockKey> keys;
  std::vector<std::vector<std::byte>> bufs(20, std::vector<std::byte>(8192));
  std::vector<std::span<std::byte>> dsts;
  for (uint64_t i = 0; i < 20; ++i) {
    keys.push_back(TestBlockKey(i));
    dsts.push_back(bufs[i]);
  }
  auto results = tier->LoadMany(keys, dsts);
  ASSERT_EQ(results.size(), 20u);
  for (uint64_t i = 0; i < 20; ++i) {
    ASSERT_THAT(results[i], IsOk());
    if (i % 2 == 1) {
      EXPECT_FALSE(results[i]->has_value()) << i;
      continue;
    }
    ASSERT_TRUE(results[i]->has_value()) << i;
    EXPECT_THAT(
        CheckBlockFile(std::span(bufs[i]).first(**results[i]), TinyLayout(), TestBlockKey(i)),
        IsOk());
  }
  EXPECT_EQ(tier->Stats().hits, 10u);
  EXPECT_EQ(tier->Stats().misses, 10u);
  auto mismatch = tier->LoadMany(keys, std::span(dsts).first(3));
  ASSERT_EQ(mismatch.size(), 20u);
  EXPECT_THAT(mismatch[0], StatusIs(StatusCode::kInvalidArgument, HasSubstr("20 keys but 3")));
}

TEST(DiskTierTest, ForEachKeyListsThisLayoutsIndexedBlocks) {
  TempDir dir;
  ModelLayout other = ModelLayout::Preset("tiny", 32).value();
  {
    auto t2 = OpenOrDie(TestOptions(dir.path(), other));
    ASSERT_THAT(t2->Store(TestBlockKey(50), MakeTestBlock(other, TestBlockKey(50))), IsOk());
  }
  auto tier = OpenOrDie(TestOptions(dir.path()));
  std::set<BlockKey> want;
  for (uint64_t i = 0; i < 5; ++i) {
    ASSERT_THAT(tier->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
    want.insert(TestBlockKey(i));
  }
  ASSERT_THAT(tier->Flush(), IsOk());
  std::set<BlockKey> got;
  uint64_t bytes = 0;
  ASSERT_THAT(tier->ForEachKey([&](const BlockKey& k, uint64_t size) {
    got.insert(k);
    bytes += size;
  }),
              IsOk());
  EXPECT_EQ(got, want);
  EXPECT_EQ(bytes, 5 * MakeTestBlock(0)->size());
}

TEST(DiskTierTest, StoringAKeyTwiceWritesItOnce) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.saves, 2u);
  EXPECT_EQ(s.saves_persisted, 1u);
  EXPECT_EQ(s.saves_deduplicated, 1u);
  EXPECT_EQ(s.entries, 1u);
}

TEST(DiskTierTest, FsyncDurabilityRoundTrips) {
  TempDir dir;
  DiskTierOptions o = TestOptions(dir.path());
  o.durability = Durability::kFsync;
  std::vector<std::string> points;
  std::mutex mu;
  disk::KillHook kill_hook = [&](DiskKillPoint p) {
    std::lock_guard<std::mutex> lock(mu);
    points.push_back(std::to_string(static_cast<int>(p)));
  };
  o.writer_threads = 1;
  auto tier = OpenOrDie(o, kill_hook);
  SharedBlock b = MakeTestBlock(9);
  ASSERT_THAT(tier->Store(TestBlockKey(9), b), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(9)), Bytes(b));
  // kBeforeWrite, kMidWrite, kBeforeRename, kBeforeDirSync, kBeforeIndexCommit,
  // kAfterIndexCommit (5 is kMidEviction: nothing evicted).
  EXPECT_THAT(points, ::testing::ElementsAre("0", "1", "2", "3", "4", "6"));
}

TEST(DiskTierTest, NoWriterThreadsWritesInline) {
  TempDir dir;
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 0;
  auto tier = OpenOrDie(o);
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  // Written before Store returned.
  EXPECT_TRUE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(1))));
  EXPECT_EQ(tier->Stats().saves_persisted, 1u);
  EXPECT_EQ(tier->Stats().inline_writes, 0u);
}

TEST(DiskTierTest, FullQueueFallsBackToAnInlineWrite) {
  TempDir dir;
  Gate gate;
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 1;
  o.queue_max_bytes = 6000;  // one tiny block
  o.queue_wait_micros = 1000;
  auto hook = gate.Hook(DiskKillPoint::kBeforeWrite);
  std::thread::id blocked;
  std::mutex mu;
  disk::KillHook kill_hook = [&](DiskKillPoint p) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (blocked == std::thread::id()) blocked = std::this_thread::get_id();
      if (blocked != std::this_thread::get_id()) return;  // only the background writer waits
    }
    hook(p);
  };
  auto tier = OpenOrDie(o, kill_hook);
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  gate.WaitArrived(1);
  ASSERT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(2)), IsOk());  // queue full: inline
  EXPECT_TRUE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(2))));
  EXPECT_EQ(tier->Stats().inline_writes, 1u);
  EXPECT_EQ(tier->Stats().drops, 0u);
  gate.Release();
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(tier->Stats().saves_persisted, 2u);
}

TEST(DiskTierTest, FullQueueDropsWhenAskedAndCountsIt) {
  TempDir dir;
  Gate gate;
  DiskTierOptions o = TestOptions(dir.path());
  o.writer_threads = 1;
  o.queue_max_bytes = 6000;
  o.queue_wait_micros = 1000;
  o.on_pressure = OnPressure::kDrop;
  disk::KillHook kill_hook = gate.Hook(DiskKillPoint::kBeforeWrite);
  auto tier = OpenOrDie(o, kill_hook);
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  gate.WaitArrived(1);
  EXPECT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(2)),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("on_pressure=drop")));
  EXPECT_EQ(tier->Stats().drops, 1u);
  gate.Release();
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
  EXPECT_EQ(tier->Stats().saves, 1u);
}

TEST(DiskTierTest, DefaultPermissionsAre0600And0700) {
  TempDir dir;
  std::string root = dir.Sub("cache");
  auto tier = OpenOrDie(TestOptions(root));
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(ModeOf(root), 0700u);
  EXPECT_EQ(ModeOf(root + "/blocks"), 0700u);
  EXPECT_EQ(ModeOf(root + "/quarantine"), 0700u);
  std::string hex = TestBlockKey(1).Hex();
  EXPECT_EQ(ModeOf(root + "/blocks/" + hex.substr(0, 2)), 0700u);
  EXPECT_EQ(ModeOf(BlockFilePath(root, TestBlockKey(1))), 0600u);
  EXPECT_EQ(ModeOf(root + "/index.sqlite"), 0600u);
}

TEST(DiskTierTest, ConfiguredPermissionsAreAppliedExactly) {
  TempDir dir;
  std::string root = dir.Sub("cache");
  DiskTierOptions o = TestOptions(root);
  o.file_permissions = 0660;
  o.dir_permissions = 0770;
  auto tier = OpenOrDie(o);
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  EXPECT_EQ(ModeOf(root), 0770u);
  EXPECT_EQ(ModeOf(root + "/blocks"), 0770u);
  std::string hex = TestBlockKey(1).Hex();
  EXPECT_EQ(ModeOf(root + "/blocks/" + hex.substr(0, 2)), 0770u);
  EXPECT_EQ(ModeOf(BlockFilePath(root, TestBlockKey(1))), 0660u);
  EXPECT_EQ(ModeOf(root + "/index.sqlite"), 0660u);
}

TEST(DiskTierTest, ClosedTierRefusesCallsAndCloseIsIdempotent) {
  TempDir dir;
  auto tier = OpenOrDie(TestOptions(dir.path()));
  ASSERT_THAT(tier->Store(TestBlockKey(1), MakeTestBlock(1)), IsOk());
  ASSERT_THAT(tier->Close(), IsOk());
  EXPECT_TRUE(std::filesystem::exists(BlockFilePath(dir.path(), TestBlockKey(1))));
  EXPECT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(2)),
              StatusIs(StatusCode::kFailedPrecondition));
  std::vector<std::byte> buf(8192);
  EXPECT_THAT(tier->Load(TestBlockKey(1), buf), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(tier->Erase(TestBlockKey(1)), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
  EXPECT_THAT(tier->Close(), IsOk());
  EXPECT_EQ(tier->Stats().saves_persisted, 1u);
}

TEST(DiskTierTest, OpenRejectsBadOptionsNamingTheField) {
  TempDir dir;
  DiskTierOptions o = TestOptions(dir.path());
  o.layout_signature.clear();
  EXPECT_THAT(DiskTier::Open(o, Env::Default()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("layout_signature")));
  o = TestOptions(dir.Sub("file"));
  ASSERT_TRUE(std::filesystem::create_directories(dir.path()) || true);
  { std::ofstream(dir.Sub("file")) << "x"; }
  EXPECT_THAT(DiskTier::Open(o, Env::Default()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a folder")));
  EXPECT_THAT(DiskTier::Open(TestOptions(dir.path()), nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("env")));
}

// Issue 12 item 5: a cache folder given through a symlink was refused.
TEST(DiskTierTest, SymlinkToAFolderWorksAsTheFolderAndOtherSymlinksDoNot) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("real"));
  std::filesystem::create_directory_symlink(dir.Sub("real"), dir.Sub("link"));
  SharedBlock b = MakeTestBlock(1);
  {
    auto tier = OpenOrDie(TestOptions(dir.Sub("link")));
    ASSERT_NE(tier, nullptr);
    ASSERT_THAT(tier->Store(TestBlockKey(1), b), IsOk());
    ASSERT_THAT(tier->Flush(), IsOk());
  }
  EXPECT_TRUE(std::filesystem::is_regular_file(BlockFilePath(dir.Sub("real"), TestBlockKey(1))));
  auto tier = OpenOrDie(TestOptions(dir.Sub("real")));
  EXPECT_EQ(LoadBytes(tier.get(), TestBlockKey(1)), Bytes(b));
  { std::ofstream(dir.Sub("file")) << "x"; }
  std::filesystem::create_symlink(dir.Sub("file"), dir.Sub("file_link"));
  std::filesystem::create_symlink(dir.Sub("nowhere"), dir.Sub("dangling"));
  for (const char* name : {"file_link", "dangling"}) {
    EXPECT_THAT(DiskTier::Open(TestOptions(dir.Sub(name)), Env::Default()),
                StatusIs(StatusCode::kInvalidArgument, HasSubstr("not a folder")))
        << name;
  }
}

}  // namespace
}  // namespace kvtier
