// The small parts of the disk tier: options validation, folder names,
// the pending-write queue, group commit, the latency histogram and the
// stats renderers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "disk/group_commit.h"
#include "disk/pending_writes.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier::disk {
namespace {

using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

DiskTierOptions Good() {
  DiskTierOptions o;
  o.dir = "/tmp/x";
  o.layout_signature = "sig";
  return o;
}

TEST(DiskTierOptionsTest, DefaultsAreValidOnceRequiredFieldsAreSet) {
  EXPECT_THAT(Good().Validate(), IsOk());
  DiskTierOptions o;
  EXPECT_THAT(o.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("DiskTierOptions.dir")));
  EXPECT_EQ(o.max_bytes, 10ull << 30);
  EXPECT_EQ(o.file_permissions, 0600u);
  EXPECT_EQ(o.dir_permissions, 0700u);
  EXPECT_EQ(o.durability, Durability::kChecksum);
  EXPECT_EQ(o.on_pressure, OnPressure::kWriteInline);
}

TEST(DiskTierOptionsTest, EachBadFieldIsNamed) {
  struct Case {
    const char* field;
    std::function<void(DiskTierOptions&)> breakit;
  };
  std::vector<Case> cases = {
      {"layout_signature", [](DiskTierOptions& o) { o.layout_signature = ""; }},
      {"retention_seconds", [](DiskTierOptions& o) { o.retention_seconds = -1; }},
      {"free_space_fraction", [](DiskTierOptions& o) { o.free_space_fraction = 0; }},
      {"free_space_fraction", [](DiskTierOptions& o) { o.free_space_fraction = 1.5; }},
      {"max_unlinks_per_store", [](DiskTierOptions& o) { o.max_unlinks_per_store = 0; }},
      {"writer_threads", [](DiskTierOptions& o) { o.writer_threads = 1000; }},
      {"read_threads", [](DiskTierOptions& o) { o.read_threads = 1000; }},
      {"sqlite_busy_timeout_ms", [](DiskTierOptions& o) { o.sqlite_busy_timeout_ms = 700'000; }},
      {"touch_flush_interval_ms", [](DiskTierOptions& o) { o.touch_flush_interval_ms = 0; }},
      {"stale_temp_seconds", [](DiskTierOptions& o) { o.stale_temp_seconds = 0; }},
      {"quarantine_retention_seconds",
       [](DiskTierOptions& o) { o.quarantine_retention_seconds = -5; }},
      {"file_permissions", [](DiskTierOptions& o) { o.file_permissions = 01600; }},
      {"file_permissions", [](DiskTierOptions& o) { o.file_permissions = 0400; }},
      {"dir_permissions", [](DiskTierOptions& o) { o.dir_permissions = 0600; }},
      {"on_pressure", [](DiskTierOptions& o) { o.on_pressure = static_cast<OnPressure>(9); }},
      {"durability", [](DiskTierOptions& o) { o.durability = static_cast<Durability>(9); }},
  };
  for (const Case& c : cases) {
    DiskTierOptions o = Good();
    c.breakit(o);
    EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument,
                                       HasSubstr(std::string("DiskTierOptions.") + c.field)))
        << c.field;
  }
}

TEST(DiskTierOptionsTest, DefaultQueueBytesFollowsRam) {
  EXPECT_EQ(DefaultDiskQueueBytes(0), 64ull << 20);
  EXPECT_EQ(DefaultDiskQueueBytes(16ull << 30), (16ull << 30) / 10);        // 10%
  EXPECT_EQ(DefaultDiskQueueBytes(256ull << 20), 64ull << 20);              // floor
  EXPECT_EQ(DefaultDiskQueueBytes(128ull << 20), (128ull << 20) / 10 * 3);  // 30% cap
  EXPECT_EQ(DefaultDiskQueueBytes(1ull << 40), 8ull << 30);                 // ceiling
  EXPECT_EQ(DefaultDiskQueueBytes(1ull << 30), (1ull << 30) / 10);
}

