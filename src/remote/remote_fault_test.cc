// The remote tier while its server is killed (SIGKILL) or paused (SIGSTOP):
// misses and dropped copies, every call returning within its timeout plus a
// margin, no wrong byte, then hits again once the server is back. Each test
// starts its own redis-server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <limits>
#include <thread>

#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;

// A hang check, not a speed check: generous on a loaded machine.
constexpr double kMarginSeconds = 5.0;
// How long a test waits for an event (the server back, a miss seen) before
// it gives up: only a bound against hangs.
constexpr double kEventSeconds = 60.0;

RemoteTierOptions FaultOptions(const std::string& url, const ModelLayout& layout,
                               const std::string& name) {
  RemoteTierOptions o = TestOptions(url, layout, name);
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 500;
  o.breaker_failure_threshold = 2;
  o.breaker_open_ms = 200;
  o.breaker_max_open_ms = 400;
  return o;
}

// The longest one call may take: connect + one round trip, plus the margin.
double CallBound(const RemoteTierOptions& o) {
  return (o.connect_timeout_ms + o.command_timeout_ms) / 1000.0 + kMarginSeconds;
}

TEST(RemoteFault, KilledMidLoadMissesThenHitsAfterRestart) {
  testing::RedisServerOptions so;
  so.append_only = true;  // the data survives the SIGKILL
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = FaultOptions((*server)->url(), layout, "sigkill");
  o.part_bytes = 8192;
  std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
  std::vector<BlockKey> keys;
  for (int i = 0; i < 16; ++i) {
    keys.push_back(TestBlockKey(i));
    ASSERT_TRUE(tier->PutSync(keys.back(), TestBlock(layout, i)->span()).ok());
  }

  // A reader loads every block in a loop, checking every byte it gets.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rounds{0}, full_rounds{0}, miss_rounds{0}, wrong{0};
  std::atomic<uint64_t> slowest_ms{0};
  std::thread reader([&] {
    while (!stop.load()) {
      Stopwatch w;
      std::vector<SharedBlock> got = tier->GetMany(keys);
      const uint64_t ms = static_cast<uint64_t>(w.Seconds() * 1000);
      if (ms > slowest_ms.load()) slowest_ms.store(ms);
      uint64_t hits = 0;
      for (size_t i = 0; i < keys.size(); ++i) {
        if (got[i] == nullptr) continue;
        ++hits;
        if (!CheckBlockFile(got[i]->span(), layout, keys[i]).ok()) ++wrong;
      }
      if (hits == keys.size()) ++full_rounds;
      if (hits < keys.size()) ++miss_rounds;
      ++rounds;
    }
  });
  auto wait_for = [&](auto done) {
    Stopwatch w;
    while (!done() && w.Seconds() < kEventSeconds)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return done();
  };
  ASSERT_TRUE(wait_for([&] { return full_rounds.load() >= 2; }));
  ASSERT_TRUE((*server)->Kill().ok());
  EXPECT_TRUE(wait_for([&] { return miss_rounds.load() >= 3; }));
  // Puts while it is down never wait: dropped and counted.
  Stopwatch put_time;
  for (int i = 100; i < 110; ++i) (void)tier->Put(TestBlockKey(i), TestBlock(layout, i));
  EXPECT_LT(put_time.Seconds(), kMarginSeconds);
  ASSERT_TRUE((*server)->Restart().ok());
  const uint64_t before = full_rounds.load();
  EXPECT_TRUE(wait_for([&] { return full_rounds.load() >= before + 2; }));
  stop = true;
  reader.join();
  ASSERT_TRUE(tier->Flush().ok());

  EXPECT_EQ(wrong.load(), 0u);
  EXPECT_LT(slowest_ms.load() / 1000.0, CallBound(o));
  RemoteTierStats s = tier->Stats();
  EXPECT_GT(s.misses_unavailable, 0u);
  EXPECT_GT(s.io_errors + s.connect_failures, 0u);
  EXPECT_GE(s.breaker_opens, 1u);
  EXPECT_EQ(s.bad_values, 0u);
  EXPECT_EQ(s.puts + s.drops_unavailable + s.drops_queue_full, 10u);
  EXPECT_EQ(s.nodes_down, 0u);
}

