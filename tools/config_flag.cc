#include "config_flag.h"

#include <nlohmann/json.hpp>
#include <utility>

#include "bindings/option_table.h"

namespace kvtier::cli {
namespace {

// "bench pool", "replay": the command's words after `kvtier`.
std::string CommandWords(const CLI::App* app) {
  std::string words = app->get_name();
  for (const CLI::App* p = app->get_parent(); p != nullptr && p->get_parent() != nullptr;
       p = p->get_parent()) {
    words = p->get_name() + " " + words;
  }
  return words;
}

}  // namespace

void ConfigFlag::Add(CLI::App* app) {
  app_ = app;
  opt_ = app->add_option("--config", path_,
                         "JSON file of options (docs/options.md: disk_*, remote_*, host_*, ...); "
                         "a flag given here wins over the file");
}

Status ConfigFlag::ApplyTo(const ConfigTargets& targets,
                           std::initializer_list<FlagOverride> overrides) const {
  if (!given()) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json object, bindings::ReadConfigFile(path_));
  for (const FlagOverride& o : overrides) {
    if (app_->count(o.flag) > 0) object.erase(o.option);
  }
  bindings::CacheSpec spec;
  if (targets.cache != nullptr) spec.cache = *targets.cache;
  if (targets.disk != nullptr) spec.disk = *targets.disk;
  if (targets.remote != nullptr) spec.remote_tier = *targets.remote;
  Status s = bindings::ApplyOptions(object, &spec);
  if (!s.ok()) return s.WithContext("--config " + path_);
  // An engine's option (Python, C), applied where a cache is opened from
  // a CacheSpec; the commands build their caches and buffers themselves.
  if (spec.Has("read_buffer_prefault_bytes")) {
    return Status::InvalidArgument(
        "--config " + path_ + ": " + CommandWords(app_) +
        " cannot apply option read_buffer_prefault_bytes (it is for an engine's cache opened "
        "from Python or C; the commands size their read buffers themselves)");
  }
  if (targets.cache != nullptr) {
    // The tiers' own options travel in targets.disk / targets.remote.
    std::optional<DiskTierOptions> disk = std::move(targets.cache->disk);
    std::optional<RemoteTierOptions> remote = std::move(targets.cache->remote);
    *targets.cache = std::move(spec.cache);
    targets.cache->disk = std::move(disk);
    targets.cache->remote = std::move(remote);
  }
  if (targets.disk != nullptr) *targets.disk = std::move(spec.disk);
  if (targets.remote != nullptr) *targets.remote = std::move(spec.remote_tier);
  return Status::Ok();
}

Status ConfigFlag::RefuseOthers(std::string_view command,
                                std::initializer_list<std::string_view> applied,
                                std::string_view hint) const {
  if (!given()) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json object, bindings::ReadConfigFile(path_));
  for (const auto& [name, value] : object.items()) {
    bool ok = false;
    for (std::string_view a : applied) {
      ok |= a.ends_with('_') ? name.starts_with(a) : name == a;
    }
    if (!ok) {
      return Status::InvalidArgument("--config " + path_ + ": " + std::string(command) +
                                     " cannot apply option " + name + " (" + std::string(hint) +
                                     ")");
    }
  }
  return Status::Ok();
}

Status ConfigFlag::FillString(const char* option, const char* flag, std::string* value) const {
  if (app_ != nullptr && app_->count(flag) > 0) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> v, String(option));
  if (v) *value = *std::move(v);
  return Status::Ok();
}

Result<std::optional<std::string>> ConfigFlag::String(const char* option) const {
  if (!given()) return std::optional<std::string>();
  KVTIER_ASSIGN_OR_RETURN(nlohmann::json object, bindings::ReadConfigFile(path_));
  auto it = object.find(option);
  if (it == object.end() || it->is_null()) return std::optional<std::string>();
  bindings::CacheSpec spec;
  Status s = bindings::ApplyOption(option, *it, &spec);
  if (!s.ok()) return s.WithContext("--config " + path_);
  return std::optional<std::string>(it->get<std::string>());
}

}  // namespace kvtier::cli
