// RemoteTierOptions::Validate().
#include "kvtier/redis_url.h"
#include "kvtier/remote_tier.h"

namespace kvtier {
namespace {

Status Bad(std::string_view field, std::string_view why) {
  return Status::InvalidArgument(std::string(field) + ": " + std::string(why));
}

}  // namespace

Status RemoteTierOptions::Validate() const {
  if (url.empty()) return Bad("url", "required (redis://host:port or redis-cluster://host:port)");
  Result<remote::RedisUrl> parsed = remote::ParseRedisUrl(url);
  if (!parsed.ok()) return parsed.status();  // the message starts with "url: "
  Status s = layout.Validate();
  if (!s.ok()) return s.WithContext("layout");
  if (key_prefix.size() > 256) return Bad("key_prefix", "longer than 256 bytes");
  if (key_prefix.find_first_of("{}") != std::string::npos) {
    return Bad("key_prefix", "must not contain '{' or '}' (they would change the hash tag)");
  }
  if (part_bytes < 4096 || part_bytes > (uint64_t{512} << 20)) {
    return Bad("part_bytes", "must be 4096 .. 536870912 (512 MiB, Redis's largest string)");
  }
  if (connect_timeout_ms == 0) return Bad("connect_timeout_ms", "must be > 0");
  if (command_timeout_ms == 0) return Bad("command_timeout_ms", "must be > 0");
  if (lookup_budget_ms == 0) return Bad("lookup_budget_ms", "must be > 0");
  for (const std::string& path : mac_keys) {
    if (path.empty()) return Bad("mac_keys", "a key file path is empty");
  }
  if (breaker_failure_threshold == 0) return Bad("breaker_failure_threshold", "must be > 0");
  if (breaker_open_ms == 0) return Bad("breaker_open_ms", "must be > 0");
  if (breaker_max_open_ms < breaker_open_ms) {
    return Bad("breaker_max_open_ms", "must be >= breaker_open_ms");
  }
  if (connections_per_node == 0 || connections_per_node > 64) {
    return Bad("connections_per_node", "must be 1..64");
  }
  if (pipeline_max_bytes == 0) return Bad("pipeline_max_bytes", "must be > 0");
  if (writer_threads == 0 || writer_threads > 64) return Bad("writer_threads", "must be 1..64");
  if (queue_max_bytes == 0) return Bad("queue_max_bytes", "must be > 0");
  return Status::Ok();
}

}  // namespace kvtier
