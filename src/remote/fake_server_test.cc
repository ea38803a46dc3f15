// The remote tier against a fake server that lies, breaks or stalls
// (testing/fake_redis_server.h): every call returns within its timeout
// plus a margin, hands out no wrong byte, and counts what happened.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <thread>

#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "testing/fake_redis_server.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::FakeRedisServer;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;
using Reply = FakeRedisServer::Reply;
using Then = Reply::Then;

// A hang check, not a speed check: generous on a loaded machine.
constexpr double kMarginSeconds = 5.0;

struct Fixture {
  std::unique_ptr<FakeRedisServer> server;
  std::unique_ptr<RemoteTier> tier;
  ModelLayout layout = TinyLayout();
};

RemoteTierOptions FakeOptions(const std::string& url, const ModelLayout& layout) {
  RemoteTierOptions o;
  o.url = url;
  o.layout = layout;
  o.key_prefix = "t:";
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 300;
  o.breaker_failure_threshold = 100;  // tests that want the breaker lower it
  o.writer_threads = 1;
  o.lookup_budget_ms = o.command_timeout_ms;  // lookup_budget_test.cc checks the budget
  return o;
}

Fixture Start(FakeRedisServer::Handler handler,
              std::function<void(RemoteTierOptions*)> tweak = nullptr) {
  Fixture f;
  f.server = std::move(FakeRedisServer::Start(std::move(handler))).value();
  RemoteTierOptions o = FakeOptions(f.server->url(), f.layout);
  if (tweak) tweak(&o);
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  if (t.ok()) f.tier = std::move(t).value();
  return f;
}

bool Is(const FakeRedisServer::Command& c, const char* name) { return !c.empty() && c[0] == name; }

// Every GET (or MGET) answered with `bytes`.
FakeRedisServer::Handler AnswerGets(std::string bytes, Then then = Then::kContinue) {
  return [bytes, then](const FakeRedisServer::Command& c) -> std::optional<Reply> {
    if (Is(c, "GET") || Is(c, "MGET")) return Reply{bytes, then};
    if (Is(c, "DEL")) return Reply{":1\r\n"};
    return std::nullopt;
  };
}

TEST(FakeServer, GarbageIsAMissAndAProtocolError) {
  Fixture f = Start(AnswerGets("this is not RESP\r\n"));
  Stopwatch w;
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_LT(w.Seconds(), 0.3 + kMarginSeconds);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.lookups, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.misses_unavailable, 1u);
  EXPECT_EQ(s.protocol_errors, 1u);
  EXPECT_EQ(s.hits, 0u);
}

TEST(FakeServer, WrongReplyTypes) {
  // GET answered with an integer, Exists()'s GETRANGE with an integer, SET
  // with an array.
  Fixture f = Start([](const FakeRedisServer::Command& c) -> std::optional<Reply> {
    if (Is(c, "GET") || Is(c, "MGET")) return Reply{":5\r\n"};
    if (Is(c, "GETRANGE")) return Reply{":1\r\n"};
    if (Is(c, "SET")) return Reply{"*1\r\n+OK\r\n"};
    return std::nullopt;
  });
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_EQ(f.tier->Exists(std::vector<BlockKey>{TestBlockKey(1)}), std::vector<bool>{false});
  SharedBlock b = TestBlock(f.layout, 1);
  EXPECT_THAT(f.tier->PutSync(TestBlockKey(1), b->span()), StatusIs(StatusCode::kUnavailable));
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.protocol_errors, 3u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.exists_found, 0u);
  EXPECT_EQ(s.drops_unavailable, 1u);
  EXPECT_EQ(s.stored, 0u);
}

