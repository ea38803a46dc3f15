// Helpers for the remote tier's tests: the two servers they run against,
// options with a unique key prefix, opening a tier, generated blocks
// (content a pure function of the key), a plain hiredis client to poke at
// the server behind the tier's back (testing/raw_redis.h), and a stopwatch.
#ifndef KVTIER_REMOTE_REMOTE_TEST_UTIL_H_
#define KVTIER_REMOTE_REMOTE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/remote_tier.h"
#include "remote/value_layout.h"
#include "synth/block_generator.h"
#include "testing/raw_redis.h"
#include "testing/redis_server.h"

namespace kvtier::remote {

using testing::RawRedis;

// The server a parameterized test runs against: one redis-server or a
// Cluster (testing/redis_server.h).
enum class Where { kSingle, kCluster };

// The URL of `w`'s server; "" (and a failed expectation) when there is none.
inline std::string UrlFor(Where w) {
  Result<std::string> u =
      w == Where::kSingle ? testing::TestRedisUrl() : testing::TestRedisClusterUrl();
  EXPECT_TRUE(u.ok()) << u.status().ToString();
  return u.ok() ? *u : "";
}

// The test name suffix of a Where: "Single" or "Cluster".
inline std::string WhereName(const ::testing::TestParamInfo<Where>& i) {
  return i.param == Where::kSingle ? "Single" : "Cluster";
}

inline RemoteTierOptions TestOptions(const std::string& url, const ModelLayout& layout,
                                     const std::string& name) {
  RemoteTierOptions o;
  o.url = url;
  o.layout = layout;
  o.key_prefix = testing::UniqueKeyPrefix(name);
  // Exists() here checks what the server holds, not the lookup budget
  // (lookup_budget_test.cc does): a loaded machine can take more than the
  // default 20 ms.
  o.lookup_budget_ms = o.command_timeout_ms;
  return o;
}

// The tier `o` opens; null (and a failed expectation) when it does not.
inline std::unique_ptr<RemoteTier> OpenTier(const RemoteTierOptions& o) {
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

inline ModelLayout TinyLayout() { return ModelLayout::Preset("tiny").value(); }

// A layout whose blocks span several 4 KiB parts (about 20 KiB of data).
inline ModelLayout MultiPartLayout() {
  return ModelLayout::Attention("multipart", 2, 2, 80, DType::kF16, 32);
}

// The block file of TestBlockKey(i), with `created_at` (distinct values
// give distinct bytes for the same key).
inline SharedBlock TestBlock(const ModelLayout& layout, uint64_t i, int64_t created_at = 1000) {
  const BlockKey key = TestBlockKey(i);
  Result<BlockBuffer> b = MakeBlockFile(layout, key, key, key, created_at);
  return std::make_shared<const BlockBuffer>(std::move(b).value());
}

inline std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s));
}

// A fake server's answer to Exists()'s `GETRANGE <part 0> 0 7` for a value
// that is there: the first 8 bytes of a block file (its header length, u64
// little-endian) as a RESP bulk string.
inline std::string FakeHeadReply(uint64_t header_bytes = 1024) {
  std::string head(8, '\0');
  for (int i = 0; i < 8; ++i) head[i] = static_cast<char>((header_bytes >> (8 * i)) & 0xff);
  return "$8\r\n" + head + "\r\n";
}

// Seconds since construction.
class Stopwatch {
 public:
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_REMOTE_TEST_UTIL_H_
