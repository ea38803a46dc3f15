// The remote tier's events (DESIGN.md §7) reach RemoteTierOptions::info_log:
// a node down (its breaker opened: at Open() or after failed calls), still
// down (a failed probe, debug), back up, and a full write queue dropping
// copies; each one line however often it happens (rate-limited).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "testing/fake_redis_server.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::FakeRedisServer;
using ::kvtier::testing::RecordingLogger;
using ::testing::HasSubstr;
using ::testing::SizeIs;
using Reply = FakeRedisServer::Reply;
using Then = Reply::Then;

bool Is(const FakeRedisServer::Command& c, const char* name) { return !c.empty() && c[0] == name; }

RemoteTierOptions EventOptions(const std::string& url, RecordingLogger* logger) {
  RemoteTierOptions o;
  o.url = url;
  o.layout = TinyLayout();
  o.key_prefix = "t:";
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 300;
  o.breaker_failure_threshold = 2;
  o.breaker_open_ms = 200;
  o.breaker_max_open_ms = 400;
  o.writer_threads = 1;
  o.info_log = logger;
  return o;
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(RemoteEvents, DownStillDownAndBackUpAreOneLineEach) {
  std::atomic<bool> down{false};
  auto server = FakeRedisServer::Start([&](const FakeRedisServer::Command& c)
                                           -> std::optional<Reply> {
    if (down.load()) return Reply{"", Then::kClose};
    if (Is(c, "GET") || Is(c, "MGET")) return Reply{"$-1\r\n"};
    return std::nullopt;
  });
  ASSERT_TRUE(server.ok());
  RecordingLogger logger;
  auto tier = RemoteTier::Open(EventOptions((*server)->url(), &logger), Env::Default());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  EXPECT_EQ((*tier)->Get(TestBlockKey(1)), nullptr);  // up: a plain miss
  EXPECT_THAT(logger.Lines(), SizeIs(0));

  down = true;
  for (int i = 0; i < 6; ++i) EXPECT_EQ((*tier)->Get(TestBlockKey(1)), nullptr);
  auto lines = logger.Matching("is down");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
  EXPECT_THAT(lines[0].message, HasSubstr((*server)->address()));
  EXPECT_THAT(lines[0].message, HasSubstr("breaker is open"));

  SleepMs(250);  // the breaker's open time: the next call is a probe, and fails
  EXPECT_EQ((*tier)->Get(TestBlockKey(1)), nullptr);
  lines = logger.Matching("still down");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kDebug);

  down = false;
  SleepMs(450);  // past the doubled open time
  EXPECT_EQ((*tier)->Get(TestBlockKey(1)), nullptr);
  lines = logger.Matching("back up");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kInfo);
  EXPECT_THAT(lines[0].message, HasSubstr((*server)->address()));
  EXPECT_THAT(logger.Lines(), SizeIs(3));
  EXPECT_GE((*tier)->Stats().breaker_opens, 2u);
}

// The address of a server that was started and stopped: connects to it
// are refused. "" if none could be started.
std::string RefusingAddress() {
  auto gone = FakeRedisServer::Start([](const FakeRedisServer::Command&) {
    return std::optional<Reply>();
  });
  return gone.ok() ? (*gone)->address() : "";
}

TEST(RemoteEvents, NoServerAtOpenIsADownLine) {
  const std::string address = RefusingAddress();
  ASSERT_NE(address, "");
  const std::string url = "redis://" + address;
  RecordingLogger logger;
  auto tier = RemoteTier::Open(EventOptions(url, &logger), Env::Default());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  auto lines = logger.Matching("is down");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_THAT(lines[0].message, HasSubstr(address));
}

TEST(RemoteEvents, AFullWriteQueueDropsCopiesAndSaysSoOnce) {
  std::atomic<bool> stall{true};
  std::atomic<int> writes_seen{0};
  auto server = FakeRedisServer::Start([&](const FakeRedisServer::Command& c)
                                           -> std::optional<Reply> {
    if (Is(c, "GETRANGE") || Is(c, "EXISTS") || Is(c, "SET") || Is(c, "MULTI")) {
      ++writes_seen;
      if (stall.load()) return Reply{"", Then::kStall};
    }
    return std::nullopt;
  });
  ASSERT_TRUE(server.ok());
  RecordingLogger logger;
  const SharedBlock first = TestBlock(TinyLayout(), 0);
  RemoteTierOptions o = EventOptions((*server)->url(), &logger);
  o.breaker_failure_threshold = 100;  // the stall must not open it
  o.queue_max_bytes = first->size();  // one block
  o.close_timeout_ms = 100;
  auto tier = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  ASSERT_TRUE((*tier)->Put(TestBlockKey(0), first).ok());
  // The writer has taken block 0 and waits on the stalled server.
  for (int i = 0; i < 5000 && writes_seen.load() == 0; ++i) SleepMs(1);
  ASSERT_GT(writes_seen.load(), 0);
  int dropped = 0;
  for (uint64_t i = 1; i < 6; ++i) {
    if ((*tier)->Put(TestBlockKey(i), TestBlock(TinyLayout(), i)).IsResourceExhausted()) ++dropped;
  }
  EXPECT_GE(dropped, 3);
  EXPECT_EQ((*tier)->Stats().drops_queue_full, static_cast<uint64_t>(dropped));
  auto lines = logger.Matching("write queue");
  ASSERT_THAT(lines, SizeIs(1));
  EXPECT_EQ(lines[0].level, LogLevel::kWarning);
  EXPECT_THAT(lines[0].message, HasSubstr("copies to Redis are dropped"));
  stall = false;
}