TEST(FakeServer, FourGiBBulkIsRefusedBeforeReadingIt) {
  // The server announces 4 GiB and then sends nothing more: the tier must
  // neither allocate nor wait for it.
  Fixture f = Start(AnswerGets("$4294967296\r\nabc", Then::kStall));
  Stopwatch w;
  EXPECT_EQ(f.tier->Get(TestBlockKey(7)), nullptr);
  EXPECT_LT(w.Seconds(), 0.3 + kMarginSeconds);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.protocol_errors, 1u);
  EXPECT_EQ(s.bad_values, 1u);  // an oversized value under our name: deleted
  EXPECT_EQ(s.timeouts, 0u);    // refused at once, not timed out
  bool del_sent = false;
  for (const auto& c : f.server->Log()) del_sent |= Is(c, "DEL");
  EXPECT_TRUE(del_sent);
}

TEST(FakeServer, ClosedMidReplyIsAMiss) {
  Fixture f = Start(AnswerGets("$5000\r\n" + std::string(100, 'x'), Then::kClose));
  Stopwatch w;
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_LT(w.Seconds(), 0.3 + kMarginSeconds);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.io_errors, 1u);
  EXPECT_EQ(s.misses_unavailable, 1u);
  // The next call connects afresh and gets the same treatment, no hang.
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_EQ(f.tier->Stats().io_errors, 2u);
}

TEST(FakeServer, StallTimesOutThenTheBreakerOpens) {
  std::atomic<int> gets{0};
  Fixture f = Start(
      [&](const FakeRedisServer::Command& c) -> std::optional<Reply> {
        if (Is(c, "GET") || Is(c, "MGET")) {
          ++gets;
          return Reply{"", Then::kStall};
        }
        return std::nullopt;
      },
      [](RemoteTierOptions* o) {
        o->breaker_failure_threshold = 2;
        o->breaker_open_ms = 60'000;
        o->breaker_max_open_ms = 60'000;
      });
  for (int i = 0; i < 2; ++i) {
    Stopwatch w;
    EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
    EXPECT_LT(w.Seconds(), 0.3 + kMarginSeconds);
  }
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.timeouts, 2u);
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.nodes_down, 1u);
  // Open: the next calls miss at once without touching the server.
  const uint64_t connections = f.server->connections();
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_EQ(f.tier->Exists(std::vector<BlockKey>{TestBlockKey(1)}), std::vector<bool>{false});
  EXPECT_THAT(f.tier->Put(TestBlockKey(1), TestBlock(f.layout, 1)),
              StatusIs(StatusCode::kUnavailable));
  s = f.tier->Stats();
  EXPECT_EQ(s.breaker_rejections, 2u);
  EXPECT_EQ(s.drops_unavailable, 1u);
  EXPECT_EQ(gets.load(), 2);
  EXPECT_EQ(f.server->connections(), connections);
}

std::vector<BlockKey> TestKeys(uint64_t n) {
  std::vector<BlockKey> keys;
  for (uint64_t i = 0; i < n; ++i) keys.push_back(TestBlockKey(i));
  return keys;
}

size_t CountGets(FakeRedisServer& server) {
  size_t n = 0;
  for (const auto& c : server.Log()) n += Is(c, "GET") || Is(c, "MGET");
  return n;
}

// A Redis loading a large RDB answers -LOADING for minutes; a node in the
// middle of a resharding answers -TRYAGAIN. Each round trip answered so
// counts toward the breaker: three such round trips open it within the
// first call, and the calls after it do not touch the server.
class RetryAnswer : public ::testing::TestWithParam<const char*> {};

TEST_P(RetryAnswer, ForEverOpensTheBreakerWithinTheFirstCall) {
  Fixture f = Start(AnswerGets(GetParam()), [](RemoteTierOptions* o) {
    o->breaker_failure_threshold = 3;
    o->breaker_open_ms = 60'000;
    o->breaker_max_open_ms = 60'000;
  });
  const std::vector<BlockKey> keys = TestKeys(79);
  for (const SharedBlock& b : f.tier->GetMany(keys)) EXPECT_EQ(b, nullptr);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.retries, 3u * 79u);
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.breaker_rejections, 1u);  // the fourth round
  EXPECT_EQ(s.redirect_limit, 0u);
  EXPECT_EQ(s.misses_unavailable, 79u);
  EXPECT_EQ(CountGets(*f.server), 3u * 79u);

  for (const SharedBlock& b : f.tier->GetMany(keys)) EXPECT_EQ(b, nullptr);
  s = f.tier->Stats();
  EXPECT_EQ(s.breaker_rejections, 2u);
  EXPECT_EQ(s.retries, 3u * 79u);
  EXPECT_EQ(CountGets(*f.server), 3u * 79u);
}

