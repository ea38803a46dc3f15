#include "replay/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>
#include <vector>

#include "replay/real_replayer.h"
#include "replay/simulator.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::replay {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

constexpr HostEvictionPolicy kLru = HostEvictionPolicy::kLru;
constexpr HostEvictionPolicy kReuse = HostEvictionPolicy::kReuse;

// Shared prefixes of different popularity, one-off tails and some partial
// last blocks: every capacity below ~300 blocks evicts, and LRU and reuse
// differ.
std::vector<TraceRequest> Trace(int requests) {
  std::vector<TraceRequest> trace;
  uint64_t next_id = 100'000;
  uint64_t state = 7;
  for (int i = 0; i < requests; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t prefix = (state >> 33) % 40 % (1 + (state >> 50) % 40);
    TraceRequest r;
    r.timestamp = static_cast<uint64_t>(i);
    for (uint64_t d = 0; d < 2 + prefix % 5; ++d) r.hash_ids.push_back(prefix * 100 + d);
    for (uint64_t d = 0; d < (state >> 40) % 6; ++d) r.hash_ids.push_back(next_id++);
    r.input_length = 512 * r.hash_ids.size() - (state >> 20) % 400;
    trace.push_back(std::move(r));
  }
  return trace;
}

ReplayCounts Single(const std::vector<TraceRequest>& trace, uint64_t ram_blocks,
                    uint64_t disk_blocks, HostEvictionPolicy policy) {
  SimOptions o;
  o.ram_blocks = ram_blocks;
  o.disk_blocks = disk_blocks;
  o.policy = policy;
  TierSimulator sim(o);
  for (const TraceRequest& r : trace) sim.Replay(r);
  return sim.counts();
}

void ExpectSameCounts(const ReplayCounts& a, const ReplayCounts& b) {
  EXPECT_EQ(a.requests, b.requests);
  EXPECT_EQ(a.input_tokens, b.input_tokens);
  EXPECT_EQ(a.hit_tokens, b.hit_tokens);
  EXPECT_EQ(a.hit_tokens_ram, b.hit_tokens_ram);
  EXPECT_EQ(a.hit_tokens_disk, b.hit_tokens_disk);
  EXPECT_EQ(a.blocks, b.blocks);
  EXPECT_EQ(a.ram_hits, b.ram_hits);
  EXPECT_EQ(a.disk_hits, b.disk_hits);
  EXPECT_EQ(a.inserts, b.inserts);
  EXPECT_EQ(a.ram_evictions, b.ram_evictions);
  EXPECT_EQ(a.disk_evictions, b.disk_evictions);
  EXPECT_EQ(a.ghost_hits, b.ghost_hits);
}

SweepOptions Sweep(std::vector<uint64_t> ram_tokens, std::vector<HostEvictionPolicy> policies) {
  SweepOptions o;
  o.ram_tokens = std::move(ram_tokens);
  o.policies = std::move(policies);
  o.threads = 3;
  return o;
}

TEST(SweepOptions, ValidateNamesTheBadField) {
  auto bad = [](auto edit) {
    SweepOptions o = Sweep({512, 4096}, {kLru});
    edit(o);
    return o.Validate();
  };
  EXPECT_THAT(bad([](SweepOptions&) {}), IsOk());
  EXPECT_THAT(bad([](SweepOptions& o) { o.ram_tokens.clear(); }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_tokens must have 1..64")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.ram_tokens.assign(65, 512); }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("has 65")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.ram_tokens[1] = 511; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_tokens[1] = 511 is less")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.ram_tokens[0] = kMaxReplayTokens + 1; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_tokens[0] = 1099511627777")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.ram_tokens[1] = 512; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_tokens repeats 512")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.disk_tokens = 100; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("disk_tokens = 100")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.disk_tokens = UINT64_MAX; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("over the limit")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.policies.clear(); }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("policies is empty")));
  EXPECT_THAT(bad([](SweepOptions& o) {
                o.policies = {kReuse, kReuse};
              }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("policies repeats reuse")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.threads = 0; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("threads")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.disk_dir = "/tmp/x"; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("disk_dir is only used")));
  EXPECT_THAT(bad([](SweepOptions& o) {
                o.real_layout = *ModelLayout::Preset("tiny");
                o.disk_tokens = 4096;
              }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("disk_dir is required")));
  EXPECT_THAT(bad([](SweepOptions& o) { o.real_layout = ModelLayout{}; }),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("real_layout")));
}

