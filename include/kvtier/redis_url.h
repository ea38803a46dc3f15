// Parsing of the remote tier's URLs (DESIGN.md §7):
//
//   redis://[[user]:password@]host[:port][/db]
//   redis-cluster://[[user]:password@]host:port[,host:port...]
//   rediss://...  rediss-cluster://...   the same over TLS
//
// host is a name, an IPv4 address or a bracketed IPv6 address ([::1]).
// User and password may hold percent-escapes (%40 for '@', %3A for ':').
// Public so that a tool or a test can reach the server a RemoteTierOptions
// URL names (`kvtier bench remote`'s raw loop, testing/raw_redis.h).
//
// Thread safety: pure functions on values.
#ifndef KVTIER_REDIS_URL_H_
#define KVTIER_REDIS_URL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier::remote {

struct NodeAddress {
  std::string host;  // without brackets for IPv6
  uint16_t port = 0;

  // "host:port", or "[v6]:port".
  std::string ToString() const;
  bool operator==(const NodeAddress&) const = default;
  auto operator<=>(const NodeAddress&) const = default;
};

enum class RedisMode : uint8_t { kSingle, kCluster };

struct RedisUrl {
  RedisMode mode = RedisMode::kSingle;
  std::vector<NodeAddress> nodes;  // one for kSingle; the seeds for kCluster
  std::string user;                // empty = the default user
  std::string password;            // empty = no AUTH
  bool has_password = false;       // "redis://user:@h" sends AUTH with ""
  uint32_t db = 0;                 // SELECT db (kSingle only)
  bool tls = false;                // rediss:// or rediss-cluster://

  // The URL without the password (for messages and logs).
  std::string Redacted() const;
};

// InvalidArgument naming what is wrong (never echoing the password).
Result<RedisUrl> ParseRedisUrl(std::string_view url);

// Parses "host:port" or "[v6]:port" as Redis prints it in MOVED/ASK
// replies and CLUSTER output. InvalidArgument when malformed.
Result<NodeAddress> ParseHostPort(std::string_view text);

}  // namespace kvtier::remote

#endif  // KVTIER_REDIS_URL_H_