INSTANTIATE_TEST_SUITE_P(
    FakeServer, RetryAnswer,
    ::testing::Values("-LOADING Redis is loading the dataset in memory\r\n",
                      "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"));

// -CLUSTERDOWN says the cluster lost a master (a failover under way), not
// that this node fails: each key is a miss at once (no backoff, no retry),
// and the node's breaker stays closed however long it lasts, so that the
// healthy masters keep serving their slots.
TEST(FakeServer, ClusterDownIsAMissThatLeavesTheBreakerClosed) {
  Fixture f = Start(AnswerGets("-CLUSTERDOWN The cluster is down\r\n"), [](RemoteTierOptions* o) {
    o->breaker_failure_threshold = 3;
    o->breaker_open_ms = 60'000;
    o->breaker_max_open_ms = 60'000;
  });
  const std::vector<BlockKey> keys = TestKeys(79);
  for (int call = 1; call <= 4; ++call) {
    for (const SharedBlock& b : f.tier->GetMany(keys)) EXPECT_EQ(b, nullptr);
    RemoteTierStats s = f.tier->Stats();
    EXPECT_EQ(s.misses_unavailable, 79u * call);
    EXPECT_EQ(CountGets(*f.server), 79u * call);  // every call reaches the node
  }
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ(s.breaker_opens, 0u);
  EXPECT_EQ(s.breaker_rejections, 0u);
  EXPECT_EQ(s.nodes_down, 0u);
  EXPECT_EQ(s.redirect_limit, 0u);
}

// A node that sends a key to itself (MOVED or ASK naming its own address)
// would be asked again and again: each key ends after its first answer,
// as a protocol error that counts toward the node's breaker.
TEST(FakeServer, RedirectToItselfEndsTheKeyAtOnce) {
  for (const char* kind : {"MOVED", "ASK"}) {
    SCOPED_TRACE(kind);
    auto port = std::make_shared<std::atomic<uint16_t>>(0);
    const std::string name = kind;
    Fixture f = Start([port, name](const FakeRedisServer::Command& c) -> std::optional<Reply> {
      if (Is(c, "GET") || Is(c, "MGET")) {
        return Reply{"-" + name + " 1234 127.0.0.1:" + std::to_string(port->load()) + "\r\n"};
      }
      return std::nullopt;
    });
    port->store(f.server->port());
    const std::vector<BlockKey> keys = TestKeys(10);
    for (const SharedBlock& b : f.tier->GetMany(keys)) EXPECT_EQ(b, nullptr);
    RemoteTierStats s = f.tier->Stats();
    EXPECT_EQ(s.protocol_errors, 10u);
    EXPECT_EQ(s.misses, 10u);
    EXPECT_EQ(s.moved + s.asked, 0u);
    EXPECT_EQ(s.redirect_limit, 0u);
    EXPECT_EQ(CountGets(*f.server), 10u);
  }
}

