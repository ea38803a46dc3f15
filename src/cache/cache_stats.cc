// CacheStats::ToJson and ToPrometheus, from the cache's and the host tier's
// stats tables; the disk and remote tiers render their own.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/stats_render.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {

std::string CacheStats::ToJson() const {
  try {
    nlohmann::json j = nlohmann::json::object();
    stats::AddJson(*this, &j);
    nlohmann::json h = nlohmann::json::object();
    stats::AddJson(host, &h);
    j["host"] = h;
    nlohmann::json b = nlohmann::json::object();
    stats::AddJson(host_budget, &b);
    j["host_budget"] = b;
    j["disk"] = disk.has_value() ? nlohmann::json::parse(disk->ToJson()) : nlohmann::json(nullptr);
    j["remote"] =
        remote.has_value() ? nlohmann::json::parse(remote->ToJson()) : nlohmann::json(nullptr);
    return j.dump();
  } catch (const std::exception& e) {
    // Only a failed allocation can get here; keep the API exception-free.
    return std::string("{\"error\":\"stats rendering failed\"}");
  }
}

std::string CacheStats::ToPrometheus() const {
  std::ostringstream out;
  stats::AddPrometheus(*this, "kvtier_cache", out);
  stats::AddPrometheus(host, "kvtier_host", out);
  stats::AddPrometheus(host_budget, "kvtier_host_budget", out);
  if (disk.has_value()) out << disk->ToPrometheus();
  if (remote.has_value()) out << remote->ToPrometheus("kvtier_remote");
  return out.str();
}

}  // namespace kvtier
