#include "replay/real_replayer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "replay/simulator.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::replay {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

TraceRequest Req(std::vector<uint64_t> ids, uint64_t input_length) {
  TraceRequest r;
  r.input_length = input_length;
  r.hash_ids = std::move(ids);
  return r;
}

RealReplayOptions Options(uint64_t ram_blocks,
                          HostEvictionPolicy policy = HostEvictionPolicy::kLru) {
  RealReplayOptions o;
  o.ram_blocks = ram_blocks;
  o.policy = policy;
  o.layout = *ModelLayout::Preset("tiny");
  return o;
}

std::unique_ptr<RealReplayer> Open(RealReplayOptions o) {
  Result<std::unique_ptr<RealReplayer>> r = RealReplayer::Create(Env::Default(), std::move(o));
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? std::move(r).value() : nullptr;
}

using TempDir = ::kvtier::testing::TempDir;

// Chains over a few shared prefixes with one-off tails: hits, evictions and
// re-inserts at small capacities.
std::vector<TraceRequest> MixedTrace() {
  std::vector<TraceRequest> trace;
  uint64_t next_id = 1000;
  uint64_t state = 11;
  for (int i = 0; i < 120; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t prefix = (state >> 33) % 6;
    TraceRequest r;
    for (uint64_t d = 0; d < 3; ++d) r.hash_ids.push_back(prefix * 10 + d);
    const uint64_t tail = (state >> 40) % 4;
    for (uint64_t d = 0; d < tail; ++d) r.hash_ids.push_back(next_id++);
    r.input_length = 512 * r.hash_ids.size() - 37;
    trace.push_back(std::move(r));
  }
  return trace;
}

TEST(RealReplayOptions, ValidateNamesTheBadField) {
  RealReplayOptions o = Options(0);
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_blocks")));
  o = Options(4);
  o.disk_blocks = 4;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("disk_dir")));
  o = Options(4);
  o.disk_dir = "/tmp/x";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("disk_blocks")));
  o = Options(4);
  o.layout = ModelLayout{};
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("layout")));
}

TEST(ReplayBlockKey, DistinctPerIdAndNamespace) {
  BlockKey a, b;
  b.bytes[0] = 1;
  EXPECT_NE(ReplayBlockKey(a, 1), ReplayBlockKey(a, 2));
  EXPECT_NE(ReplayBlockKey(a, 1), ReplayBlockKey(b, 1));
  EXPECT_EQ(ReplayBlockKey(a, 1), ReplayBlockKey(a, 1));
}

// Host only, no threads in play for hits: the real cache must count exactly
// what the metadata simulator counts, under both policies.
TEST(RealReplayer, HostOnlyAgreesWithTheSimulatorExactly) {
  const std::vector<TraceRequest> trace = MixedTrace();
  for (HostEvictionPolicy policy : {HostEvictionPolicy::kLru, HostEvictionPolicy::kReuse}) {
    for (uint64_t ram : {3, 8, 20}) {
      SimOptions so;
      so.ram_blocks = ram;
      so.policy = policy;
      TierSimulator sim(so);
      auto real = Open(Options(ram, policy));
      ASSERT_NE(real, nullptr);
      for (const TraceRequest& r : trace) {
        sim.Replay(r);
        ASSERT_THAT(real->Replay(r), IsOk());
      }
      ASSERT_THAT(real->Finish(), IsOk());
      const ReplayCounts& want = sim.counts();
      const RealReplayStats& got = real->stats();
      const std::string what =
          std::string(HostEvictionPolicyName(policy)) + " ram " + std::to_string(ram);
      EXPECT_EQ(got.counts.hit_tokens, want.hit_tokens) << what;
      EXPECT_EQ(got.counts.hit_tokens_ram, want.hit_tokens) << what;
      EXPECT_EQ(got.counts.input_tokens, want.input_tokens) << what;
      EXPECT_EQ(got.counts.ram_hits, want.ram_hits) << what;
      EXPECT_EQ(got.counts.inserts, want.inserts) << what;
      EXPECT_EQ(got.counts.ram_evictions, want.ram_evictions) << what;
      EXPECT_EQ(got.counts.ghost_hits, want.ghost_hits) << what;
      EXPECT_EQ(got.verified, want.ram_hits) << what;
      EXPECT_EQ(got.wrong, 0u) << what;
      EXPECT_EQ(got.bytes_loaded, got.verified * got.block_file_bytes) << what;
      EXPECT_EQ(got.bytes_stored, want.inserts * got.block_file_bytes) << what;
    }
  }
}