// Valid values sent one byte at a time: each reply alone is within the
// command timeout, but the call as a whole has one deadline (the command
// timeout, a connect included), so a batch does not take one timeout per
// key. A tiny value (5 KB) at one byte per >= 20 us (sleeps overshoot: about
// 0.4 s a value here) is within its own 1 s timeout, 40 of them are not: the
// call ends after 1 s with what it got, the rest misses and one timeout.
TEST(FakeServer, TricklingServerCostsOneCallDeadlineNotOnePerKey) {
  const ModelLayout layout = TinyLayout();
  const std::vector<BlockKey> keys = TestKeys(40);
  auto values = std::make_shared<std::map<std::string, std::string>>();
  for (uint64_t i = 0; i < keys.size(); ++i) {
    SharedBlock b = TestBlock(layout, i);
    (*values)["t:{" + keys[i].Hex() + "}"] =
        FakeRedisServer::Bulk(std::string_view(reinterpret_cast<const char*>(b->data()), b->size()));
  }
  ASSERT_GT(values->begin()->second.size(), 1000u);
  Fixture f = Start([values](const FakeRedisServer::Command& c) -> std::optional<Reply> {
    if (Is(c, "GET") && c.size() == 2) {
      auto it = values->find(c[1]);
      if (it != values->end()) return Reply{it->second, Then::kContinue, 20};
      return Reply{"$-1\r\n"};
    }
    return std::nullopt;
  }, [](RemoteTierOptions* o) {
    o->command_timeout_ms = 1000;
    o->min_reply_rate = 0;  // the call deadline alone (SlowRepliesOpenTheBreaker: the floor)
  });
  Stopwatch w;
  const std::vector<SharedBlock> got = f.tier->GetMany(keys);
  EXPECT_LT(w.Seconds(), 1.0 + kMarginSeconds);
  size_t hits = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == nullptr) continue;
    ++hits;
    EXPECT_TRUE(CheckBlockFile(got[i]->span(), layout, keys[i]).ok());
  }
  RemoteTierStats s = f.tier->Stats();
  EXPECT_LT(hits, keys.size());
  EXPECT_EQ(s.hits, hits);
  EXPECT_EQ(s.timeouts, 1u);
  EXPECT_EQ(s.misses_unavailable, keys.size() - hits);
  EXPECT_EQ(s.bad_values, 0u);
}

// A server (or proxy) without TCP_NODELAY that writes a reply in pieces:
// Nagle's algorithm sends the first piece and holds the rest until it is
// acknowledged, and Linux delays an ACK up to 40 ms (its minimum) once a
// connection goes request-reply. Each one-key EXISTS then took 40 ms and
// missed a 30 ms budget, though the server answered at once. The tier
// acknowledges before it waits for more (TCP_QUICKACK), so the rest comes
// at once and the calls are answered within their budget. The count, not
// the clock, is checked.
TEST(FakeServer, ANaglingServerIsNotHeldUpByDelayedAcks) {
  Fixture f = Start([](const FakeRedisServer::Command& c) -> std::optional<Reply> {
    if (Is(c, "GETRANGE")) {
      Reply r{FakeHeadReply()};
      r.byte_writes = true;
      return r;
    }
    return std::nullopt;
  }, [](RemoteTierOptions* o) {
    o->connect_timeout_ms = 30'000;
    o->command_timeout_ms = 30'000;
    o->lookup_budget_ms = 30;
    o->min_reply_rate = 0;  // the budget alone
  });
  constexpr int kCalls = 40;
  for (int call = 0; call < kCalls; ++call) {
    const std::vector<BlockKey> key = {TestBlockKey(static_cast<uint64_t>(call))};
    f.tier->Exists(key);
  }
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.exists_keys, uint64_t{kCalls});
  // Without the quick ACK every call is late (40 of 40). With it a call
  // takes well under a millisecond here, but on a loaded machine the fake
  // server's thread may now and then wake later than the budget: a few late
  // calls are the machine, not the tier.
  EXPECT_GE(s.exists_found, uint64_t{kCalls - kCalls / 4});
  EXPECT_EQ(s.exists_late, s.exists_keys - s.exists_found);
}

