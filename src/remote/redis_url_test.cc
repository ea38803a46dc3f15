#include "kvtier/redis_url.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(RedisUrl, HostPortOnly) {
  Result<RedisUrl> u = ParseRedisUrl("redis://127.0.0.1:6380");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->mode, RedisMode::kSingle);
  ASSERT_EQ(u->nodes.size(), 1u);
  EXPECT_EQ(u->nodes[0].host, "127.0.0.1");
  EXPECT_EQ(u->nodes[0].port, 6380);
  EXPECT_FALSE(u->has_password);
  EXPECT_EQ(u->db, 0u);
}

TEST(RedisUrl, DefaultPortIs6379) {
  Result<RedisUrl> u = ParseRedisUrl("redis://cache.internal");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->nodes[0].host, "cache.internal");
  EXPECT_EQ(u->nodes[0].port, 6379);
}

TEST(RedisUrl, UserPasswordAndDb) {
  Result<RedisUrl> u = ParseRedisUrl("redis://alice:s3cret@10.0.0.5:7000/3");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->user, "alice");
  EXPECT_EQ(u->password, "s3cret");
  EXPECT_TRUE(u->has_password);
  EXPECT_EQ(u->nodes[0].host, "10.0.0.5");
  EXPECT_EQ(u->nodes[0].port, 7000);
  EXPECT_EQ(u->db, 3u);
}

TEST(RedisUrl, PasswordWithoutUser) {
  Result<RedisUrl> u = ParseRedisUrl("redis://:pw@h:1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->user, "");
  EXPECT_EQ(u->password, "pw");
  EXPECT_TRUE(u->has_password);
}

TEST(RedisUrl, PercentEscapesAndRawAtInPassword) {
  Result<RedisUrl> u = ParseRedisUrl("redis://u%3Ax:p%40ss@h:1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->user, "u:x");
  EXPECT_EQ(u->password, "p@ss");
  Result<RedisUrl> raw = ParseRedisUrl("redis://u:p@ss@h:1");
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ(raw->password, "p@ss");
  EXPECT_EQ(raw->nodes[0].host, "h");
}

TEST(RedisUrl, Ipv6) {
  Result<RedisUrl> u = ParseRedisUrl("redis://[::1]:6390");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->nodes[0].host, "::1");
  EXPECT_EQ(u->nodes[0].ToString(), "[::1]:6390");
}

TEST(RedisUrl, ClusterSeeds) {
  Result<RedisUrl> u = ParseRedisUrl("redis-cluster://a:7000,b:7001,[::1]:7002");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->mode, RedisMode::kCluster);
  ASSERT_EQ(u->nodes.size(), 3u);
  EXPECT_EQ(u->nodes[1].host, "b");
  EXPECT_EQ(u->nodes[1].port, 7001);
  EXPECT_EQ(u->nodes[2].host, "::1");
}

TEST(RedisUrl, RedactedHidesThePassword) {
  Result<RedisUrl> u = ParseRedisUrl("redis://bob:hunter2@h:1/2");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->Redacted(), "redis://bob:***@h:1/2");
  EXPECT_THAT(u->Redacted(), Not(HasSubstr("hunter2")));
}

TEST(RedisUrl, Rejects) {
  const char* bad[] = {
      "",                         // empty
      "http://h:1",               // scheme
      "redis://",                 // no host
      "redis://h:0",              // port 0
      "redis://h:65536",          // port too large
      "redis://h:12ab",           // port junk
      "redis://h:1/x",            // db junk
      "redis://h:1/",             // empty db
      "redis://h:1/99999999999",  // db too large
      "redis://user@h:1",         // credentials without ':'
      "redis://u:p%4@h:1",        // truncated escape
      "redis://u:p%zz@h:1",       // bad escape
      "redis://h h:1",            // space in host
      "redis://[::1:1",           // unclosed bracket
      "redis-cluster://a:1,",     // empty seed
      "redis-cluster://a",        // seed without port
      "redis-cluster://a:1/2",    // db in a cluster URL
  };
  for (const char* url : bad) {
    Result<RedisUrl> u = ParseRedisUrl(url);
    EXPECT_THAT(u, StatusIs(StatusCode::kInvalidArgument, HasSubstr("url"))) << url;
  }
}

TEST(RedisUrl, ErrorsNeverEchoThePassword) {
  Result<RedisUrl> u = ParseRedisUrl("redis://u:topsecret@h:99999");
  ASSERT_THAT(u, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(u.status().message(), Not(HasSubstr("topsecret")));
}

TEST(HostPort, AsRedisPrintsIt) {
  Result<NodeAddress> a = ParseHostPort("127.0.0.1:7001");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7001);
  Result<NodeAddress> v6 = ParseHostPort("::1:7001");  // MOVED prints IPv6 unbracketed
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 7001);
  EXPECT_THAT(ParseHostPort("nohost"), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("h:x"), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseHostPort("h\r:1"), StatusIs(StatusCode::kInvalidArgument));
}

TEST(RedisUrl, TlsSchemes) {
  Result<RedisUrl> one = ParseRedisUrl("rediss://u:pw@cache.internal:6380/2");
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->mode, RedisMode::kSingle);
  EXPECT_TRUE(one->tls);
  EXPECT_EQ(one->nodes[0].host, "cache.internal");
  EXPECT_EQ(one->nodes[0].port, 6380);
  EXPECT_EQ(one->db, 2u);
  EXPECT_EQ(one->Redacted(), "rediss://u:***@cache.internal:6380/2");
  Result<RedisUrl> cluster = ParseRedisUrl("rediss-cluster://10.0.0.1:7000,10.0.0.2:7001");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  EXPECT_EQ(cluster->mode, RedisMode::kCluster);
  EXPECT_TRUE(cluster->tls);
  EXPECT_EQ(cluster->nodes.size(), 2u);
  EXPECT_EQ(cluster->Redacted(), "rediss-cluster://10.0.0.1:7000,10.0.0.2:7001");
  Result<RedisUrl> plain = ParseRedisUrl("redis-cluster://10.0.0.1:7000");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->Redacted(), "redis-cluster://10.0.0.1:7000");
  EXPECT_THAT(ParseRedisUrl("rediss-cluster://h:1/3").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("no /db")));
  EXPECT_THAT(ParseRedisUrl("redisss://h:1").status(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("rediss://")));
}

}  // namespace
}  // namespace kvtier::remote
