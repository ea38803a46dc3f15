#include "remote/resp_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "remote/memory_source_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

constexpr ReplyLimits kLimits{1024, 16};

TEST(RespInteger, Strict) {
  EXPECT_EQ(ParseRespInteger("0"), 0);
  EXPECT_EQ(ParseRespInteger("42"), 42);
  EXPECT_EQ(ParseRespInteger("-1"), -1);
  EXPECT_EQ(ParseRespInteger("9223372036854775807"), INT64_MAX);
  for (const char* bad : {"", "-", "+1", "01", "-0", "1 ", " 1", "1x", "0x10",
                          "9223372036854775808", "99999999999999999999", "1.5"}) {
    EXPECT_FALSE(ParseRespInteger(bad).has_value()) << bad;
  }
}

TEST(RespReader, Heads) {
  MemorySource src("+OK\r\n-ERR bad\r\n:17\r\n$3\r\nabc\r\n*2\r\n$-1\r\n*-1\r\n");
  Result<ReplyHead> h = ReadReplyHead(src, kLimits);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->type, ReplyType::kStatus);
  EXPECT_EQ(h->text, "OK");
  h = ReadReplyHead(src, kLimits);
  EXPECT_EQ(h->type, ReplyType::kError);
  EXPECT_EQ(h->text, "ERR bad");
  h = ReadReplyHead(src, kLimits);
  EXPECT_EQ(h->type, ReplyType::kInteger);
  EXPECT_EQ(h->number, 17);
  h = ReadReplyHead(src, kLimits);
  EXPECT_EQ(h->type, ReplyType::kBulk);
  EXPECT_EQ(h->number, 3);
  std::string body(3, '\0');
  ASSERT_TRUE(src.ReadExact(std::as_writable_bytes(std::span(body))).ok());
  EXPECT_EQ(body, "abc");
  ASSERT_TRUE(ReadBulkEnd(src).ok());
  h = ReadReplyHead(src, kLimits);
  EXPECT_EQ(h->type, ReplyType::kArray);
  EXPECT_EQ(h->number, 2);
  EXPECT_EQ(ReadReplyHead(src, kLimits)->type, ReplyType::kNull);
  EXPECT_EQ(ReadReplyHead(src, kLimits)->type, ReplyType::kNull);
  EXPECT_EQ(src.remaining(), 0u);
}

TEST(RespReader, HostileHeadsAreProtocolErrors) {
  const char* hostile[] = {
      "$4294967296\r\n",            // a 4 GiB bulk: refused before any allocation
      "$1025\r\n",                  // just over the bound
      "*17\r\n",                    // too many items
      "*999999999999\r\n",          // absurd array
      "$-2\r\n",                    // negative length
      "$abc\r\n",                   // not a number
      "$\r\n",                      // empty length
      ":12x\r\n",                   // bad integer
      ":99999999999999999999\r\n",  // integer overflow
      "\r\n",                       // empty line
      "?what\r\n",                  // unknown type byte
      "_\r\n",                      // RESP3 null: we speak RESP2
      "%1\r\n",                     // RESP3 map
      ",1.5\r\n",                   // RESP3 double
      "+OK\n",                      // LF without CR
      "+O\rK\r\n",                  // bare CR
  };
  for (const char* bytes : hostile) {
    MemorySource src(bytes);
    EXPECT_THAT(ReadReplyHead(src, kLimits), StatusIs(StatusCode::kCorruption)) << bytes;
  }
}

TEST(RespReader, OversizedBulkMessageNamesTheSizes) {
  MemorySource src("$4294967296\r\n");
  EXPECT_THAT(ReadReplyHead(src, kLimits),
              StatusIs(StatusCode::kCorruption, HasSubstr("4294967296")));
}

TEST(RespReader, TruncatedIsAnIoErrorNotACrash) {
  MemorySource src("$10\r\nabc");
  Result<ReplyHead> h = ReadReplyHead(src, kLimits);
  ASSERT_TRUE(h.ok());
  std::string body(10, '\0');
  EXPECT_THAT(src.ReadExact(std::as_writable_bytes(std::span(body))),
              StatusIs(StatusCode::kIOError));
  MemorySource partial_line("+OK");
  EXPECT_THAT(ReadReplyHead(partial_line, kLimits), StatusIs(StatusCode::kIOError));
}

TEST(RespReader, BulkWithoutCrlfIsCorruption) {
  MemorySource src("$3\r\nabcXY");
  ASSERT_TRUE(ReadReplyHead(src, kLimits).ok());
  ASSERT_TRUE(src.Skip(3).ok());
  EXPECT_THAT(ReadBulkEnd(src), StatusIs(StatusCode::kCorruption));
}

TEST(RespReader, SkipReplyBodyConsumesNestedArrays) {
  MemorySource src("*3\r\n:1\r\n*2\r\n$2\r\nab\r\n$-1\r\n+x\r\n:9\r\n");
  Result<ReplyHead> h = ReadReplyHead(src, kLimits);
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(SkipReplyBody(src, *h, kLimits).ok());
  EXPECT_EQ(ReadReplyHead(src, kLimits)->number, 9);
}