// Each row is exactly the single-point replay of its flags; the references
// are the free functions' figures.
TEST(RunSweep, EachRowEqualsTheSinglePointReplay) {
  const std::vector<TraceRequest> trace = Trace(600);
  for (uint64_t disk_tokens : {uint64_t{0}, uint64_t{512 * 60}}) {
    SCOPED_TRACE("disk_tokens " + std::to_string(disk_tokens));
    SweepOptions o = Sweep({512 * 40, 512, 512 * 10, 512 * 150 + 100}, {kLru, kReuse});
    o.disk_tokens = disk_tokens;
    Result<SweepResult> res = RunSweep(Env::Default(), trace, o);
    ASSERT_THAT(res, IsOk());
    ASSERT_EQ(res->rows.size(), 8u);
    EXPECT_EQ(res->requests, trace.size());
    EXPECT_EQ(res->max_hit_tokens, MaxHitTokens(trace));
    uint64_t input = 0;
    for (const TraceRequest& r : trace) input += r.input_length;
    EXPECT_EQ(res->input_tokens, input);
    for (size_t i = 0; i < res->rows.size(); ++i) {
      const SweepRow& row = res->rows[i];
      SCOPED_TRACE("row " + std::to_string(i));
      EXPECT_EQ(row.policy, i < 4 ? kLru : kReuse);  // policy-major, sizes in the given order
      EXPECT_EQ(row.ram_tokens, o.ram_tokens[i % 4]);
      EXPECT_EQ(row.ram_blocks, o.ram_tokens[i % 4] / 512);
      EXPECT_EQ(row.disk_tokens, disk_tokens);
      EXPECT_EQ(row.disk_blocks, disk_tokens / 512);
      ExpectSameCounts(row.counts, Single(trace, row.ram_blocks, row.disk_blocks, row.policy));
      EXPECT_EQ(row.belady_hit_tokens, BeladyHitTokens(trace, row.ram_blocks));
      EXPECT_EQ(row.verified, 0u);
    }
    // The trace is built so that the sizes give different figures.
    EXPECT_LT(res->rows[1].counts.hit_tokens, res->rows[0].counts.hit_tokens);
    EXPECT_NE(res->rows[0].counts.hit_tokens, res->rows[4].counts.hit_tokens);
  }
}

// A RAM tier larger than the trace's distinct blocks never evicts: the
// largest size a sweep takes (2^40 tokens) gives the unbounded figure and
// sizes nothing by the option.
TEST(RunSweep, ACapacityOverTheTraceActsAsUnbounded) {
  const std::vector<TraceRequest> trace = Trace(300);
  const uint64_t distinct = DistinctBlocks(trace);
  SweepOptions o = Sweep({kMaxReplayTokens, distinct * 512}, {kLru, kReuse});
  o.disk_tokens = kMaxReplayTokens;
  Result<SweepResult> res = RunSweep(Env::Default(), trace, o);
  ASSERT_THAT(res, IsOk());
  for (const SweepRow& row : res->rows) {
    EXPECT_EQ(row.counts.hit_tokens, res->max_hit_tokens);
    EXPECT_EQ(row.counts.ram_evictions, 0u);
    EXPECT_EQ(row.counts.hit_tokens_disk, 0u);
    EXPECT_EQ(row.belady_hit_tokens, res->max_hit_tokens);
  }
  EXPECT_EQ(res->rows[0].ram_blocks, kMaxReplayBlocks);  // reported as given
}

TEST(DistinctBlocks, CountsEachIdOnce) {
  std::vector<TraceRequest> trace(2);
  trace[0].hash_ids = {1, 2, 3};
  trace[1].hash_ids = {1, 2, 4, 4};
  EXPECT_EQ(DistinctBlocks(trace), 4u);
  EXPECT_EQ(DistinctBlocks({}), 0u);
}

