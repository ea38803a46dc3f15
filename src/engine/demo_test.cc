// The demo end to end in a small configuration: bit-exact logits, prefixes
// from the pool, the host tier and (after the restart) the disk tier, exact
// reuse counts, the folder rules (clean, keep, refuse a foreign folder) and
// the JSON summary.
#include "engine/demo.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/demo_script.h"
#include "engine/engine_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier::engine {
namespace {

using ::kvtier::engine::testing::TempDir;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

constexpr uint32_t kBt = 8;

DemoOptions SmallDemo(const std::string& dir) {
  DemoOptions o;
  o.dir = dir;
  o.model.layers = 2;
  o.model.heads = 2;
  o.model.kv_heads = 1;
  o.model.head_dim = 16;
  o.model.hidden = 32;
  o.model.ffn = 64;
  o.block_tokens = kBt;
  o.conversations = 3;
  o.turns_before_restart = 2;
  o.turns_after_restart = 1;
  o.decode_tokens = 3;
  o.system_prompt_bytes = 100;
  o.user_message_bytes = 30;
  o.host_bytes = 16 << 20;
  return o;
}

// The prompt of conversation c's first turn, rebuilt from the script.
std::string FirstPrompt(const DemoOptions& o, uint32_t c) {
  const auto msgs = DemoUserMessages();
  return std::string(DemoSystemPrompt().substr(0, o.system_prompt_bytes)) +
         "\nUser: " + std::string(msgs[(c * 5) % msgs.size()].substr(0, o.user_message_bytes)) +
         "\nAssistant: ";
}

size_t CommonPrefix(const std::string& a, const std::string& b) {
  return std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
         a.begin();
}

TEST(DemoTest, RunsEndToEndWithDiskHitsAfterTheRestart) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  DemoOptions o = SmallDemo(dir);
  int request_events = 0, restart_events = 0;
  auto rep = RunDemo(o, [&](const DemoEvent& e) {
    if (e.kind == DemoEvent::Kind::kRequest) {
      ++request_events;
      EXPECT_EQ(e.total_requests, 9u);
      EXPECT_EQ(e.request->index + 1, static_cast<uint32_t>(request_events));
    }
    if (e.kind == DemoEvent::Kind::kRestart) {
      ++restart_events;
      EXPECT_EQ(request_events, 6);
      EXPECT_THAT(e.message, HasSubstr("reopened"));
    }
  });
  ASSERT_THAT(rep, IsOk());
  EXPECT_EQ(request_events, 9);
  EXPECT_EQ(restart_events, 1);
  ASSERT_EQ(rep->requests.size(), 9u);
  EXPECT_TRUE(rep->bit_exact);
  EXPECT_EQ(rep->mismatched_requests, 0u);
  for (const DemoRequest& r : rep->requests) {
    EXPECT_EQ(r.logits_compared, 4u) << r.index;  // prompt + 3 decoded tokens
    EXPECT_EQ(r.logits_mismatched, 0u) << r.index;
    EXPECT_EQ(r.reused_tokens + r.computed_tokens, r.prompt_tokens) << r.index;
  }

  // Request 1 (conversation 1): nothing cached.
  const DemoRequest& r0 = rep->requests[0];
  EXPECT_EQ(r0.source, "none");
  EXPECT_EQ(r0.reused_tokens, 0u);
  EXPECT_EQ(r0.prompt_tokens, FirstPrompt(o, 0).size());
  // Request 2 (conversation 2): the full blocks it shares with conversation
  // 1 (the system prompt and "\nUser: " and whatever the messages share).
  const DemoRequest& r1 = rep->requests[1];
  const size_t common = CommonPrefix(FirstPrompt(o, 0), FirstPrompt(o, 1));
  EXPECT_EQ(r1.reused_tokens, common / kBt * kBt);
  EXPECT_EQ(r1.source, "pool");
  EXPECT_EQ(r1.pool_blocks, common / kBt);