// Valid values trickled at about 10 KB/s (one byte per >= 100 us: a 5 KB
// value takes 0.5 s or more), each well within its 2 s deadline: without a
// floor on the reply rate every call succeeds, late, and keeps the breaker
// closed, so each single-key load costs half a second for ever. Under
// min_reply_rate each trickled reply fails as a timeout once the grace has
// passed, with its connection dropped (a half-read reply is never reused:
// each failed call connected afresh), and after breaker_failure_threshold
// of them the rest are immediate misses that never reach the server.
TEST(FakeServer, SlowRepliesOpenTheBreaker) {
  const ModelLayout layout = TinyLayout();
  constexpr uint64_t kLoads = 8;
  auto values = std::make_shared<std::map<std::string, std::string>>();
  for (uint64_t i = 0; i < kLoads; ++i) {
    SharedBlock b = TestBlock(layout, i);
    (*values)["t:{" + TestBlockKey(i).Hex() + "}"] =
        FakeRedisServer::Bulk(std::string_view(reinterpret_cast<const char*>(b->data()), b->size()));
  }
  ASSERT_GT(values->begin()->second.size(), 4000u);
  Fixture f = Start(
      [values](const FakeRedisServer::Command& c) -> std::optional<Reply> {
        if (Is(c, "GET") && c.size() == 2) {
          auto it = values->find(c[1]);
          if (it != values->end()) return Reply{it->second, Then::kContinue, 100};
          return Reply{"$-1\r\n"};
        }
        return std::nullopt;
      },
      [](RemoteTierOptions* o) {
        o->command_timeout_ms = 2000;
        o->breaker_failure_threshold = 3;
        o->breaker_open_ms = 60'000;
        o->breaker_max_open_ms = 60'000;
        ASSERT_EQ(o->min_reply_rate, uint64_t{1} << 20);  // the default
      });
  const uint64_t connections_at_open = f.server->connections();
  for (uint64_t i = 0; i < kLoads; ++i) EXPECT_EQ(f.tier->Get(TestBlockKey(i)), nullptr) << i;
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.lookups, kLoads);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses_unavailable, kLoads);
  EXPECT_EQ(s.timeouts, 3u);
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.breaker_rejections, kLoads - 3);
  EXPECT_EQ(s.bad_values, 0u);
  EXPECT_EQ(s.nodes_down, 1u);
  EXPECT_EQ(CountGets(*f.server), 3u);
  // The connection Open() made served the first load; the second and the
  // third each needed a new one, the others none.
  EXPECT_EQ(connections_at_open, 1u);
  EXPECT_EQ(f.server->connections(), 3u);
}

// Values that fail verification count toward the breaker of the node that
// served them (after they are deleted): a node serving garbage is given up
// like a node that is down.
TEST(FakeServer, RepeatedBadValuesOpenTheBreaker) {
  const ModelLayout layout = TinyLayout();
  SharedBlock other = TestBlock(layout, 999);  // valid, but another key's block
  const std::string value =
      FakeRedisServer::Bulk(std::string_view(reinterpret_cast<const char*>(other->data()), other->size()));
  Fixture f = Start(AnswerGets(value), [](RemoteTierOptions* o) {
    o->breaker_failure_threshold = 3;
    o->breaker_open_ms = 60'000;
    o->breaker_max_open_ms = 60'000;
  });
  for (const SharedBlock& b : f.tier->GetMany(TestKeys(5))) EXPECT_EQ(b, nullptr);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.bad_values, 5u);
  EXPECT_EQ(s.bad_values_deleted, 5u);  // deleted before the breaker opened
  EXPECT_EQ(s.breaker_opens, 1u);
  const size_t gets = CountGets(*f.server);
  EXPECT_EQ(gets, 1u * 5u);
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  EXPECT_EQ(f.tier->Stats().breaker_rejections, 1u);
  EXPECT_EQ(CountGets(*f.server), gets);
}

TEST(FakeServer, OomOnSetIsACountedDrop) {
  Fixture f = Start([](const FakeRedisServer::Command& c) -> std::optional<Reply> {
    if (Is(c, "SET")) return Reply{"-OOM command not allowed when used memory > 'maxmemory'.\r\n"};
    if (Is(c, "GETRANGE")) return Reply{"$0\r\n\r\n"};
    return std::nullopt;
  });
  SharedBlock b = TestBlock(f.layout, 3);
  EXPECT_THAT(f.tier->PutSync(TestBlockKey(3), b->span()),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("allkeys-lru")));
  ASSERT_TRUE(f.tier->Put(TestBlockKey(3), b).ok());
  ASSERT_TRUE(f.tier->Flush().ok());
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.drops_oom, 2u);
  EXPECT_EQ(s.stored, 0u);
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.protocol_errors, 0u);
}

