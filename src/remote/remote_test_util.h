// Helpers for the remote tier's tests: options with a unique key prefix,
// generated blocks (content a pure function of the key), a plain hiredis
// client to poke at the server behind the tier's back, and a stopwatch.
#ifndef KVTIER_REMOTE_REMOTE_TEST_UTIL_H_
#define KVTIER_REMOTE_REMOTE_TEST_UTIL_H_

#include <hiredis/hiredis.h>

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/layout.h"
#include "kvtier/remote_tier.h"
#include "remote/redis_url.h"
#include "remote/value_layout.h"
#include "synth/block_generator.h"
#include "testing/redis_server.h"

namespace kvtier::remote {

inline RemoteTierOptions TestOptions(const std::string& url, const ModelLayout& layout,
                                     const std::string& name) {
  RemoteTierOptions o;
  o.url = url;
  o.layout = layout;
  o.key_prefix = testing::UniqueKeyPrefix(name);
  return o;
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

// A plain client to one server, following MOVED for a cluster.
class RawRedis {
 public:
  explicit RawRedis(const std::string& url) {
    Result<RedisUrl> u = ParseRedisUrl(url);
    if (u.ok()) url_ = *u;
  }
  ~RawRedis() {
    for (auto& [addr, c] : conns_) redisFree(c);
  }
  // Runs a command on the node owning `key` (args[1]). The reply as text:
  // "int:N", "nil", "str:<bytes>", "status:OK", "err:<msg>", "array:N".
  std::string Run(const std::vector<std::string>& args) {
    NodeAddress at = url_.nodes.at(0);
    for (int hop = 0; hop < 6; ++hop) {
      redisContext* c = Connect(at);
      if (c == nullptr) return "err:connect";
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const std::string& a : args) {
        argv.push_back(a.data());
        lens.push_back(a.size());
      }
      redisReply* r = static_cast<redisReply*>(
          redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (r == nullptr) return "err:io";
      std::string out;
      switch (r->type) {
        case REDIS_REPLY_INTEGER:
          out = "int:" + std::to_string(r->integer);
          break;
        case REDIS_REPLY_NIL:
          out = "nil";
          break;
        case REDIS_REPLY_STRING:
          out = "str:" + std::string(r->str, r->len);
          break;
        case REDIS_REPLY_STATUS:
          out = "status:" + std::string(r->str, r->len);
          break;
        case REDIS_REPLY_ARRAY:
          out = "array:" + std::to_string(r->elements);
          break;
        default:
          out = "err:" + std::string(r->str, r->len);
          break;
      }
      freeReplyObject(r);
      if (out.rfind("err:MOVED ", 0) == 0) {
        Result<NodeAddress> to = ParseHostPort(out.substr(out.rfind(' ') + 1));
        if (!to.ok()) return out;
        at = *to;
        continue;
      }
      return out;
    }
    return "err:too many redirects";
  }
  std::string Password() const { return url_.password; }

 private:
  redisContext* Connect(const NodeAddress& a) {
    const std::string key = a.ToString();
    auto it = conns_.find(key);
    if (it != conns_.end()) return it->second;
    redisContext* c = redisConnect(a.host.c_str(), a.port);
    if (c == nullptr || c->err) {
      if (c) redisFree(c);
      return nullptr;
    }
    if (url_.has_password) {
      redisReply* r = static_cast<redisReply*>(redisCommand(c, "AUTH %s", url_.password.c_str()));
      if (r) freeReplyObject(r);
    }
    conns_[key] = c;
    return c;
  }

  RedisUrl url_;
  std::map<std::string, redisContext*> conns_;
};

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