  // After the restart the pool and the host tier are empty: conversation 1's
  // third turn reuses every full block of its first two turns, from disk.
  const DemoRequest& r6 = rep->requests[6];
  EXPECT_TRUE(r6.after_restart);
  EXPECT_EQ(r6.conversation, 0u);
  EXPECT_EQ(r6.turn, 2u);
  const size_t before = rep->requests[3].prompt_tokens + o.decode_tokens;  // its turn-2 length
  EXPECT_EQ(r6.source, "disk");
  EXPECT_EQ(r6.disk_blocks, before / kBt);
  EXPECT_EQ(r6.reused_tokens, before / kBt * kBt);
  EXPECT_EQ(r6.pool_blocks + r6.host_blocks, 0u);
  EXPECT_GT(rep->disk_blocks_after_restart, r6.disk_blocks);  // the others read theirs too
  size_t disk_before = 0, disk_after = 0;
  for (const DemoRequest& r : rep->requests)
    (r.after_restart ? disk_after : disk_before) += r.disk_blocks;
  EXPECT_EQ(disk_before, 0u);
  EXPECT_EQ(disk_after, rep->disk_blocks_after_restart);
  EXPECT_EQ(rep->disk_blocks_hit, disk_after);
  EXPECT_GT(rep->disk_entries_at_end, 0u);
  EXPECT_GT(rep->blocks_stored, 0u);

  // The summary as JSON says the same.
  const nlohmann::json j = nlohmann::json::parse(rep->ToJson());
  EXPECT_EQ(j["bit_exact"], true);
  EXPECT_EQ(j["disk_blocks_after_restart"], rep->disk_blocks_after_restart);
  EXPECT_EQ(j["requests"].size(), 9u);
  EXPECT_EQ(j["requests"][6]["source"], "disk");
  EXPECT_EQ(j["model"]["kv_dtype"], "F16");
  const std::string table = FormatDemoTable(*rep);
  EXPECT_THAT(table, HasSubstr("restart"));
  EXPECT_THAT(table, HasSubstr("identical, bit for bit"));
}

// `kvtier demo --model hybrid`: full attention, a sliding window and gated
// linear attention; every request bit-exact, the disk serving after the
// restart (the recurrent state from the last block's snapshot alone), and a
// small pool whose evicted conversations come back from the host tier.
TEST(DemoTest, HybridModelIsBitExactInEveryRequest) {
  TempDir tmp;
  DemoOptions o = SmallDemo(tmp.path() + "/demo");
  UseHybridModel(&o);
  ASSERT_EQ(o.model.layers, 3u);
  EXPECT_EQ(o.model.mixers, (std::vector<MixerKind>{MixerKind::kAttention, MixerKind::kSliding,
                                                    MixerKind::kLinear}));
  EXPECT_EQ(o.model.window, 3 * kBt);
  std::string start;
  auto rep = RunDemo(o, [&](const DemoEvent& e) {
    if (e.kind == DemoEvent::Kind::kStart) start = e.message;
  });
  ASSERT_THAT(rep, IsOk());
  EXPECT_THAT(start, HasSubstr("attention, sliding 24, linear; K/V F16"));
  ASSERT_EQ(rep->requests.size(), 9u);
  EXPECT_TRUE(rep->bit_exact);
  for (const DemoRequest& r : rep->requests) {
    EXPECT_EQ(r.logits_compared, 4u) << r.index;
    EXPECT_EQ(r.logits_mismatched, 0u) << r.index << ": " << r.mismatch;
  }
  EXPECT_EQ(rep->requests[1].source, "pool");
  const DemoRequest& r6 = rep->requests[6];
  const size_t before = rep->requests[3].prompt_tokens + o.decode_tokens;
  EXPECT_EQ(r6.source, "disk");
  EXPECT_EQ(r6.reused_tokens, before / kBt * kBt);
  EXPECT_GT(rep->disk_blocks_after_restart, r6.disk_blocks);
  const nlohmann::json j = nlohmann::json::parse(rep->ToJson());
  EXPECT_EQ(j["model"]["mixers"], nlohmann::json::parse(R"(["attention","sliding","linear"])"));
  EXPECT_EQ(j["model"]["window"], 24);

  // Evictions: the offloaded conversations (blocks in the host tier, the
  // partial last block and live recurrent state in host memory) resume
  // bit-exact.
  DemoOptions small = SmallDemo(tmp.path() + "/demo2");
  UseHybridModel(&small);
  small.turns_after_restart = 0;
  small.pool_blocks = 28;
  auto evicting = RunDemo(small);
  ASSERT_THAT(evicting, IsOk());
  EXPECT_TRUE(evicting->bit_exact);
  EXPECT_GT(evicting->pool_evicted_sequences, 0u);
  EXPECT_GT(evicting->host_blocks_hit, 0u);
}