TEST(RunSweep, ProgressIsReportedOnTheCallingThreadUpToTheTotal) {
  const std::vector<TraceRequest> trace = Trace(200);
  SweepOptions o = Sweep({512 * 8, 512 * 16, 512 * 32}, {kLru, kReuse});
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<uint64_t> seen;
  uint64_t total = 0;
  bool other_thread = false;
  o.on_progress = [&](uint64_t done, uint64_t t) {
    other_thread |= std::this_thread::get_id() != caller;
    seen.push_back(done);
    total = t;
  };
  ASSERT_THAT(RunSweep(Env::Default(), trace, o), IsOk());
  EXPECT_FALSE(other_thread);
  // 6 points and 3 Belady references, each one pass over the trace.
  EXPECT_EQ(total, 9u * 200);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back(), total);
  EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
}

TEST(RunSweep, RealPayloadRowsEqualTheSimulator) {
  const std::vector<TraceRequest> trace = Trace(120);
  SweepOptions o = Sweep({512 * 12, 512 * 40}, {kLru, kReuse});
  o.real_layout = *ModelLayout::Preset("tiny");
  Result<SweepResult> res = RunSweep(Env::Default(), trace, o);
  ASSERT_THAT(res, IsOk());
  ASSERT_EQ(res->rows.size(), 4u);
  for (const SweepRow& row : res->rows) {
    const ReplayCounts sim = Single(trace, row.ram_blocks, 0, row.policy);
    EXPECT_EQ(row.counts.hit_tokens, sim.hit_tokens);
    EXPECT_EQ(row.counts.inserts, sim.inserts);
    EXPECT_EQ(row.verified, row.counts.ram_hits);
    EXPECT_GT(row.verified, 0u);
    EXPECT_EQ(row.wrong, 0u);
  }
}

TEST(RunSweep, RealPayloadWithADiskReplaysEachPointIntoItsOwnFreshFolder) {
  ::kvtier::testing::TempDir tmp;
  const std::vector<TraceRequest> trace = Trace(60);
  SweepOptions o = Sweep({512 * 8, 512 * 20}, {kLru});
  o.real_layout = *ModelLayout::Preset("tiny");
  o.disk_tokens = 512 * 1000;
  o.disk_dir = tmp.Sub("disk");
  Result<SweepResult> res = RunSweep(Env::Default(), trace, o);
  ASSERT_THAT(res, IsOk());
  for (const SweepRow& row : res->rows) {
    EXPECT_EQ(row.counts.hit_tokens, res->max_hit_tokens);  // the disk holds the whole trace
    EXPECT_EQ(row.wrong, 0u);
  }
  EXPECT_GT(res->rows[0].counts.hit_tokens_disk, 0u);
  EXPECT_TRUE(std::filesystem::is_directory(tmp.Sub("disk/lru-4096")));
  EXPECT_TRUE(std::filesystem::is_directory(tmp.Sub("disk/lru-10240")));
  // The folder now holds blocks: a second sweep into it would count them.
  EXPECT_THAT(RunSweep(Env::Default(), trace, o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("is not empty")));
}

TEST(RunSweep, RefusesBadOptionsBeforeReplaying) {
  const std::vector<TraceRequest> trace = Trace(10);
  bool called = false;
  SweepOptions o = Sweep({100}, {kLru});
  o.on_progress = [&](uint64_t, uint64_t) { called = true; };
  EXPECT_THAT(RunSweep(Env::Default(), trace, o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("ram_tokens[0] = 100")));
  EXPECT_FALSE(called);
}

// Capacities are bounded where they are taken (a huge value once made
// Belady's heap arithmetic overflow and the real replayer's Match index
// reserve memory for blocks the trace does not have).
TEST(ReplayLimits, OptionsRefuseCapacitiesOverTheLimitNamingTheField) {
  SimOptions s;
  s.ram_blocks = kMaxReplayBlocks + 1;
  EXPECT_THAT(s.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("SimOptions.ram_blocks")));
  s.ram_blocks = kMaxReplayBlocks;
  s.disk_blocks = UINT64_MAX;
  EXPECT_THAT(s.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("SimOptions.disk_blocks")));
  RealReplayOptions r;
  r.layout = *ModelLayout::Preset("tiny");
  r.ram_blocks = UINT64_MAX;
  EXPECT_THAT(r.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("RealReplayOptions.ram_blocks")));
  const std::vector<TraceRequest> trace = Trace(100);
  EXPECT_EQ(BeladyHitTokens(trace, UINT64_MAX), MaxHitTokens(trace));
}

}  // namespace
}  // namespace kvtier::replay
