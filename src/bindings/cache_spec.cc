#include "bindings/cache_spec.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "kvtier/env.h"

namespace kvtier::bindings {
namespace {

using json = nlohmann::json;

// Longest option text echoed back in a message.
constexpr size_t kMaxEcho = 60;

// The first option of `spec` named `<prefix>...` (other than `except`).
std::string FirstGiven(const CacheSpec& spec, std::string_view prefix, std::string_view except) {
  for (const std::string& name : spec.given) {
    if (name.starts_with(prefix) && name != except) return name;
  }
  return "";
}

}  // namespace

Result<CacheSpec> ParseCacheSpecJson(std::string_view json_text) {
  KVTIER_ASSIGN_OR_RETURN(json root, ParseOptionsText(json_text, "options_json"));
  if (!root.is_object()) {
    std::string text = root.dump();
    if (text.size() > kMaxEcho) text = text.substr(0, kMaxEcho) + "...";
    return Status::InvalidArgument("options_json: expected a JSON object, got " + text);
  }
  CacheSpec spec;
  KVTIER_RETURN_IF_ERROR(ApplyOptions(root, &spec));
  return spec;
}

Status NameOption(const Status& status) {
  constexpr std::string_view kPrefix = "CacheOptions.";
  const std::string& msg = status.message();
  if (status.ok() || !msg.starts_with(kPrefix)) return status;
  const std::string_view rest = std::string_view(msg).substr(kPrefix.size());
  const OptionInfo* best = nullptr;
  for (const OptionInfo& o : Options()) {
    if (!rest.starts_with(o.field)) continue;
    const char next = rest.size() > o.field.size() ? rest[o.field.size()] : ' ';
    if (std::isalnum(static_cast<unsigned char>(next)) || next == '_') continue;
    if (best == nullptr || o.field.size() > best->field.size()) best = &o;
  }
  if (best == nullptr) return status;
  return Status(status.code(), best->name + ": " + msg);
}

Result<CacheOptions> CacheOptionsFor(const ModelLayout& layout, const CacheSpec& spec) {
  if (!spec.disk_dir.has_value()) {
    if (std::string n = FirstGiven(spec, "disk_", "disk_dir"); !n.empty()) {
      return Status::InvalidArgument(n + ": needs disk_dir (this cache has no disk tier)");
    }
  }
  if (!spec.remote.has_value()) {
    if (std::string n = FirstGiven(spec, "remote_", "remote_write"); !n.empty()) {
      return Status::InvalidArgument(n + ": needs remote (this cache has no remote tier)");
    }
  }
  if (Status shard = ValidateShard(spec.key.shard); !shard.ok()) {
    return Status::InvalidArgument("key_shard: " + shard.message());
  }
  CacheOptions options = spec.cache;
  options.layout_signature = layout.Signature();
  if (spec.disk_dir.has_value()) {
    DiskTierOptions& d = options.disk.emplace(spec.disk);
    d.dir = *spec.disk_dir;
  }
  if (spec.remote.has_value()) {
    RemoteTierOptions& r = options.remote.emplace(spec.remote_tier);
    r.url = *spec.remote;
    r.layout = layout;
  }
  KVTIER_RETURN_IF_ERROR(NameOption(options.Validate()));
  return options;
}

Result<OpenedCache> OpenCache(const CacheSpec& spec) {
  if (!spec.Has("layout")) return Status::InvalidArgument("layout: is required");
  if (spec.layout.empty()) {
    return Status::InvalidArgument("layout: must name a preset or a layout JSON file");
  }
  if (!spec.Has("host_bytes") && !spec.server.has_value()) {
    return Status::InvalidArgument("host_bytes: is required (the RAM budget, e.g. \"1GiB\")");
  }
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), spec.layout, spec.block_tokens);
  if (!layout.ok()) return layout.status().WithContext("layout");
  return OpenCacheForLayout(std::move(*layout), spec);
}

// A client of the host's `kvtier serve`: the daemon owns every tier.
Result<OpenedCache> OpenServedCache(ModelLayout layout, const CacheSpec& spec) {
  for (const char* owned : {"host_bytes", "disk_dir", "remote", "read_buffer_prefault_bytes"}) {
    if (spec.Has(owned)) {
      return Status::InvalidArgument(std::string(owned) +
                                     ": not with server (the daemon owns the tiers; give it to "
                                     "`kvtier serve`)");
    }
  }
  CacheOptions options = spec.cache;
  options.layout_signature = layout.Signature();
  options.server = *spec.server;
  KVTIER_RETURN_IF_ERROR(NameOption(options.Validate()));
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(std::move(options), Env::Default()));
  return OpenedCache{std::move(layout), std::move(cache)};
}

Result<OpenedCache> OpenCacheForLayout(ModelLayout layout, const CacheSpec& spec) {
  // The daemon's own options, in-process or as its client.
  for (const char* daemon_only : {"server_http", "server_namespace_quota", "server_socket_group"}) {
    if (spec.Has(daemon_only)) {
      return Status::InvalidArgument(std::string(daemon_only) +
                                     ": only `kvtier serve` takes it (an option of the daemon), "
                                     "not a cache");
    }
  }
  if (spec.server.has_value()) return OpenServedCache(std::move(layout), spec);
  if (!spec.Has("host_bytes")) {
    return Status::InvalidArgument("host_bytes: is required (the RAM budget, e.g. \"1GiB\")");
  }
  if (spec.cache.host.capacity_bytes == 0) {
    return Status::InvalidArgument("host_bytes: must be > 0");
  }
  KVTIER_ASSIGN_OR_RETURN(CacheOptions options, CacheOptionsFor(layout, spec));
  if (spec.read_buffer_prefault_bytes > options.read_buffer_pool_bytes) {
    return Status::InvalidArgument(
        "read_buffer_prefault_bytes: " + std::to_string(spec.read_buffer_prefault_bytes) +
        " bytes is more than read_buffer_pool_bytes (" +
        std::to_string(options.read_buffer_pool_bytes) +
        "), which caps the free read buffers kept; raise read_buffer_pool_bytes too");
  }
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(std::move(options), Env::Default()));
  if (spec.read_buffer_prefault_bytes > 0) {
    // One buffer per block file (its data and a header of a few KiB): the
    // pool stops where its free memory would pass read_buffer_pool_bytes.
    const uint64_t count = spec.read_buffer_prefault_bytes / std::max<uint64_t>(1, layout.BlockBytes());
    Result<uint64_t> added = cache->PrefaultReadBuffers(layout, count);
    if (!added.ok()) return added.status().WithContext("read_buffer_prefault_bytes");
  }
  return OpenedCache{std::move(layout), std::move(cache)};
}

}  // namespace kvtier::bindings
