#include <string>
#include <string_view>

#include "kvtier/tiered_cache.h"

namespace kvtier {
namespace {

constexpr uint32_t kMaxLoadThreads = 64;
constexpr uint64_t kMaxIndexExpectedBlocks = uint64_t{1} << 32;

Status Bad(std::string_view field, std::string_view why) {
  return Status::InvalidArgument("CacheOptions." + std::string(field) + " " + std::string(why));
}

}  // namespace

std::string_view CacheTierName(CacheTier tier) {
  switch (tier) {
    case CacheTier::kNone:
      return "none";
    case CacheTier::kHost:
      return "host";
    case CacheTier::kDisk:
      return "disk";
    case CacheTier::kRemote:
      return "remote";
  }
  return "unknown";
}

Status CacheOptions::Validate() const {
  if (!server.empty()) {
    if (disk.has_value()) return Bad("disk", "must be unset with server (the daemon owns the disk tier)");
    if (remote.has_value()) {
      return Bad("remote", "must be unset with server (the daemon owns the remote tier)");
    }
    if (layout_signature.empty()) return Bad("layout_signature", "is required");
    if (server_timeout_ms == 0 || server_timeout_ms > 3'600'000) {
      return Bad("server_timeout_ms", "must be in [1, 3600000]");
    }
    return Status::Ok();
  }
  if (host.shared_budget == nullptr && host.capacity_bytes == 0) {
    return Bad("host.capacity_bytes", "must be > 0 when host.shared_budget is not set");
  }
  if (host.eviction_sink) {
    return Bad("host.eviction_sink", "must be empty: the cache wires it to the disk tier");
  }
  if (host.key_listener) {
    return Bad("host.key_listener", "must be empty: the cache wires it to its Match index");
  }
  if (layout_signature.empty()) {
    return Bad("layout_signature", "is required (ModelLayout::Signature() of the cached blocks)");
  }
  if (write_policy != WritePolicy::kWriteBack && write_policy != WritePolicy::kWriteThrough) {
    return Bad("write_policy", "is not a known WritePolicy value");
  }
  if (write_policy == WritePolicy::kWriteThrough && !disk.has_value()) {
    return Bad("write_policy", "kWriteThrough needs a disk tier (CacheOptions.disk is not set)");
  }
  if (load_threads > kMaxLoadThreads) return Bad("load_threads", "must be <= 64");
  if (index_expected_blocks > kMaxIndexExpectedBlocks) {
    return Bad("index_expected_blocks", "must be <= 4294967296");
  }
  if (disk.has_value()) {
    if (!disk->layout_signature.empty() && disk->layout_signature != layout_signature) {
      return Bad("disk.layout_signature", "differs from CacheOptions.layout_signature");
    }
    DiskTierOptions d = *disk;
    d.layout_signature = layout_signature;
    Status s = d.Validate();
    if (!s.ok()) {
      std::string msg = s.message();
      constexpr std::string_view kPrefix = "DiskTierOptions.";
      if (msg.starts_with(kPrefix)) msg.erase(0, kPrefix.size());
      return Status::InvalidArgument("CacheOptions.disk." + msg);
    }
  }
  if (remote_write != RemoteWritePolicy::kEveryStore &&
      remote_write != RemoteWritePolicy::kReadOnly) {
    return Bad("remote_write", "is not a known RemoteWritePolicy value");
  }
  if (remote.has_value()) {
    Status s = remote->Validate();
    if (!s.ok()) return Status::InvalidArgument("CacheOptions.remote." + s.message());
    if (remote->layout.Signature() != layout_signature) {
      return Bad("remote.layout", "has a signature other than CacheOptions.layout_signature");
    }
  }
  return Status::Ok();
}

}  // namespace kvtier