// 8-bit affine quantized K/V (U8 data, F16 scales and biases per group of
// 8): the same bit-exact check, the restart included.
TEST(DemoTest, QuantizedKvIsBitExactInEveryRequest) {
  TempDir tmp;
  DemoOptions o = SmallDemo(tmp.path() + "/demo");
  o.model.kv_bits = 8;
  o.model.kv_group = 8;
  auto rep = RunDemo(o);
  ASSERT_THAT(rep, IsOk());
  EXPECT_TRUE(rep->bit_exact);
  ASSERT_EQ(rep->requests.size(), 9u);
  for (const DemoRequest& r : rep->requests) EXPECT_EQ(r.logits_mismatched, 0u) << r.index;
  EXPECT_EQ(rep->requests[6].source, "disk");
  // K and V: 16 data bytes and 2 × (2 scales + 2 biases) F16 bytes per token and head.
  EXPECT_EQ(rep->block_bytes, 2u * 2 * 1 * kBt * (16 + 8));
}

TEST(DemoTest, SmallPoolEvictsIdleConversationsAndTheHostTierServesThem) {
  TempDir tmp;
  DemoOptions o = SmallDemo(tmp.path() + "/demo");
  o.turns_after_restart = 0;
  // The longest conversation needs 26 blocks (204 tokens): with 28, the others are
  // evicted and their own blocks come back from the host tier.
  o.pool_blocks = 28;
  auto rep = RunDemo(o);
  ASSERT_THAT(rep, IsOk());
  EXPECT_TRUE(rep->bit_exact);
  EXPECT_GT(rep->pool_evicted_sequences, 0u);
  EXPECT_GT(rep->host_blocks_hit, 0u);
  EXPECT_EQ(rep->disk_blocks_hit, 0u);
  EXPECT_EQ(rep->disk_blocks_after_restart, 0u);
}

TEST(DemoTest, CleansItsOwnFolderKeepsOnRequestAndRefusesOthers) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/demo";
  DemoOptions o = SmallDemo(dir);
  o.conversations = 1;
  o.turns_before_restart = 1;
  o.turns_after_restart = 0;
  auto first = RunDemo(o);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->requests[0].source, "none");
  // Clean (the default): the earlier run's blocks are gone.
  auto again = RunDemo(o);
  ASSERT_THAT(again, IsOk());
  EXPECT_EQ(again->requests[0].source, "none");
  // Keep: the disk tier serves the same prompt from the first request on.
  o.start = DemoStart::kKeep;
  auto kept = RunDemo(o);
  ASSERT_THAT(kept, IsOk());
  EXPECT_EQ(kept->requests[0].source, "disk");
  // Every full block of the prompt is on disk (a reused prefix stops at
  // least one token short of the prompt).
  const size_t prompt = kept->requests[0].prompt_tokens;
  EXPECT_EQ(kept->requests[0].reused_tokens, std::min(prompt - 1, prompt / kBt * kBt));
  EXPECT_EQ(kept->requests[0].disk_blocks, prompt / kBt);
  EXPECT_TRUE(kept->bit_exact);

  // A folder that is not a demo folder is left alone.
  const std::string foreign = tmp.path() + "/mine";
  std::filesystem::create_directories(foreign);
  std::ofstream(foreign + "/notes.txt") << "keep me";
  o.dir = foreign;
  o.start = DemoStart::kClean;
  auto refused = RunDemo(o);
  EXPECT_THAT(refused, StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(refused.status().message(), HasSubstr("not a kvtier demo folder"));
  EXPECT_TRUE(std::filesystem::exists(foreign + "/notes.txt"));
}

TEST(DemoTest, ValidateNamesTheBadOption) {
  DemoOptions o = SmallDemo("x");
  o.conversations = 0;
  EXPECT_THAT(RunDemo(o), StatusIs(StatusCode::kInvalidArgument));
  o = SmallDemo("x");
  o.model.vocab = 100;
  EXPECT_THAT(o.Validate().message(), HasSubstr("vocab"));
  o = SmallDemo("");
  EXPECT_THAT(o.Validate().message(), HasSubstr("dir"));
  o = SmallDemo("x");
  o.remote.emplace();
  EXPECT_THAT(o.Validate().message(), HasSubstr("remote.url"));
}

// A second host needs the server: one that is not there is a clear error
// at once, not a demo of misses.
TEST(DemoTest, ARemoteServerNobodyRunsIsUnavailable) {
  TempDir tmp;
  DemoOptions o = SmallDemo(tmp.path() + "/demo");
  o.remote.emplace().url = "redis://127.0.0.1:1";
  EXPECT_THAT(RunDemo(o), StatusIs(StatusCode::kUnavailable));
}

}  // namespace
}  // namespace kvtier::engine
