#include "remote/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "remote/memory_source_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;

// Captured from redis-server 7.0.15, a 3-master cluster (one shard shown
// with a replica and a "?" endpoint added).
constexpr char kShards[] =
    "*3\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:10923\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n912f687c2dd831d82dc8eb268d055c25ef68a7d8\r\n$4\r\nport\r\n:21003\r\n"
    "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$"
    "6\r\nmaster\r\n"
    "$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*4\r\n:5461\r\n:10000\r\n:10001\r\n:10922\r\n$5\r\nnodes\r\n*2\r\n"
    "*6\r\n$4\r\nport\r\n:21009\r\n$2\r\nip\r\n$9\r\n127.0.0.9\r\n$4\r\nrole\r\n$7\r\nreplica\r\n"
    "*6\r\n$4\r\nport\r\n:21002\r\n$8\r\nendpoint\r\n$1\r\n?\r\n$4\r\nrole\r\n$6\r\nmaster\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:5460\r\n$5\r\nnodes\r\n*1\r\n"
    "*14\r\n$2\r\nid\r\n$40\r\n9bd62bc44f186c116a6b1d50573f6c1b3b77d27b\r\n$4\r\nport\r\n:21001\r\n"
    "$2\r\nip\r\n$9\r\n127.0.0.1\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n$4\r\nrole\r\n$"
    "6\r\nmaster\r\n"
    "$18\r\nreplication-offset\r\n:0\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

constexpr char kSlots[] =
    "*3\r\n*3\r\n:0\r\n:5460\r\n*4\r\n$9\r\n127.0.0.1\r\n:21001\r\n$40\r\n"
    "9bd62bc44f186c116a6b1d50573f6c1b3b77d27b\r\n*0\r\n*3\r\n:5461\r\n:10922\r\n*4\r\n$0\r\n\r\n"
    ":21002\r\n$40\r\n916ff51bfb1d2032086d21f56f504503e9b57c6b\r\n*0\r\n*3\r\n:10923\r\n:16383\r\n"
    "*4\r\n$9\r\n127.0.0.1\r\n:21003\r\n$40\r\n912f687c2dd831d82dc8eb268d055c25ef68a7d8\r\n*0\r\n";

RespValue Parse(const char* bytes) {
  MemorySource src(bytes);
  Result<RespValue> v = ReadValue(src, ValueLimits{});
  EXPECT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(src.remaining(), 0u);
  return v.ok() ? *v : RespValue{};
}

TEST(Topology, ClusterShards) {
  const NodeAddress asked{"10.1.1.1", 21002};
  Result<std::vector<SlotRange>> r = ParseClusterShards(Parse(kShards), asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 4u);
  EXPECT_EQ((*r)[0].first, 10923);
  EXPECT_EQ((*r)[0].last, 16383);
  EXPECT_EQ((*r)[0].master.ToString(), "127.0.0.1:21003");
  // The replica is skipped; the master's "?" endpoint is the node asked.
  EXPECT_EQ((*r)[1].first, 5461);
  EXPECT_EQ((*r)[1].last, 10000);
  EXPECT_EQ((*r)[1].master.ToString(), "10.1.1.1:21002");
  EXPECT_EQ((*r)[2].first, 10001);
  EXPECT_EQ((*r)[2].last, 10922);
  EXPECT_EQ((*r)[3].first, 0);
  EXPECT_EQ((*r)[3].last, 5460);
  EXPECT_EQ((*r)[3].master.port, 21001);
}

TEST(Topology, ClusterSlots) {
  const NodeAddress asked{"127.0.0.1", 21002};
  Result<std::vector<SlotRange>> r = ParseClusterSlots(Parse(kSlots), asked);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[1].first, 5461);
  EXPECT_EQ((*r)[1].master.ToString(), "127.0.0.1:21002");  // empty host: the node asked
  EXPECT_EQ((*r)[2].last, 16383);
}