TEST(FakeServer, AnotherKeysBlockIsABadValueAndDeleted) {
  ModelLayout layout = TinyLayout();
  SharedBlock other = TestBlock(layout, 2);
  const std::string bytes(reinterpret_cast<const char*>(other->data()), other->size());
  Fixture f = Start(AnswerGets(FakeRedisServer::Bulk(bytes)));
  EXPECT_EQ(f.tier->Get(TestBlockKey(1)), nullptr);
  RemoteTierStats s = f.tier->Stats();
  EXPECT_EQ(s.bad_values, 1u);
  EXPECT_EQ(s.bad_values_deleted, 1u);
  EXPECT_EQ(s.protocol_errors, 0u);
  // The same bytes under their own key are a hit.
  SharedBlock got = f.tier->Get(TestBlockKey(2));
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(CheckBlockFile(got->span(), layout, TestBlockKey(2)).ok());
  // And into a caller's buffer; too small a buffer is InvalidArgument.
  std::vector<std::byte> buf(other->size() + 100);
  Result<std::optional<size_t>> n = f.tier->GetInto(TestBlockKey(2), buf);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(n->has_value());
  EXPECT_EQ(**n, other->size());
  std::vector<std::byte> small(other->size() - 1);
  EXPECT_THAT(f.tier->GetInto(TestBlockKey(2), small), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(f.tier->Stats().too_small, 1u);
}

TEST(FakeServer, AuthRefusedIsAClearErrorAtOpen) {
  auto server = std::move(FakeRedisServer::Start([](const FakeRedisServer::Command& c)
                                                     -> std::optional<Reply> {
                  if (Is(c, "AUTH")) {
                    return Reply{
                        "-WRONGPASS invalid username-password pair or user is "
                        "disabled.\r\n"};
                  }
                  return std::nullopt;
                })).value();
  RemoteTierOptions o = FakeOptions("redis://bob:nope@" + server->address(), TinyLayout());
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  EXPECT_THAT(t, StatusIs(StatusCode::kInvalidArgument, HasSubstr("refused AUTH for user 'bob'")));
  EXPECT_THAT(t.status().message(), ::testing::Not(HasSubstr("nope")));
}

TEST(FakeServer, NoAuthIsAClearErrorAtOpen) {
  auto server = std::move(FakeRedisServer::Start([](const FakeRedisServer::Command& c)
                                                     -> std::optional<Reply> {
                  if (Is(c, "PING")) return Reply{"-NOAUTH Authentication required.\r\n"};
                  return std::nullopt;
                })).value();
  Result<std::unique_ptr<RemoteTier>> t =
      RemoteTier::Open(FakeOptions(server->url(), TinyLayout()), Env::Default());
  EXPECT_THAT(t, StatusIs(StatusCode::kInvalidArgument, HasSubstr("requires a password")));
}

TEST(FakeServer, UnreachableAtOpen) {
  // A port nobody listens on: take one from a fake server and stop it.
  std::string url;
  {
    auto server =
        std::move(FakeRedisServer::Start([](const auto&) { return std::nullopt; })).value();
    url = server->url();
  }
  RemoteTierOptions o = FakeOptions(url, TinyLayout());
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(t.ok()) << t.status().ToString();  // an engine starts while Redis is down
  Stopwatch w;
  EXPECT_EQ((*t)->Get(TestBlockKey(1)), nullptr);
  EXPECT_LT(w.Seconds(), kMarginSeconds);
  RemoteTierStats s = (*t)->Stats();
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.breaker_rejections, 1u);
  EXPECT_EQ(s.nodes_down, 1u);
  o.require_server_at_open = true;
  EXPECT_THAT(RemoteTier::Open(o, Env::Default()), StatusIs(StatusCode::kUnavailable));
}

