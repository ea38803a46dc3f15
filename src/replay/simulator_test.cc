#include "replay/simulator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "testing/status_matchers.h"

namespace kvtier::replay {
namespace {

using ::kvtier::testing::StatusIs;

TraceRequest SimReq(std::vector<uint64_t> ids, uint64_t input_length) {
  TraceRequest r;
  r.input_length = input_length;
  r.hash_ids = std::move(ids);
  return r;
}

ReplayCounts Simulate(const std::vector<TraceRequest>& trace, SimOptions o) {
  EXPECT_TRUE(o.Validate().ok());
  TierSimulator sim(o);
  for (const TraceRequest& r : trace) sim.Replay(r);
  return sim.counts();
}

SimOptions Ram(uint64_t blocks, HostEvictionPolicy policy = HostEvictionPolicy::kLru) {
  SimOptions o;
  o.ram_blocks = blocks;
  o.policy = policy;
  return o;
}

TEST(SimOptions, ValidateNamesTheBadField) {
  EXPECT_THAT(SimOptions{}.Validate(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("ram_blocks")));
  EXPECT_TRUE(Ram(1).Validate().ok());
}

TEST(BlockHitTokens, LastBlockIsPartialAndBlocksPastTheInputCountZero) {
  TraceRequest r = SimReq({1, 2, 3}, 1100);
  EXPECT_EQ(BlockHitTokens(r, 0), 512u);
  EXPECT_EQ(BlockHitTokens(r, 1), 512u);
  EXPECT_EQ(BlockHitTokens(r, 2), 76u);
  EXPECT_EQ(BlockHitTokens(r, 3), 0u);
}

// RAM of 2 blocks, LRU:
//   r0 [1 2]   1000: no match; RAM [1 2]
//   r1 [1 2 3] 1300: match 2 → 1024; 3 evicts 1; RAM [2 3]
//   r2 [1 2]    700: 1 absent → 0; 1 evicts 2, 2 evicts 3; RAM [1 2]
//   r3 [1]      100: match 1 → min(512, 100) = 100
const std::vector<TraceRequest> kSmall = {SimReq({1, 2}, 1000), SimReq({1, 2, 3}, 1300), SimReq({1, 2}, 700),
                                          SimReq({1}, 100)};

TEST(TierSimulator, LruHitTokensOnAHandTrace) {
  ReplayCounts c = Simulate(kSmall, Ram(2));
  EXPECT_EQ(c.requests, 4u);
  EXPECT_EQ(c.input_tokens, 3100u);
  EXPECT_EQ(c.hit_tokens, 1124u);
  EXPECT_EQ(c.hit_tokens_ram, 1124u);
  EXPECT_EQ(c.hit_tokens_disk, 0u);
  EXPECT_EQ(c.blocks, 8u);
  EXPECT_EQ(c.ram_hits, 3u);  // r1's 1 and 2, r3's 1
  EXPECT_EQ(c.inserts, 5u);   // 1 2, 3, 1 2
  EXPECT_EQ(c.ram_evictions, 3u);
  EXPECT_EQ(c.disk_hits, 0u);
  EXPECT_DOUBLE_EQ(c.HitRatio(), 1124.0 / 3100.0);
}

TEST(TierSimulator, MaxHitTokensIsUnboundedCapacity) {
  // r1 1024, r2 min(1024, 700), r3 100.
  EXPECT_EQ(MaxHitTokens(kSmall), 1824u);
  EXPECT_EQ(Simulate(kSmall, Ram(3)).hit_tokens, 1824u);
}

// RAM 1 block, disk 2 blocks (exclusive tiers, disk LRU):
//   r0 [1 2]   1024: 1; 2 pushes 1 to disk.          RAM [2] disk [1]
//   r1 [1 2 3] 1536: match 1 (disk) 2 (RAM) → 512 + 512.
//                    promote 1: 2 → disk;             RAM [1] disk [2]
//                    promote 2: 1 → disk;             RAM [2] disk [1]
//                    insert 3: 2 → disk;              RAM [3] disk [1 2]
//   r2 [4]      512: 3 → disk, disk drops 1;          RAM [4] disk [2 3]
//   r3 [1 2]   1024: 1 absent → 0. 1: 4 → disk drops 2; 2: 1 → disk drops 3
//                                                      RAM [2] disk [4 1]
//   r4 [4 1]   1000: match 2, both on disk → 1000.
TEST(TierSimulator, DiskTierTakesRamVictimsAndPromotesOnTouch) {
  std::vector<TraceRequest> trace = {SimReq({1, 2}, 1024), SimReq({1, 2, 3}, 1536), SimReq({4}, 512),
                                     SimReq({1, 2}, 1024), SimReq({4, 1}, 1000)};
  SimOptions o = Ram(1);
  o.disk_blocks = 2;
  ReplayCounts c = Simulate(trace, o);
  EXPECT_EQ(c.input_tokens, 5096u);
  EXPECT_EQ(c.hit_tokens, 2024u);
  EXPECT_EQ(c.hit_tokens_ram, 512u);
  EXPECT_EQ(c.hit_tokens_disk, 1512u);
  EXPECT_EQ(c.disk_hits, 4u);  // r1's 1 and 2, r4's 4 and 1
  EXPECT_EQ(c.ram_hits, 0u);
  EXPECT_EQ(c.inserts, 6u);  // 1 2, 3, 4, 1 2
  EXPECT_EQ(c.ram_evictions, 9u);
  EXPECT_EQ(c.disk_evictions, 3u);
  // Without the disk nothing matches: every request starts with a block
  // that one RAM slot lost.
  EXPECT_EQ(Simulate(trace, Ram(1)).hit_tokens, 0u);
}

// RAM of 3 blocks: 1 is read twice, then one-off blocks stream through.
//   LRU:   r3's 4 and 5 evict 1 and 2 → r4 misses.
//   reuse: 1 was reused, so 4 and 5 evict the one-off 2 and 3 → r4 hits.
const std::vector<TraceRequest> kScan = {SimReq({1}, 512), SimReq({1}, 512), SimReq({2, 3}, 1024),
                                         SimReq({4, 5}, 1024), SimReq({1}, 512)};

TEST(TierSimulator, ReusePolicyKeepsTheReusedBlockThroughAScan) {
  EXPECT_EQ(Simulate(kScan, Ram(3, HostEvictionPolicy::kLru)).hit_tokens, 512u);
  ReplayCounts c = Simulate(kScan, Ram(3, HostEvictionPolicy::kReuse));
  EXPECT_EQ(c.hit_tokens, 1024u);
  EXPECT_EQ(c.ghost_hits, 0u);
}

TEST(TierSimulator, ReusePolicyRemembersEvictedBlocks) {
  // RAM of 2 blocks.
  std::vector<TraceRequest> trace = {SimReq({1}, 512), SimReq({2}, 512), SimReq({1}, 512),
                                     SimReq({3}, 512), SimReq({4}, 512), SimReq({1}, 512)};
  ReplayCounts lru = Simulate(trace, Ram(2, HostEvictionPolicy::kLru));
  ReplayCounts reuse = Simulate(trace, Ram(2, HostEvictionPolicy::kReuse));
  // LRU: r2 hits 1; r3 evicts 2, r4 evicts 1 → r5 misses.
  EXPECT_EQ(lru.hit_tokens, 512u);
  // reuse: r2 hits 1 (reused); r3 evicts 2, r4 evicts 3 → r5 hits.
  EXPECT_EQ(reuse.hit_tokens, 1024u);
  std::vector<TraceRequest> again = {SimReq({1}, 512), SimReq({2}, 512), SimReq({3}, 512), SimReq({1}, 512),
                                     SimReq({4}, 512), SimReq({5}, 512), SimReq({1}, 512)};
  // reuse: r3 re-inserts the evicted 1 as reused (ghost hit); 4 and 5 then
  // evict 3 and 4 → r6 hits. LRU: 4 evicts 3, 5 evicts 1 → r6 misses.
  EXPECT_EQ(Simulate(again, Ram(2, HostEvictionPolicy::kLru)).hit_tokens, 0u);
  ReplayCounts g = Simulate(again, Ram(2, HostEvictionPolicy::kReuse));
  EXPECT_EQ(g.hit_tokens, 512u);
  EXPECT_EQ(g.ghost_hits, 1u);
}

TEST(Belady, EvictsTheBlockUsedFarthestAhead) {
  // Capacity 2: r1's 3 evicts 2 (next used after 1), so r2 matches 1.
  std::vector<TraceRequest> trace = {SimReq({1, 2}, 1024), SimReq({3}, 512), SimReq({1, 2}, 1024)};
  EXPECT_EQ(BeladyHitTokens(trace, 2), 512u);
  EXPECT_EQ(Simulate(trace, Ram(2)).hit_tokens, 0u);  // LRU evicted 1
  // kSmall: r1's 3 evicts 2 (used after 1), so r2 matches 1: 1024 + 512 + 100.
  EXPECT_EQ(BeladyHitTokens(kSmall, 2), 1636u);
  EXPECT_EQ(BeladyHitTokens(kScan, 3), 1024u);
  EXPECT_EQ(BeladyHitTokens(kSmall, 100), MaxHitTokens(kSmall));
}

TEST(Belady, NeverBelowLruOnALongRandomishTrace) {
  // Chains of a few shared prefixes with one-off tails.
  std::vector<TraceRequest> trace;
  uint64_t next_id = 1000;
  uint64_t state = 7;
  for (int i = 0; i < 400; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t prefix = (state >> 33) % 8;
    TraceRequest r;
    for (uint64_t d = 0; d < 4; ++d) r.hash_ids.push_back(prefix * 10 + d);
    const uint64_t tail = (state >> 40) % 5;
    for (uint64_t d = 0; d < tail; ++d) r.hash_ids.push_back(next_id++);
    r.input_length = 512 * r.hash_ids.size() - 100;
    trace.push_back(std::move(r));
  }
  for (uint64_t cap : {4, 8, 16, 32}) {
    const uint64_t lru = Simulate(trace, Ram(cap)).hit_tokens;
    const uint64_t reuse = Simulate(trace, Ram(cap, HostEvictionPolicy::kReuse)).hit_tokens;
    const uint64_t belady = BeladyHitTokens(trace, cap);
    EXPECT_GE(belady, lru) << cap;
    EXPECT_GE(belady, reuse) << cap;
    EXPECT_LE(belady, MaxHitTokens(trace)) << cap;
  }
}

}  // namespace
}  // namespace kvtier::replay