TEST(RemoteEvents, OomAndBadValuesAreOneLineEach) {
  auto server = FakeRedisServer::Start([](const FakeRedisServer::Command& c)
                                           -> std::optional<Reply> {
    if (Is(c, "SET") || Is(c, "MULTI") || Is(c, "EXEC")) {
      return Reply{"-OOM command not allowed when used memory > 'maxmemory'.\r\n"};
    }
    if (Is(c, "GET") || Is(c, "MGET")) return Reply{"$4\r\nabcd\r\n"};
    if (Is(c, "DEL")) return Reply{":1\r\n"};
    return std::nullopt;
  });
  ASSERT_TRUE(server.ok());
  RecordingLogger logger;
  RemoteTierOptions o = EventOptions((*server)->url(), &logger);
  o.breaker_failure_threshold = 100;
  auto tier = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_TRUE((*tier)->PutSync(TestBlockKey(i), TestBlock(TinyLayout(), i)->span())
                    .IsResourceExhausted());
    EXPECT_EQ((*tier)->Get(TestBlockKey(i)), nullptr);
  }
  const RemoteTierStats s = (*tier)->Stats();
  EXPECT_EQ(s.drops_oom, 3u);
  EXPECT_EQ(s.bad_values, 3u);
  auto oom = logger.Matching("-OOM");
  ASSERT_THAT(oom, SizeIs(1));
  EXPECT_EQ(oom[0].level, LogLevel::kWarning);
  auto bad = logger.Matching("failed verification");
  ASSERT_THAT(bad, SizeIs(1));
  EXPECT_EQ(bad[0].level, LogLevel::kWarning);
}


// The one "is down" line a tier that cannot reach `url` at Open() logs.
std::string DownLineAtOpen(const std::string& url) {
  RecordingLogger logger;
  auto tier = RemoteTier::Open(EventOptions(url, &logger), Env::Default());
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  auto lines = logger.Matching("is down");
  EXPECT_THAT(lines, SizeIs(1));
  return lines.empty() ? "" : lines[0].message;
}

// The "down" line says why: refused, a name that does not resolve, a
// server that never answers, a TLS handshake with a plaintext port. Before,
// it said only "down or failing".
TEST(RemoteEvents, TheDownLineNamesItsCause) {
  const std::string address = RefusingAddress();
  ASSERT_NE(address, "");
  EXPECT_THAT(DownLineAtOpen("redis://" + address),
              HasSubstr("redis " + address + " is down or failing (connection refused: "));

  EXPECT_THAT(DownLineAtOpen("redis://kvtier-no-such-host.invalid:6379"),
              HasSubstr("redis kvtier-no-such-host.invalid:6379 is down or failing (name "
                        "resolution failed: "));

  auto silent = FakeRedisServer::Start([](const FakeRedisServer::Command&) {
    return std::optional<Reply>(Reply{"", Then::kStall});  // PING never answered
  });
  ASSERT_TRUE(silent.ok());
  EXPECT_THAT(DownLineAtOpen((*silent)->url()),
              HasSubstr("redis " + (*silent)->address() + " is down or failing (timed out: "));

  auto plain = FakeRedisServer::Start([](const FakeRedisServer::Command&) {
    return std::optional<Reply>(Reply{"-ERR not TLS\r\n", Then::kClose});
  });
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(DownLineAtOpen("rediss://" + (*plain)->address()),
              HasSubstr("redis " + (*plain)->address() +
                        " is down or failing (TLS handshake failed: "));
}