TEST(FolderLayoutTest, NamesAndParsing) {
  FolderLayout layout("/c");
  BlockKey key = TestBlockKey(1);
  std::string hex = key.Hex();
  EXPECT_EQ(layout.IndexPath(), "/c/index.sqlite");
  EXPECT_EQ(layout.BlockPath(key), "/c/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors");
  EXPECT_EQ(layout.TempPath(key, 42, 7),
            "/c/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors.tmp.42.7");
  EXPECT_EQ(layout.QuarantinePath("x.safetensors", 1700000000, 42, 3),
            "/c/quarantine/1700000000-42-3-x.safetensors");
  EXPECT_EQ(QuarantineTimeOf("1700000000-42-3-x.safetensors"), 1700000000);
  EXPECT_EQ(QuarantineTimeOf("index.sqlite"), -1);

  uint8_t p = key.bytes[0];
  ParsedEntry e = ParseBlockDirEntry(hex + ".safetensors", p);
  EXPECT_EQ(e.kind, EntryKind::kBlock);
  EXPECT_EQ(e.key, key);
  e = ParseBlockDirEntry(hex + ".safetensors.tmp.123.9", p);
  EXPECT_EQ(e.kind, EntryKind::kTemp);
  EXPECT_EQ(e.pid, 123);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(c));
  for (const std::string& bad :
       {upper + ".safetensors", hex + ".safetensors.tmp.x.1", hex + ".safetensors.tmp.0.1",
        hex + ".safetensors.tmp.12", hex + ".txt", hex, std::string("notes.txt"),
        hex + ".safetensors.bak"}) {
    EXPECT_EQ(ParseBlockDirEntry(bad, p).kind, EntryKind::kForeign) << bad;
  }
  // The right name in the wrong subfolder is foreign too.
  EXPECT_EQ(ParseBlockDirEntry(hex + ".safetensors", static_cast<uint8_t>(p + 1)).kind,
            EntryKind::kForeign);
}

SharedBlock Block(size_t n) {
  return std::make_shared<const BlockBuffer>(
      BlockBuffer::CopyOf(std::vector<std::byte>(n, std::byte{1})).value());
}

// One block for a writer (a batch of at most one), or nullptr when closed.
std::shared_ptr<PendingBlock> Next(PendingWrites& q) {
  auto batch = q.NextBatchForWriter(0, 1);
  return batch.empty() ? nullptr : batch[0];
}

TEST(PendingWritesTest, BatchesTakeBlocksInOrderUpToTheByteAndCountBounds) {
  PendingWrites q(1000);
  for (uint64_t i = 0; i < 6; ++i) {
    ASSERT_EQ(q.Enqueue(TestBlockKey(i), Block(i == 3 ? 300 : 100), 0),
              PendingWrites::AddOutcome::kQueued);
  }
  auto keys = [](const std::vector<std::shared_ptr<PendingBlock>>& b) {
    std::vector<BlockKey> k;
    for (const auto& p : b) k.push_back(p->key);
    return k;
  };
  // 100 + 100 + 100 = 300 fit 350; the 300-byte block does not.
  auto b1 = q.NextBatchForWriter(350, 10);
  EXPECT_EQ(keys(b1), (std::vector<BlockKey>{TestBlockKey(0), TestBlockKey(1), TestBlockKey(2)}));
  // A block larger than the bound still goes, alone.
  auto b2 = q.NextBatchForWriter(200, 10);
  EXPECT_EQ(keys(b2), (std::vector<BlockKey>{TestBlockKey(3)}));
  auto b3 = q.NextBatchForWriter(1000, 1);  // the count bound
  EXPECT_EQ(keys(b3), (std::vector<BlockKey>{TestBlockKey(4)}));
  for (auto* b : {&b1, &b2, &b3}) {
    for (auto& p : *b) {
      EXPECT_NE(q.Find(p->key), nullptr);  // readable until finished
      q.Retire(p);
      q.Release(p);
    }
  }
  EXPECT_EQ(q.bytes(), 100u);
  q.Close();
  EXPECT_EQ(keys(q.NextBatchForWriter(1000, 10)), (std::vector<BlockKey>{TestBlockKey(5)}));
  EXPECT_TRUE(q.NextBatchForWriter(1000, 10).empty());
}

