#include "bindings/cache_spec.h"

#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "kvtier/env.h"

namespace kvtier::bindings {
namespace {

using json = nlohmann::json;

// Longest option text echoed back in a message.
constexpr size_t kMaxEcho = 60;

std::string Echo(const json& value) {
  std::string text = value.dump();
  if (text.size() > kMaxEcho) text = text.substr(0, kMaxEcho) + "...";
  return text;
}

Result<std::string> StringField(const char* name, const json& value) {
  if (!value.is_string()) {
    return Status::InvalidArgument(std::string(name) + ": expected a string, got " + Echo(value));
  }
  return value.get<std::string>();
}

Result<std::optional<std::string>> OptionalStringField(const char* name, const json& value) {
  if (value.is_null()) return std::optional<std::string>();
  KVTIER_ASSIGN_OR_RETURN(std::string s, StringField(name, value));
  return std::optional<std::string>(std::move(s));
}

Result<uint64_t> UnsignedField(const char* name, const json& value, uint64_t max) {
  // nlohmann keeps integers that fit u64 unsigned; negative ones, floats and
  // anything larger are refused rather than converted.
  if (!value.is_number_unsigned() && !(value.is_number_integer() && value.get<int64_t>() >= 0)) {
    return Status::InvalidArgument(std::string(name) + ": expected an integer 0.." +
                                   std::to_string(max) + ", got " + Echo(value));
  }
  const uint64_t v = value.get<uint64_t>();
  if (v > max) {
    return Status::InvalidArgument(std::string(name) + ": " + std::to_string(v) +
                                   " is larger than " + std::to_string(max));
  }
  return v;
}

}  // namespace

Result<CacheSpec> ParseCacheSpecJson(std::string_view json_text) {
  // nlohmann keeps the last of repeated names; a repeated option is refused.
  std::string repeated;
  std::set<std::string> top_names;
  const json::parser_callback_t find_repeats = [&](int depth, json::parse_event_t event,
                                                   json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !top_names.insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  json root = json::parse(json_text, find_repeats, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return Status::InvalidArgument("options_json: not valid JSON");
  }
  if (!repeated.empty()) {
    return Status::InvalidArgument("options_json: option '" + repeated.substr(0, kMaxEcho) +
                                   "' given twice");
  }
  if (!root.is_object()) {
    return Status::InvalidArgument("options_json: expected a JSON object, got " + Echo(root));
  }
  CacheSpec spec;
  bool has_layout = false;
  bool has_host_bytes = false;
  for (const auto& [name, value] : root.items()) {
    if (name == "layout") {
      KVTIER_ASSIGN_OR_RETURN(spec.layout, StringField("layout", value));
      has_layout = true;
    } else if (name == "host_bytes") {
      KVTIER_ASSIGN_OR_RETURN(spec.host_bytes, UnsignedField("host_bytes", value,
                                                             std::numeric_limits<uint64_t>::max()));
      has_host_bytes = true;
    } else if (name == "block_tokens") {
      KVTIER_ASSIGN_OR_RETURN(uint64_t bt, UnsignedField("block_tokens", value, UINT32_MAX));
      spec.block_tokens = static_cast<uint32_t>(bt);
    } else if (name == "disk_dir") {
      KVTIER_ASSIGN_OR_RETURN(spec.disk_dir, OptionalStringField("disk_dir", value));
    } else if (name == "remote") {
      KVTIER_ASSIGN_OR_RETURN(spec.remote, OptionalStringField("remote", value));
    } else {
      return Status::InvalidArgument("options_json: unknown option '" + name.substr(0, kMaxEcho) +
                                     "' (known: layout, host_bytes, disk_dir, remote, "
                                     "block_tokens)");
    }
  }
  if (!has_layout) return Status::InvalidArgument("layout: is required");
  if (!has_host_bytes) return Status::InvalidArgument("host_bytes: is required");
  return spec;
}

Result<OpenedCache> OpenCache(const CacheSpec& spec) {
  if (spec.layout.empty()) {
    return Status::InvalidArgument("layout: must name a preset or a layout JSON file");
  }
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), spec.layout, spec.block_tokens);
  if (!layout.ok()) return layout.status().WithContext("layout");
  return OpenCacheForLayout(std::move(*layout), spec);
}

Result<OpenedCache> OpenCacheForLayout(ModelLayout layout, const CacheSpec& spec) {
  if (spec.host_bytes == 0) return Status::InvalidArgument("host_bytes: must be > 0");
  if (spec.disk_dir.has_value() && spec.disk_dir->empty()) {
    return Status::InvalidArgument("disk_dir: must not be empty (null for a RAM-only cache)");
  }
  if (spec.remote.has_value() && spec.remote->empty()) {
    return Status::InvalidArgument("remote: must not be empty (null for no remote tier)");
  }
  CacheOptions options;
  options.host.capacity_bytes = spec.host_bytes;
  options.layout_signature = layout.Signature();
  options.info_log = spec.info_log;
  if (spec.disk_dir.has_value()) options.disk.emplace().dir = *spec.disk_dir;
  if (spec.remote.has_value()) {
    // Every other remote option keeps its default (key prefix "kvtier:v1:",
    // 4 MiB parts): hosts sharing a server through the bindings agree.
    RemoteTierOptions& r = options.remote.emplace();
    r.url = *spec.remote;
    r.layout = layout;
  }
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(std::move(options), Env::Default()));
  return OpenedCache{std::move(layout), std::move(cache)};
}

}  // namespace kvtier::bindings
