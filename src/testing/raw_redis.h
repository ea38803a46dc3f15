// RawRedis: a plain hiredis client to the server behind a redis:// or
// redis-cluster:// URL, for tests that poke at what a RemoteTier stored
// behind its back (read, overwrite or delete a value). Follows MOVED for a
// cluster; one connection per node, kept until destruction.
//
// Thread safety: one thread uses an object.
#ifndef KVTIER_TESTING_RAW_REDIS_H_
#define KVTIER_TESTING_RAW_REDIS_H_

#include <hiredis/hiredis.h>

#include <map>
#include <string>
#include <vector>

#include "kvtier/redis_url.h"
#include "kvtier/status.h"

namespace kvtier::testing {

// A plain client to one server, following MOVED for a cluster.
class RawRedis {
 public:
  explicit RawRedis(const std::string& url) {
    Result<remote::RedisUrl> u = remote::ParseRedisUrl(url);
    if (u.ok()) url_ = *u;
  }
  ~RawRedis() {
    for (auto& [addr, c] : conns_) redisFree(c);
  }
  // Runs a command on the node owning `key` (args[1]). The reply as text:
  // "int:N", "nil", "str:<bytes>", "status:OK", "err:<msg>", "array:N".
  std::string Run(const std::vector<std::string>& args) {
    remote::NodeAddress at = url_.nodes.at(0);
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
        Result<remote::NodeAddress> to = remote::ParseHostPort(out.substr(out.rfind(' ') + 1));
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
  redisContext* Connect(const remote::NodeAddress& a) {
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

  remote::RedisUrl url_;
  std::map<std::string, redisContext*> conns_;
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_RAW_REDIS_H_