TEST(PendingWritesTest, QueueIsBoundedInBytesButAdmitsOneBlockWhenEmpty) {
  PendingWrites q(100);
  EXPECT_EQ(q.Enqueue(TestBlockKey(1), Block(500), 0), PendingWrites::AddOutcome::kQueued);
  EXPECT_EQ(q.Enqueue(TestBlockKey(2), Block(10), 1000), PendingWrites::AddOutcome::kFull);
  EXPECT_EQ(q.Enqueue(TestBlockKey(1), Block(10), 0), PendingWrites::AddOutcome::kDuplicate);
  EXPECT_EQ(q.bytes(), 500u);
  EXPECT_EQ(q.blocks(), 1u);
  EXPECT_NE(q.Find(TestBlockKey(1)), nullptr);
  auto p = Next(q);
  ASSERT_NE(p, nullptr);
  EXPECT_NE(q.Find(TestBlockKey(1)), nullptr);  // still readable while written
  EXPECT_FALSE(q.Retire(p));
  q.Release(p);
  EXPECT_EQ(q.Find(TestBlockKey(1)), nullptr);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(q.Enqueue(TestBlockKey(2), Block(60), 0), PendingWrites::AddOutcome::kQueued);
  EXPECT_EQ(q.Enqueue(TestBlockKey(3), Block(40), 0), PendingWrites::AddOutcome::kQueued);
  EXPECT_EQ(q.Enqueue(TestBlockKey(4), Block(1), 0), PendingWrites::AddOutcome::kFull);
}

TEST(PendingWritesTest, WaitingStoreGetsRoomWhenAWriterFinishes) {
  PendingWrites q(100);
  ASSERT_EQ(q.Enqueue(TestBlockKey(1), Block(100), 0), PendingWrites::AddOutcome::kQueued);
  std::thread writer([&] {
    auto p = Next(q);
    q.Retire(p);
    q.Release(p);
  });
  EXPECT_EQ(q.Enqueue(TestBlockKey(2), Block(100), 60'000'000), PendingWrites::AddOutcome::kQueued);
  writer.join();
}