TEST(RealReplayer, DiskTierServesEvictedBlocksVerified) {
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  RealReplayOptions o = Options(1);
  o.disk_blocks = 16;
  o.disk_dir = tmp.path() + "/disk";
  auto real = Open(o);
  ASSERT_NE(real, nullptr);
  // RAM holds one block: r1's 2 pushes 1 to disk; r2 matches 1 from disk.
  ASSERT_THAT(real->Replay(Req({1}, 512)), IsOk());
  ASSERT_THAT(real->Replay(Req({2}, 512)), IsOk());
  ASSERT_THAT(real->Replay(Req({1, 3}, 700)), IsOk());
  const RealReplayStats& s = real->stats();
  EXPECT_EQ(s.counts.hit_tokens, 512u);
  EXPECT_EQ(s.counts.hit_tokens_disk, 512u);
  EXPECT_EQ(s.counts.disk_hits, 1u);
  EXPECT_EQ(s.counts.inserts, 3u);
  EXPECT_EQ(s.verified, 1u);
  EXPECT_EQ(s.wrong, 0u);
  EXPECT_EQ(s.prefix_bytes_loaded, s.block_file_bytes);
  EXPECT_THAT(real->Finish(), IsOk());
  EXPECT_GT(real->stats().bytes_to_disk, 0u);

  // The folder now holds blocks: a new replay into it is refused.
  Result<std::unique_ptr<RealReplayer>> again = RealReplayer::Create(Env::Default(), o);
  EXPECT_THAT(again, StatusIs(StatusCode::kInvalidArgument, HasSubstr("is not empty")));
}

TEST(RealReplayer, AWrongBlockIsCountedNeverAHitAndStoredAgain) {
  auto real = Open(Options(4));
  ASSERT_NE(real, nullptr);
  const ModelLayout layout = *ModelLayout::Preset("tiny");
  const BlockKey key = ReplayBlockKey(real->ns(), 5);
  // A well-formed block file for key 5 (good header, good checksum) whose
  // tensors are those of another key: only the content check can tell.
  std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(layout, TestBlockKey(99));
  std::vector<std::span<const std::byte>> spans(tensors.begin(), tensors.end());
  EncodeRequest req;
  req.layout = &layout;
  req.key = key;
  req.parent = real->ns();
  req.ns = real->ns();
  req.tensors = spans;
  Result<BlockBuffer> forged = EncodeBlock(req);
  ASSERT_TRUE(forged.ok()) << forged.status().ToString();
  const BlockKey keys[] = {key};
  const SharedBlock blocks[] = {std::make_shared<const BlockBuffer>(std::move(forged).value())};
  ASSERT_THAT(real->cache().Store(keys, blocks), IsOk());

  ASSERT_THAT(real->Replay(Req({5}, 512)), IsOk());
  EXPECT_EQ(real->stats().wrong, 1u);
  EXPECT_EQ(real->stats().verified, 0u);
  EXPECT_EQ(real->stats().counts.hit_tokens, 0u);
  // Stored again with the right content: the next request hits it.
  ASSERT_THAT(real->Replay(Req({5}, 512)), IsOk());
  EXPECT_EQ(real->stats().wrong, 1u);
  EXPECT_EQ(real->stats().verified, 1u);
  EXPECT_EQ(real->stats().counts.hit_tokens, 512u);
}

// Another process (a remote tier's other writer) may have written a block
// with a longer created_at than this replay's, so a longer header: it must
// still fit the load buffers (it used to fail the Load: "destination of 5016
// bytes is smaller than the block of 5024 bytes").
TEST(RealReplayer, ABlockWithALongerHeaderFromAnotherWriterLoads) {
  RealReplayOptions o = Options(4);
  o.created_at = 0;
  auto real = Open(o);
  ASSERT_NE(real, nullptr);
  const ModelLayout layout = *ModelLayout::Preset("tiny");
  const BlockKey key = ReplayBlockKey(real->ns(), 5);
  Result<BlockBuffer> other =
      MakeBlockFile(layout, key, real->ns(), real->ns(), std::numeric_limits<int64_t>::min());
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  ASSERT_GT(other->size(), real->stats().block_file_bytes);
  const BlockKey keys[] = {key};
  const SharedBlock blocks[] = {std::make_shared<const BlockBuffer>(std::move(other).value())};
  ASSERT_THAT(real->cache().Store(keys, blocks), IsOk());

  ASSERT_THAT(real->Replay(Req({5}, 512)), IsOk());
  EXPECT_EQ(real->stats().verified, 1u);
  EXPECT_EQ(real->stats().wrong, 0u);
  EXPECT_EQ(real->stats().counts.hit_tokens, 512u);
  EXPECT_EQ(real->stats().counts.hit_tokens_ram, 512u);
  EXPECT_EQ(real->stats().counts.hit_tokens_remote, 0u);
}

TEST(RealReplayer, BadRemoteOptionsAreRefusedNamingTheField) {
  RealReplayOptions o = Options(4);
  o.remote.emplace().url = "http://127.0.0.1:1";
  EXPECT_THAT(RealReplayer::Create(Env::Default(), o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("RealReplayOptions.remote")));
  o.remote->url = "redis://127.0.0.1:1";
  o.remote->key_prefix = "a{b";
  EXPECT_THAT(RealReplayer::Create(Env::Default(), o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("RealReplayOptions.remote")));
}

TEST(RealReplayer, ReplayAfterFinishIsRefused) {
  auto real = Open(Options(2));
  ASSERT_NE(real, nullptr);
  ASSERT_THAT(real->Finish(), IsOk());
  EXPECT_THAT(real->Finish(), IsOk());
  EXPECT_THAT(real->Replay(Req({1}, 512)), StatusIs(StatusCode::kFailedPrecondition));
}

}  // namespace
}  // namespace kvtier::replay