// A tier over the test Redis with a multi-part layout (4 KiB parts) whose
// breaker opens at the first failure, and a block stored through it.
class EvictedPartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(url_.ok()) << url_.status().ToString();
    o_.part_bytes = 4096;
    o_.info_log = &logger_;
    o_.breaker_failure_threshold = 1;
    o_.breaker_open_ms = 60'000;
    o_.breaker_max_open_ms = 60'000;
    tier_ = OpenTier(o_);
    ASSERT_NE(tier_, nullptr);
    ASSERT_GT(block_->size(), 2u * 4096u);
    ASSERT_TRUE(tier_->PutSync(key_, block_->span()).ok());
  }
  // Deletes part `i` of the block, as an LRU eviction does.
  void Evict(uint32_t i) { ASSERT_EQ(raw_.Run({"DEL", names_.PartName(key_, i)}), "int:1"); }
  // What one read of the block found: a miss counted as a bad value, its
  // other parts deleted, one "missing parts" line and nothing against the
  // node.
  void ExpectLoggedAsMissingParts() {
    RemoteTierStats s = tier_->Stats();
    EXPECT_EQ(s.misses, 1u);
    EXPECT_EQ(s.bad_values, 1u);
    EXPECT_EQ(s.bad_values_deleted, 1u);
    EXPECT_EQ(s.breaker_opens, 0u);
    EXPECT_EQ(s.nodes_down, 0u);
    EXPECT_EQ(raw_.Run({"EXISTS", names_.PartName(key_, 0)}), "int:0");
    auto lines = logger_.Matching("missing parts");
    ASSERT_THAT(lines, SizeIs(1));
    EXPECT_EQ(lines[0].level, LogLevel::kWarning);
    EXPECT_THAT(lines[0].message, HasSubstr("evicted by the server's maxmemory-policy"));
    EXPECT_THAT(logger_.Matching("failed verification"), SizeIs(0));
    EXPECT_THAT(logger_.Matching("is down"), SizeIs(0));
  }
  // LoadTensorBuffers of the block's last tensor: whether it was served.
  bool LoadLastTensor() {
    TensorMask last(layout_.TensorCount(), false);
    last.back() = true;
    const TensorMask masks[1] = {last};
    int calls = 0;
    bool served = false;
    tier_->LoadTensorBuffers(std::span(&key_, 1), masks, {},
                             [&](size_t, Result<std::optional<BlockBuffer>> r) {
                               ++calls;
                               EXPECT_TRUE(r.ok()) << r.status().ToString();
                               served = r.ok() && r->has_value();
                             });
    EXPECT_EQ(calls, 1);
    return served;
  }

  const Result<std::string> url_ = testing::TestRedisUrl();
  const ModelLayout layout_ = MultiPartLayout();
  RecordingLogger logger_;
  RemoteTierOptions o_ = TestOptions(url_.ok() ? *url_ : "", layout_,
                                     ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::unique_ptr<RemoteTier> tier_;
  const BlockKey key_ = TestBlockKey(3);
  const SharedBlock block_ = TestBlock(layout_, 3);
  RawRedis raw_{url_.ok() ? *url_ : ""};
  const ValueLayout names_{o_.key_prefix, 4096, layout_.BlockBytes()};
};

// A multi-part value with a part gone (what maxmemory-policy allkeys-lru
// does to a value it half evicts) is logged as missing parts, not as
// damaged or poisoned, and is not held against the node: its breaker stays
// closed though one bad value would open it. The other parts are deleted.
TEST_F(EvictedPartTest, AWholeReadLogsMissingPartsNotDamage) {
  Evict(1);
  EXPECT_EQ(tier_->Get(key_), nullptr);
  ExpectLoggedAsMissingParts();
  // Stored again, it is served.
  ASSERT_TRUE(tier_->PutSync(key_, block_->span()).ok());
  SharedBlock got = tier_->Get(key_);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->size(), block_->size());
}

// The same for a partial read (LoadTensorBuffers: GETRANGE of the header
// and of the selected tensors): a part gone since the write answers "" and
// is a missing part. On 1229907 every short GETRANGE was a bad value:
// "failed verification (damaged, ..., or poisoned ...)" and a failure on
// the node's breaker (with a threshold of 1, it opened: breaker_opens 1,
// nodes_down 1, no "missing parts" line).
TEST_F(EvictedPartTest, APartialReadLogsMissingPartsNotDamage) {
  // The last tensor ends the file: its last part is the one evicted.
  const uint32_t parts = names_.PartsFor(block_->size());
  ASSERT_GE(parts, 3u);
  Evict(parts - 1);
  EXPECT_FALSE(LoadLastTensor());
  ExpectLoggedAsMissingParts();
  // Stored again, the same partial read is served.
  ASSERT_TRUE(tier_->PutSync(key_, block_->span()).ok());
  EXPECT_TRUE(LoadLastTensor());
  EXPECT_EQ(tier_->Stats().hits, 1u);
}

}  // namespace
}  // namespace kvtier::remote