TEST(PendingWritesTest, CancelDropsQueuedBlocksAndFlagsOnesInFlight) {
  PendingWrites q(1000);
  ASSERT_EQ(q.Enqueue(TestBlockKey(1), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  ASSERT_EQ(q.Enqueue(TestBlockKey(2), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  auto in_flight = Next(q);  // key 1
  ASSERT_NE(in_flight, nullptr);
  EXPECT_TRUE(q.Cancel(TestBlockKey(2)));
  EXPECT_EQ(q.bytes(), 10u);
  EXPECT_TRUE(q.Cancel(TestBlockKey(1)));
  EXPECT_FALSE(q.Cancel(TestBlockKey(1)));
  EXPECT_EQ(q.Find(TestBlockKey(1)), nullptr);
  EXPECT_TRUE(q.IsCancelled(*in_flight));
  EXPECT_TRUE(q.Retire(in_flight));  // the writer must clean up
  q.Release(in_flight);
  EXPECT_EQ(q.bytes(), 0u);
  // A newer store of the same key supersedes the cancelled one.
  ASSERT_EQ(q.Enqueue(TestBlockKey(3), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  auto old = Next(q);
  q.Cancel(TestBlockKey(3));
  ASSERT_EQ(q.Enqueue(TestBlockKey(3), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  EXPECT_FALSE(q.Retire(old));
  q.Release(old);
  EXPECT_NE(q.Find(TestBlockKey(3)), nullptr);
}

TEST(PendingWritesTest, WaitForAllBeforeWaitsOnlyForEarlierBlocks) {
  PendingWrites q(1000);
  ASSERT_EQ(q.Enqueue(TestBlockKey(1), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  uint64_t seq = q.NextSeq();
  auto p = Next(q);
  std::thread writer([&] {
    q.Retire(p);
    q.Release(p);
  });
  q.WaitForAllBefore(seq);
  writer.join();
  ASSERT_EQ(q.Enqueue(TestBlockKey(2), Block(10), 0), PendingWrites::AddOutcome::kQueued);
  q.WaitForAllBefore(seq);  // block 2 came later: no wait
  q.Close();
  EXPECT_EQ(q.Enqueue(TestBlockKey(3), Block(10), 0), PendingWrites::AddOutcome::kClosed);
  EXPECT_NE(Next(q), nullptr);  // drains what was queued
  EXPECT_EQ(Next(q), nullptr);
}

TEST(GroupCommitterTest, ConcurrentCommitsAllLand) {
  disk_test::TempDir dir;
  auto idx = DiskIndex::Open(dir.Sub("i.sqlite"), IndexOptions{});
  ASSERT_THAT(idx, IsOk());
  int64_t sig = *(*idx)->SignatureId("s");
  GroupCommitter committer(idx->get());
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        IndexRow r;
        r.key = TestBlockKey(t * 1000 + i);
        r.sig_id = sig;
        r.size = 1;
        if (!committer.Commit({&r, 1}).ok()) failures++;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ((*idx)->Totals()->entries, 200u);
}

TEST(LatencyHistogramTest, BucketsPercentilesAndMerge) {
  LatencyHistogram h;
  EXPECT_EQ(h.PercentileMicros(50), 0u);
  for (uint64_t v : {0, 1, 2, 3, 4, 100, 1000}) h.Record(v);
  EXPECT_EQ(h.Count(), 7u);
  EXPECT_EQ(h.SumMicros(), 1110u);
  EXPECT_EQ(h.MaxMicros(), 1000u);
  EXPECT_EQ(h.BucketCount(0), 1u);            // 0
  EXPECT_EQ(h.BucketCount(1), 1u);            // 1
  EXPECT_EQ(h.BucketCount(2), 2u);            // 2, 3
  EXPECT_EQ(h.BucketCount(3), 1u);            // 4..7
  EXPECT_EQ(h.BucketCount(7), 1u);            // 64..127
  EXPECT_EQ(h.BucketCount(10), 1u);           // 512..1023
  EXPECT_EQ(h.PercentileMicros(50), 3u);      // 4th of 7 samples is in [2, 4)
  EXPECT_EQ(h.PercentileMicros(100), 1000u);  // capped at the max
  LatencyHistogram copy = h;
  copy.Merge(h);
  EXPECT_EQ(copy.Count(), 14u);
  EXPECT_EQ(copy.BucketCount(2), 4u);
  h.Record(UINT64_MAX);
  EXPECT_EQ(h.BucketCount(LatencyHistogram::kBuckets - 1), 1u);
}

TEST(StatsRenderTest, JsonAndPrometheusCarryEveryField) {
  DiskTierStats s;
  s.saves = 3;
  s.hits = 2;
  s.quarantined = 1;
  s.entries = 5;
  s.load_latency.Record(10);
  s.per_signature.push_back({"kvtier-layout-v1;\"q\"", 5, 500, true});
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["saves"], 3);
  EXPECT_EQ(j["hits"], 2);
  EXPECT_EQ(j["quarantined"], 1);
  EXPECT_EQ(j["entries"], 5);
  EXPECT_EQ(j["reconcile_running"], false);
  EXPECT_EQ(j["load_latency"]["count"], 1);
  EXPECT_EQ(j["per_signature"][0]["bytes"], 500);
  std::string p = s.ToPrometheus();
  EXPECT_THAT(p, HasSubstr("kvtier_disk_saves_total 3\n"));
  EXPECT_THAT(p, HasSubstr("kvtier_disk_entries 5\n"));
  EXPECT_THAT(p, HasSubstr("kvtier_disk_load_latency_seconds_count 1\n"));
  EXPECT_THAT(p, HasSubstr("kvtier_disk_load_latency_seconds_bucket{le=\"+Inf\"} 1\n"));
  EXPECT_THAT(p, HasSubstr("signature=\"kvtier-layout-v1;\\\"q\\\"\""));
}

}  // namespace
}  // namespace kvtier::disk