TEST(FakeServer, PipelineWindowBoundsLargeRepliesNotSmallOnes) {
  // A server that never answers: what arrives before the client gives up
  // is what the client pipelined.
  auto server = std::move(FakeRedisServer::Start([](const FakeRedisServer::Command& c)
                                                     -> std::optional<Reply> {
                  if (Is(c, "PING")) return std::nullopt;
                  return Reply{""};  // no answer
                })).value();
  const ModelLayout qwen = ModelLayout::Preset("qwen2.5-0.5b").value();  // 3 MiB values
  RemoteTierOptions o = FakeOptions(server->url(), qwen);
  o.pipeline_max_bytes = 8 << 20;
  std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
  std::vector<BlockKey> keys;
  for (int i = 0; i < 50; ++i) keys.push_back(TestBlockKey(i));
  auto count = [&](const char* name) {
    size_t n = 0;
    for (const auto& c : server->Log()) n += Is(c, name);
    return n;
  };
  auto wait_closed = [&](uint64_t n) {
    Stopwatch w;
    while (server->closed_connections() < n && w.Seconds() < kMarginSeconds) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return server->closed_connections() >= n;
  };
  EXPECT_EQ(tier->Exists(keys), std::vector<bool>(50, false));
  ASSERT_TRUE(wait_closed(1));
  EXPECT_EQ(count("GETRANGE"), 50u);  // Exists()'s small replies: all in one round trip
  std::vector<SharedBlock> got = tier->GetMany(keys);
  EXPECT_EQ(std::count(got.begin(), got.end(), nullptr), 50);
  ASSERT_TRUE(wait_closed(2));
  EXPECT_EQ(count("MGET") + count("GET"), 2u);  // 3 MiB each: two in flight
  EXPECT_EQ(tier->Stats().timeouts, 2u);
}

// --- Cluster redirects ----------------------------------------------------------

// A fake cluster node claiming every slot for `owner`.
std::string ShardsReply(uint16_t owner_port) {
  return "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n*6\r\n"
         "$4\r\nport\r\n:" +
         std::to_string(owner_port) +
         "\r\n$2\r\nip\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n";
}

// Two fake nodes, A and B, that each claim every slot for A and then
// answer GETs of one key according to `mode`.
struct FakeCluster {
  enum Mode { kMovedToB, kAsk, kTryAgainOnce, kMovedLoop };

  FakeCluster() {
    b = std::move(FakeRedisServer::Start([this](const auto& c) { return Handle(c, 1); })).value();
    a = std::move(FakeRedisServer::Start([this](const auto& c) { return Handle(c, 0); })).value();
    ports[0] = a->port();
    ports[1] = b->port();
  }

  std::optional<Reply> Handle(const FakeRedisServer::Command& c, int self) {
    if (Is(c, "CLUSTER")) return Reply{ShardsReply(ports[0])};
    if (Is(c, "ASKING")) {
      asking[self] = true;
      return std::nullopt;
    }
    if (!Is(c, "GET")) return std::nullopt;
    const bool was_asking = asking[self].exchange(false);
    const std::string other =
        std::to_string(slot) + " 127.0.0.1:" + std::to_string(ports[1 - self].load()) + "\r\n";
    switch (mode.load()) {
      case kMovedToB:
        if (self == 0) return Reply{"-MOVED " + other};
        break;
      case kAsk:
        if (!was_asking) return Reply{"-ASK " + other};
        break;
      case kTryAgainOnce:
        if (tryagain_sent++ == 0) return Reply{"-TRYAGAIN Multiple keys request\r\n"};
        break;
      case kMovedLoop:
        return Reply{"-MOVED " + other};
    }
    return Reply{value};
  }

  ModelLayout layout = TinyLayout();
  SharedBlock block = TestBlock(layout, 9);
  std::string value = FakeRedisServer::Bulk(
      std::string(reinterpret_cast<const char*>(block->data()), block->size()));
  const uint16_t slot = ValueLayout::SlotOf(TestBlockKey(9));
  std::atomic<int> mode{kMovedToB};
  std::atomic<int> tryagain_sent{0};
  std::atomic<bool> asking[2] = {false, false};
  std::atomic<uint16_t> ports[2] = {0, 0};
  std::unique_ptr<FakeRedisServer> a, b;
};

