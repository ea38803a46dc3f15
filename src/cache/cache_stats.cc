// CacheStats::ToJson and ToPrometheus.
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/stats_render.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {
namespace {

using stats::Field;
using stats::MetricKind;

std::vector<Field> CacheCounterFields(const CacheStats& s) {
  return {{"lookups", s.lookups},
          {"hits_host", s.hits_host},
          {"hits_disk", s.hits_disk},
          {"hits_remote", s.hits_remote},
          {"misses", s.misses},
          {"load_errors", s.load_errors},
          {"loads_cancelled", s.loads_cancelled},
          {"matches", s.matches},
          {"match_blocks", s.match_blocks},
          {"match_disk_probes", s.match_disk_probes},
          {"stale_disk_hints", s.stale_disk_hints},
          {"match_remote_probes", s.match_remote_probes},
          {"match_remote_found", s.match_remote_found},
          {"remote_lookups", s.remote_lookups},
          {"remote_misses", s.remote_misses},
          {"stores", s.stores},
          {"store_errors", s.store_errors},
          {"store_bypasses", s.store_bypasses},
          {"remote_puts_queued", s.remote_puts_queued},
          {"remote_puts_dropped", s.remote_puts_dropped},
          {"bytes_stored", s.bytes_stored},
          {"bytes_loaded_host", s.bytes_loaded_host},
          {"bytes_loaded_disk", s.bytes_loaded_disk},
          {"bytes_loaded_remote", s.bytes_loaded_remote},
          {"bytes_written_back", s.bytes_written_back},
          {"bytes_written_through", s.bytes_written_through},
          {"bytes_promoted", s.bytes_promoted},
          {"write_backs", s.write_backs},
          {"write_back_errors", s.write_back_errors},
          {"promotions", s.promotions},
          {"promotion_failures", s.promotion_failures},
          {"remote_promotions", s.remote_promotions},
          {"reservation_failures", s.reservation_failures},
          {"preloads", s.preloads},
          {"close_dropped", s.close_dropped},
          {"read_buffers", s.read_buffers},
          {"read_buffers_reused", s.read_buffers_reused},
          {"read_buffer_fresh_bytes", s.read_buffer_fresh_bytes},
          {"read_buffers_prefaulted", s.read_buffers_prefaulted}};
}

std::vector<Field> CacheGaugeFields(const CacheStats& s) {
  return {{"index_keys", s.index_keys},
          {"index_host_keys", s.index_host_keys},
          {"index_disk_keys", s.index_disk_keys},
          {"index_bytes", s.index_bytes},
          {"read_buffer_free_bytes", s.read_buffer_free_bytes}};
}

std::vector<Field> HostCounterFields(const HostTierStats& h) {
  return {{"hits", h.hits},
          {"handoff_hits", h.handoff_hits},
          {"misses", h.misses},
          {"puts", h.puts},
          {"replacements", h.replacements},
          {"rejections", h.rejections},
          {"put_failures", h.put_failures},
          {"erases", h.erases},
          {"evictions", h.evictions},
          {"dirty_evictions", h.dirty_evictions},
          {"dirty_dropped", h.dirty_dropped},
          {"sink_errors", h.sink_errors},
          {"reservations", h.reservations},
          {"reservation_failures", h.reservation_failures}};
}

std::vector<Field> HostGaugeFields(const CacheStats& s) {
  const HostTierStats& h = s.host;
  const HostBudgetStats& b = s.host_budget;
  return {{"entries", h.entries},
          {"bytes", h.bytes},
          {"dirty_entries", h.dirty_entries},
          {"dirty_bytes", h.dirty_bytes},
          {"reserved_bytes", h.reserved_bytes},
          {"budget_capacity_bytes", b.capacity_bytes},
          {"budget_used_bytes", b.used_bytes},
          {"budget_reserved_bytes", b.reserved_bytes},
          {"budget_entries", b.entries},
          {"budget_tiers", b.tiers},
          {"budget_evictions", b.evictions}};
}

}  // namespace

std::string CacheStats::ToJson() const {
  try {
    nlohmann::json j;
    for (const auto& [name, v] : CacheCounterFields(*this)) j[name] = v;
    for (const auto& [name, v] : CacheGaugeFields(*this)) j[name] = v;
    j["hit_ratio"] = hit_ratio;
    j["load_latency"] = stats::HistogramToJson(load_latency);
    j["store_latency"] = stats::HistogramToJson(store_latency);
    nlohmann::json h;
    for (const auto& [name, v] : HostCounterFields(host)) h[name] = v;
    h["entries"] = host.entries;
    h["bytes"] = host.bytes;
    h["dirty_entries"] = host.dirty_entries;
    h["dirty_bytes"] = host.dirty_bytes;
    h["reserved_bytes"] = host.reserved_bytes;
    j["host"] = h;
    j["host_budget"] = {{"capacity_bytes", host_budget.capacity_bytes},
                        {"used_bytes", host_budget.used_bytes},
                        {"reserved_bytes", host_budget.reserved_bytes},
                        {"entries", host_budget.entries},
                        {"tiers", host_budget.tiers},
                        {"evictions", host_budget.evictions}};
    // Through the disk tier's public stats (the counters branch renders all stats anew).
    j["disk"] =
        disk.has_value() ? nlohmann::json::parse(disk->ToJson()) : nlohmann::json(nullptr);
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
  stats::PrometheusFields(out, "kvtier_cache", CacheCounterFields(*this), MetricKind::kCounter);
  stats::PrometheusFields(out, "kvtier_cache", CacheGaugeFields(*this), MetricKind::kGauge);
  out << "# TYPE kvtier_cache_hit_ratio gauge\n";
  out << "kvtier_cache_hit_ratio " << hit_ratio << "\n";
  stats::PrometheusHistogram(out, "kvtier_cache_load_latency_seconds", load_latency);
  stats::PrometheusHistogram(out, "kvtier_cache_store_latency_seconds", store_latency);
  stats::PrometheusFields(out, "kvtier_host", HostCounterFields(host), MetricKind::kCounter);
  stats::PrometheusFields(out, "kvtier_host", HostGaugeFields(*this), MetricKind::kGauge);
  if (disk.has_value()) out << disk->ToPrometheus();
  if (remote.has_value()) out << remote->ToPrometheus("kvtier_remote");
  return out.str();
}

}  // namespace kvtier
