// remote_lookup_budget (DESIGN.md §7): Exists() — the cache's Match, on an
// engine's request path — waits for the server at most lookup_budget_ms,
// a connect included, from the first call on. Each test gives the server
// an answer that does come, but after the budget (and well within every
// other timeout, which are set to 30 s): within the budget the answer is a
// miss for that call, counted in exists_late; without the budget it would
// be a hit. The outcome, not the clock, is what is checked.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "testing/fake_redis_server.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::FakeRedisServer;
using Reply = FakeRedisServer::Reply;

// 4 bytes (":1\r\n") 400 ms apart: the answer is complete after 1.2 s.
constexpr uint32_t kSlowByteMicros = 400'000;

bool IsCommand(const FakeRedisServer::Command& c, const char* name) { return !c.empty() && c[0] == name; }

RemoteTierOptions BudgetOptions(const std::string& url) {
  RemoteTierOptions o;
  o.url = url;
  o.layout = TinyLayout();
  o.key_prefix = "t:";
  o.connect_timeout_ms = 30'000;
  o.command_timeout_ms = 30'000;
  o.lookup_budget_ms = 20;
  o.breaker_failure_threshold = 100;
  o.writer_threads = 1;
  o.require_server_at_open = true;
  return o;
}

TEST(LookupBudget, LateAnswerIsAMissForThatCall) {
  std::unique_ptr<FakeRedisServer> server =
      FakeRedisServer::Start([](const FakeRedisServer::Command& c) -> std::optional<Reply> {
        if (IsCommand(c, "GETRANGE")) return Reply{FakeHeadReply(), Reply::Then::kContinue, kSlowByteMicros};
        return std::nullopt;
      }).value();
  std::unique_ptr<RemoteTier> tier = OpenTier(BudgetOptions(server->url()));
  ASSERT_NE(tier, nullptr);
  const std::vector<BlockKey> keys = {TestBlockKey(1)};
  EXPECT_EQ(tier->Exists(keys), std::vector<bool>{false});
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.exists_calls, 1u);
  EXPECT_EQ(s.exists_found, 0u);
  EXPECT_EQ(s.exists_late, 1u);
  EXPECT_EQ(s.timeouts, 1u);

  // The same server within a budget that covers it: found (the control).
  RemoteTierOptions patient = BudgetOptions(server->url());
  patient.lookup_budget_ms = 30'000;
  patient.min_reply_rate = 0;  // 4 bytes in 1.2 s would fail the reply-rate floor
  std::unique_ptr<RemoteTier> other = OpenTier(patient);
  EXPECT_EQ(other->Exists(keys), std::vector<bool>{true});
  EXPECT_EQ(other->Stats().exists_late, 0u);
}

// Pipelined keys: the first answered at once, the second's reply stops
// after its first byte (packets lost mid-reply; the rest comes late), the
// third would follow it. Only the first is found.
TEST(LookupBudget, ReplyStalledMidwayEndsTheCallAtTheBudget) {
  std::atomic<int> exists{0};
  std::unique_ptr<FakeRedisServer> server =
      FakeRedisServer::Start([&](const FakeRedisServer::Command& c) -> std::optional<Reply> {
        if (!IsCommand(c, "GETRANGE")) return std::nullopt;
        if (exists.fetch_add(1) % 3 == 1) {
          return Reply{FakeHeadReply(), Reply::Then::kContinue, kSlowByteMicros};
        }
        return Reply{FakeHeadReply()};
      }).value();
  std::unique_ptr<RemoteTier> tier = OpenTier(BudgetOptions(server->url()));
  ASSERT_NE(tier, nullptr);
  const std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(2), TestBlockKey(3)};
  EXPECT_EQ(tier->Exists(keys), (std::vector<bool>{true, false, false}));
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.exists_found, 1u);
  EXPECT_EQ(s.exists_late, 2u);
}

// The first call that must connect (the pool's connection was dropped by
// a late answer) gets the budget for its connect and handshake too: a
// handshake answered late is a miss, not a 30 s connect timeout's wait.
TEST(LookupBudget, ConnectIsInsideTheBudget) {
  std::atomic<int> pings{0};
  std::unique_ptr<FakeRedisServer> server =
      FakeRedisServer::Start([&](const FakeRedisServer::Command& c) -> std::optional<Reply> {
        if (IsCommand(c, "PING") && pings.fetch_add(1) > 0) {
          return Reply{"+PONG\r\n", Reply::Then::kContinue, kSlowByteMicros / 2};
        }
        if (IsCommand(c, "GETRANGE")) return Reply{FakeHeadReply(), Reply::Then::kContinue, kSlowByteMicros};
        return std::nullopt;
      }).value();
  std::unique_ptr<RemoteTier> tier = OpenTier(BudgetOptions(server->url()));
  ASSERT_NE(tier, nullptr);
  const std::vector<BlockKey> keys = {TestBlockKey(1)};
  EXPECT_EQ(tier->Exists(keys), std::vector<bool>{false});  // late EXISTS: connection dropped
  EXPECT_EQ(tier->Exists(keys), std::vector<bool>{false});  // late handshake
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.exists_late, 2u);
  EXPECT_EQ(s.connects, 1u);  // Open()'s; the second call's never finished
  EXPECT_EQ(s.connect_failures, 1u);
  EXPECT_EQ(pings.load(), 2);
}

// A real server paused (SIGSTOP) after Open, resumed after the budget:
// the paused call is a miss; once it runs again, a hit.
TEST(LookupBudget, PausedServerIsAMissNotAWait) {
  Result<std::unique_ptr<testing::RedisServer>> started =
      testing::RedisServer::Start(testing::RedisServerOptions{});
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<testing::RedisServer> redis = std::move(started).value();
  std::unique_ptr<RemoteTier> tier = OpenTier(BudgetOptions(redis->url()));
  ASSERT_NE(tier, nullptr);
  const BlockKey key = TestBlockKey(5);
  ASSERT_TRUE(tier->PutSync(key, TestBlock(TinyLayout(), 5)->span()).ok());
  ASSERT_TRUE(redis->Pause().ok());
  std::thread resume([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1000));
    (void)redis->Resume();
  });
  const std::vector<bool> paused = tier->Exists(std::vector<BlockKey>{key});
  resume.join();
  EXPECT_EQ(paused, std::vector<bool>{false});
  EXPECT_EQ(tier->Stats().exists_late, 1u);
  EXPECT_EQ(tier->Exists(std::vector<BlockKey>{key}), std::vector<bool>{true});
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.exists_late, 1u);
  EXPECT_EQ(s.exists_found, 1u);
}

}  // namespace
}  // namespace kvtier::remote
