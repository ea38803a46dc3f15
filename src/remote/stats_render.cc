// RemoteTierStats::ToJson() and ToPrometheus().
#include "core/stats_render.h"

#include <sstream>
#include <utility>
#include <vector>

#include "kvtier/remote_tier.h"

namespace kvtier {
namespace {

using stats::Field;

std::vector<Field> Counters(const RemoteTierStats& s) {
  return {{"exists_calls", s.exists_calls},
          {"exists_keys", s.exists_keys},
          {"exists_found", s.exists_found},
          {"lookups", s.lookups},
          {"hits", s.hits},
          {"misses", s.misses},
          {"misses_unavailable", s.misses_unavailable},
          {"bad_values", s.bad_values},
          {"bad_values_deleted", s.bad_values_deleted},
          {"too_small", s.too_small},
          {"alloc_failures", s.alloc_failures},
          {"bytes_read", s.bytes_read},
          {"puts", s.puts},
          {"puts_deduplicated", s.puts_deduplicated},
          {"stored", s.stored},
          {"skipped_existing", s.skipped_existing},
          {"drops_queue_full", s.drops_queue_full},
          {"drops_unavailable", s.drops_unavailable},
          {"drops_oom", s.drops_oom},
          {"drops_error", s.drops_error},
          {"drops_closed", s.drops_closed},
          {"bytes_written", s.bytes_written},
          {"erases", s.erases},
          {"connects", s.connects},
          {"connect_failures", s.connect_failures},
          {"auth_failures", s.auth_failures},
          {"timeouts", s.timeouts},
          {"protocol_errors", s.protocol_errors},
          {"io_errors", s.io_errors},
          {"error_replies", s.error_replies},
          {"moved", s.moved},
          {"asked", s.asked},
          {"retries", s.retries},
          {"redirect_limit", s.redirect_limit},
          {"topology_refreshes", s.topology_refreshes},
          {"topology_failures", s.topology_failures},
          {"breaker_opens", s.breaker_opens},
          {"breaker_rejections", s.breaker_rejections}};
}

std::vector<Field> Gauges(const RemoteTierStats& s) {
  return {{"queue_bytes", s.queue_bytes},
          {"queue_blocks", s.queue_blocks},
          {"nodes", s.nodes},
          {"nodes_down", s.nodes_down},
          {"connections", s.connections}};
}

}  // namespace

std::string RemoteTierStats::ToJson() const {
  try {
    nlohmann::json j;
    for (const auto& [name, v] : Counters(*this)) j[name] = v;
    for (const auto& [name, v] : Gauges(*this)) j[name] = v;
    j["exists_latency"] = stats::HistogramToJson(exists_latency);
    j["get_latency"] = stats::HistogramToJson(get_latency);
    j["write_latency"] = stats::HistogramToJson(write_latency);
    return j.dump();
  } catch (const std::exception&) {
    // Only a failed allocation can get here; keep the API exception-free.
    return "{\"error\":\"stats rendering failed\"}";
  }
}

std::string RemoteTierStats::ToPrometheus(std::string_view prefix) const {
  try {
    std::ostringstream out;
    const std::string p(prefix);
    stats::PrometheusFields(out, p, Counters(*this), stats::MetricKind::kCounter);
    stats::PrometheusFields(out, p, Gauges(*this), stats::MetricKind::kGauge);
    stats::PrometheusHistogram(out, p + "_exists_latency_seconds", exists_latency);
    stats::PrometheusHistogram(out, p + "_get_latency_seconds", get_latency);
    stats::PrometheusHistogram(out, p + "_write_latency_seconds", write_latency);
    return out.str();
  } catch (const std::exception&) {
    return "# stats rendering failed\n";
  }
}

}  // namespace kvtier