TEST(FakeCluster, MovedAskTryAgainAndTheRedirectLimit) {
  FakeCluster fc;
  RemoteTierOptions o = FakeOptions("redis-cluster://" + fc.a->address(), fc.layout);
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RemoteTier& tier = **t;
  EXPECT_EQ(tier.Stats().topology_refreshes, 1u);

  SharedBlock got = tier.Get(TestBlockKey(9));  // A: MOVED to B; B serves it
  ASSERT_NE(got, nullptr);
  EXPECT_TRUE(CheckBlockFile(got->span(), fc.layout, TestBlockKey(9)).ok());
  EXPECT_EQ(tier.Stats().moved, 1u);

  fc.mode = FakeCluster::kAsk;  // whichever node is asked sends it to the other
  got = tier.Get(TestBlockKey(9));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(tier.Stats().asked, 1u);

  fc.mode = FakeCluster::kTryAgainOnce;
  got = tier.Get(TestBlockKey(9));
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(tier.Stats().retries, 1u);

  fc.mode = FakeCluster::kMovedLoop;  // A and B send the key to each other forever
  Stopwatch w;
  EXPECT_EQ(tier.Get(TestBlockKey(9)), nullptr);
  EXPECT_LT(w.Seconds(), kMarginSeconds);
  RemoteTierStats s = tier.Stats();
  // The key goes to the other node, which sends it back: a protocol error
  // of the second node's, and the key ends there.
  EXPECT_EQ(s.redirect_limit, 0u);
  EXPECT_EQ(s.moved, 1u + 2u);  // the first test's, then the loop's two
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.protocol_errors, 1u);
}

// Two nodes that MOVED a slot to each other for ever: each call ends at
// the second redirect, held against the node that sent the key back (B:
// calls start at A, which owns the slot in every slot map), so that after
// `breaker_failure_threshold` such calls in a row exactly one breaker is
// open and the calls after it are refused at once. (The router's own
// CLUSTER SHARDS to B, answered, may reset B's count once in a while: the
// calls go on until it opens, bounded.) Before, every call went round six
// times and no breaker ever opened.
TEST(FakeCluster, MutualMovedOpensOneBreaker) {
  FakeCluster fc;
  fc.mode = FakeCluster::kMovedLoop;
  RemoteTierOptions o = FakeOptions("redis-cluster://" + fc.a->address(), fc.layout);
  o.breaker_failure_threshold = 3;
  o.breaker_open_ms = 60'000;
  o.breaker_max_open_ms = 60'000;
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  RemoteTier& tier = **t;
  int calls = 0;
  for (; calls < 100 && tier.Stats().breaker_opens == 0; ++calls) {
    EXPECT_EQ(tier.Get(TestBlockKey(9)), nullptr);
  }
  RemoteTierStats s = tier.Stats();
  ASSERT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.nodes_down, 1u);
  EXPECT_GE(s.protocol_errors, 3u);
  EXPECT_EQ(s.protocol_errors, static_cast<uint64_t>(calls));  // one per call
  // Open: B is not asked again; A goes on answering (its breaker closed).
  for (int i = 0; i < 5; ++i) EXPECT_EQ(tier.Get(TestBlockKey(9)), nullptr);
  s = tier.Stats();
  EXPECT_EQ(s.breaker_opens, 1u);
  EXPECT_EQ(s.nodes_down, 1u);
  EXPECT_EQ(s.protocol_errors, static_cast<uint64_t>(calls));
  EXPECT_EQ(s.redirect_limit, 0u);
  EXPECT_EQ(s.misses, static_cast<uint64_t>(calls) + 5u);
  EXPECT_GE(s.breaker_rejections, 5u);
}

}  // namespace
}  // namespace kvtier::remote