TEST(RespReader, SkipRefusesDeepNesting) {
  std::string deep;
  for (int i = 0; i < 10; ++i) deep += "*1\r\n";
  deep += ":1\r\n";
  MemorySource src(deep);
  Result<ReplyHead> h = ReadReplyHead(src, kLimits);
  ASSERT_TRUE(h.ok());
  EXPECT_THAT(SkipReplyBody(src, *h, kLimits, 4), StatusIs(StatusCode::kCorruption));
}

TEST(RespValue, ReadsAWholeReply) {
  MemorySource src("*2\r\n*3\r\n:0\r\n:5460\r\n$9\r\n127.0.0.1\r\n+hi\r\n");
  Result<RespValue> v = ReadValue(src, ValueLimits{});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_EQ(v->items.size(), 2u);
  EXPECT_EQ(v->items[0].items[1].integer, 5460);
  EXPECT_EQ(v->items[0].items[2].str, "127.0.0.1");
  EXPECT_EQ(v->items[1].str, "hi");
}

TEST(RespValue, Bounds) {
  ValueLimits small;
  small.max_bulk_bytes = 8;
  small.max_items_total = 4;
  small.max_bytes_total = 12;
  small.max_depth = 2;
  for (const char* bytes : {"$9\r\n123456789\r\n",                         // bulk
                            "*5\r\n:1\r\n:1\r\n:1\r\n:1\r\n:1\r\n",        // items
                            "*2\r\n$8\r\n12345678\r\n$8\r\n12345678\r\n",  // total bytes
                            "*1\r\n*1\r\n*1\r\n:1\r\n"}) {                 // depth
    MemorySource src(bytes);
    EXPECT_THAT(ReadValue(src, small), StatusIs(StatusCode::kCorruption)) << bytes;
  }
}

TEST(RespReader, RandomGarbageNeverCrashes) {
  // Fuzz-style: random bytes and random mutations of valid replies either
  // parse or fail with a status; never crash, hang or allocate absurdly.
  std::mt19937_64 rng(12345);
  const std::string seeds[] = {"*2\r\n$3\r\nabc\r\n:12\r\n", "$5\r\nhello\r\n", "-MOVED 1 h:2\r\n",
                               "*1\r\n*2\r\n+a\r\n$-1\r\n"};
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bytes = seeds[iter % 4];
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    if (iter % 5 == 0) {
      bytes.resize(rng() % 64);
      for (char& c : bytes) c = static_cast<char>(rng());
    }
    MemorySource a(bytes);
    (void)ReadValue(a, ValueLimits{});
    MemorySource b(bytes);
    Result<ReplyHead> h = ReadReplyHead(b, kLimits);
    if (h.ok()) (void)SkipReplyBody(b, *h, kLimits);
  }
}

TEST(ServerError, Classifies) {
  ServerError moved = ParseServerError("MOVED 3999 127.0.0.1:6381");
  EXPECT_EQ(moved.kind, ServerErrorKind::kMoved);
  EXPECT_EQ(moved.slot, 3999);
  ASSERT_TRUE(moved.to.has_value());
  EXPECT_EQ(moved.to->host, "127.0.0.1");
  EXPECT_EQ(moved.to->port, 6381);

  ServerError ask = ParseServerError("ASK 12 :7001");
  EXPECT_EQ(ask.kind, ServerErrorKind::kAsk);
  ASSERT_TRUE(ask.to.has_value());
  EXPECT_EQ(ask.to->host, "");  // "the host you asked"
  EXPECT_EQ(ask.to->port, 7001);

  EXPECT_EQ(ParseServerError("TRYAGAIN Multiple keys request during rehashing").kind,
            ServerErrorKind::kTryAgain);
  EXPECT_EQ(ParseServerError("CLUSTERDOWN The cluster is down").kind,
            ServerErrorKind::kClusterDown);
  EXPECT_EQ(ParseServerError("OOM command not allowed when used memory > 'maxmemory'.").kind,
            ServerErrorKind::kOom);
  EXPECT_EQ(ParseServerError("WRONGTYPE Operation against a key").kind,
            ServerErrorKind::kWrongType);
  EXPECT_EQ(ParseServerError("ERR whatever").kind, ServerErrorKind::kOther);
  // Malformed redirects are not followed.
  EXPECT_EQ(ParseServerError("MOVED x 1.2.3.4:5").kind, ServerErrorKind::kOther);
  EXPECT_EQ(ParseServerError("MOVED 16384 1.2.3.4:5").kind, ServerErrorKind::kOther);
  EXPECT_EQ(ParseServerError("MOVED 1").kind, ServerErrorKind::kOther);
  EXPECT_EQ(ParseServerError("ASK 1 host-without-port").kind, ServerErrorKind::kOther);
}

}  // namespace
}  // namespace kvtier::remote