// Shaped like redis-server 7.0.15's CLUSTER SHARDS with --tls-cluster yes:
// a TLS-only node (--port 0) lists "tls-port" only; one serving both lists
// "port" (plaintext) and "tls-port".
constexpr char kTlsShards[] =
    "*2\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:8191\r\n$5\r\nnodes\r\n*1\r\n"
    "*8\r\n$8\r\ntls-port\r\n:27938\r\n$8\r\nendpoint\r\n$9\r\n127.0.0.1\r\n"
    "$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n"
    "*4\r\n$5\r\nslots\r\n*2\r\n:8192\r\n:16383\r\n$5\r\nnodes\r\n*1\r\n"
    "*10\r\n$4\r\nport\r\n:6379\r\n$8\r\ntls-port\r\n:6380\r\n$8\r\nendpoint\r\n"
    "$8\r\n10.0.0.2\r\n$4\r\nrole\r\n$6\r\nmaster\r\n$6\r\nhealth\r\n$6\r\nonline\r\n";

TEST(Topology, ClusterShardsOverTlsUseTheTlsPort) {
  const NodeAddress asked{"127.0.0.1", 27938};
  Result<std::vector<SlotRange>> tls = ParseClusterShards(Parse(kTlsShards), asked, true);
  ASSERT_TRUE(tls.ok()) << tls.status().ToString();
  ASSERT_EQ(tls->size(), 2u);
  EXPECT_EQ((*tls)[0].master.ToString(), "127.0.0.1:27938");
  EXPECT_EQ((*tls)[1].master.ToString(), "10.0.0.2:6380");
  // A plaintext client skips the TLS-only node and uses the other's "port".
  Result<std::vector<SlotRange>> plain = ParseClusterShards(Parse(kTlsShards), asked, false);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  ASSERT_EQ(plain->size(), 1u);
  EXPECT_EQ((*plain)[0].first, 8192);
  EXPECT_EQ((*plain)[0].master.ToString(), "10.0.0.2:6379");
  // And a TLS client skips a node without a TLS port (kShards: plaintext).
  Result<std::vector<SlotRange>> none = ParseClusterShards(Parse(kShards), asked, true);
  ASSERT_TRUE(none.ok()) << none.status().ToString();
  EXPECT_TRUE(none->empty());
}

TEST(Topology, WrongShapesAreCorruption) {
  const NodeAddress asked{"h", 1};
  for (const char* bytes : {
           ":1\r\n",                                   // not an array
           "*1\r\n*2\r\n$5\r\nslots\r\n*1\r\n:0\r\n",  // no nodes, odd slots
           "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:5\r\n:1\r\n$5\r\nnodes\r\n*1\r\n"
           "*4\r\n$4\r\nport\r\n:1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n",  // reversed range
           "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:16384\r\n$5\r\nnodes\r\n*1\r\n"
           "*4\r\n$4\r\nport\r\n:1\r\n$4\r\nrole\r\n$6\r\nmaster\r\n",  // slot out of range
           "*1\r\n*4\r\n$5\r\nslots\r\n*2\r\n:0\r\n:1\r\n$5\r\nnodes\r\n*1\r\n"
           "*4\r\n$4\r\nport\r\n:70000\r\n$4\r\nrole\r\n$6\r\nmaster\r\n",  // bad port
       }) {
    EXPECT_THAT(ParseClusterShards(Parse(bytes), asked), StatusIs(StatusCode::kCorruption))
        << bytes;
  }
  for (const char* bytes :
       {":1\r\n", "*1\r\n*2\r\n:0\r\n:1\r\n", "*1\r\n*3\r\n:0\r\n:1\r\n:5\r\n"}) {
    EXPECT_THAT(ParseClusterSlots(Parse(bytes), asked), StatusIs(StatusCode::kCorruption)) << bytes;
  }
}

}  // namespace
}  // namespace kvtier::remote