TEST(RemoteFault, PausedServerTimesOutAndOpensTheBreaker) {
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = FaultOptions((*server)->url(), layout, "sigstop");
  o.breaker_open_ms = 2000;  // long enough that the rejected calls below see it open
  o.breaker_max_open_ms = 2000;
  std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
  ASSERT_TRUE(tier->PutSync(TestBlockKey(1), TestBlock(layout, 1)->span()).ok());
  ASSERT_NE(tier->Get(TestBlockKey(1)), nullptr);

  ASSERT_TRUE((*server)->Pause().ok());
  // Two timed-out calls open the breaker (threshold 2) ...
  for (int i = 0; i < 2; ++i) {
    Stopwatch w;
    EXPECT_EQ(tier->Get(TestBlockKey(1)), nullptr);
    EXPECT_LT(w.Seconds(), CallBound(o));
  }
  RemoteTierStats s = tier->Stats();
  EXPECT_GE(s.timeouts, 2u);
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.nodes_down, 1u);
  // ... and then calls miss without waiting.
  std::vector<BlockKey> keys = {TestBlockKey(1)};
  EXPECT_EQ(tier->Exists(keys), std::vector<bool>{false});
  EXPECT_EQ(tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_THAT(tier->Put(TestBlockKey(2), TestBlock(layout, 2)), StatusIs(StatusCode::kUnavailable));
  s = tier->Stats();
  EXPECT_GE(s.breaker_rejections, 2u);
  EXPECT_EQ(s.drops_unavailable, 1u);

  ASSERT_TRUE((*server)->Resume().ok());
  // After the open time a probe finds the server again.
  Stopwatch w;
  SharedBlock got;
  while (got == nullptr && w.Seconds() < kEventSeconds) {
    got = tier->Get(TestBlockKey(1));
    if (got == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(CheckBlockFile(got->span(), layout, TestBlockKey(1)).ok());
  EXPECT_EQ(tier->Stats().nodes_down, 0u);
  EXPECT_EQ(tier->Stats().bad_values, 0u);
}

TEST(RemoteFault, CloseIsBoundedWhileTheServerIsPaused) {
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = FaultOptions((*server)->url(), layout, "close");
  o.breaker_failure_threshold = 1000;  // keep trying: every batch waits its timeout
  o.writer_threads = 1;
  o.close_timeout_ms = 300;
  std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
  ASSERT_TRUE((*server)->Pause().ok());
  for (int i = 0; i < 200; ++i) (void)tier->Put(TestBlockKey(i), TestBlock(layout, i));
  Stopwatch w;
  Status closed = tier->Close();
  // The close timeout, then the batch in flight: its round trips (EXISTS,
  // SET, and up to 5 retries are not taken on timeouts) plus the margin.
  EXPECT_LT(w.Seconds(), 0.3 + 2 * CallBound(o));
  EXPECT_THAT(closed, StatusIs(StatusCode::kUnavailable));
  RemoteTierStats s = tier->Stats();
  EXPECT_GT(s.drops_closed, 0u);
  EXPECT_EQ(s.puts, 200u);
  EXPECT_EQ(s.stored + s.drops_closed + s.drops_unavailable, 200u);
  ASSERT_TRUE((*server)->Resume().ok());
}

TEST(RemoteFault, CloseWithAHugeTimeoutDrainsTheQueue) {
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start({});
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const ModelLayout layout = TinyLayout();
  // UINT64_MAX ms used to reach the wait as -1000 µs, and 2^64 / 1000 + 1
  // ms wrapped to 384 µs: both timed out at once and Close() dropped
  // everything queued.
  for (uint64_t ms :
       {std::numeric_limits<uint64_t>::max(), std::numeric_limits<uint64_t>::max() / 1000 + 1}) {
    RemoteTierOptions o = FaultOptions((*server)->url(), layout, "close-huge");
    o.writer_threads = 1;  // one batch in flight, the rest queued behind it
    o.close_timeout_ms = ms;
    std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
    ASSERT_TRUE((*server)->Pause().ok());
    for (int i = 0; i < 200; ++i) (void)tier->Put(TestBlockKey(i), TestBlock(layout, i));
    // Every batch fails by timeout or at the open breaker; none is dropped
    // for the close.
    EXPECT_TRUE(tier->Close().ok()) << ms;
    RemoteTierStats s = tier->Stats();
    EXPECT_EQ(s.drops_closed, 0u) << ms;
    EXPECT_EQ(s.puts, 200u);
    EXPECT_EQ(s.stored + s.drops_unavailable, 200u);
    ASSERT_TRUE((*server)->Resume().ok());
  }
}

}  // namespace
}  // namespace kvtier::remote
