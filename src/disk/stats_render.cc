#include "disk/stats_render.h"

#include <sstream>
#include <utility>
#include <vector>

#include "core/stats_render.h"

namespace kvtier::disk {

using stats::Field;

static std::vector<Field> Counters(const DiskTierStats& s) {
  return {{"saves", s.saves},
          {"saves_persisted", s.saves_persisted},
          {"saves_deduplicated", s.saves_deduplicated},
          {"loads", s.loads},
          {"hits", s.hits},
          {"hits_pending", s.hits_pending},
          {"misses", s.misses},
          {"incompatible_misses", s.incompatible_misses},
          {"evictions", s.evictions},
          {"expired", s.expired},
          {"unlink_failures", s.unlink_failures},
          {"errors", s.errors},
          {"inline_writes", s.inline_writes},
          {"drops", s.drops},
          {"quarantined", s.quarantined},
          {"bytes_written", s.bytes_written},
          {"bytes_read", s.bytes_read},
          {"reconcile_passes", s.reconcile_passes},
          {"reconcile_adopted", s.reconcile_adopted},
          {"reconcile_rows_dropped", s.reconcile_rows_dropped},
          {"reconcile_temps_removed", s.reconcile_temps_removed}};
}

static std::vector<Field> Gauges(const DiskTierStats& s) {
  return {{"queue_bytes", s.queue_bytes},
          {"queue_blocks", s.queue_blocks},
          {"reconcile_running", s.reconcile_running ? 1u : 0u},
          {"entries", s.entries},
          {"bytes", s.bytes},
          {"allocated_bytes", s.allocated_bytes},
          {"compatible_entries", s.compatible_entries},
          {"compatible_bytes", s.compatible_bytes},
          {"configured_max_bytes", s.configured_max_bytes},
          {"effective_max_bytes", s.effective_max_bytes},
          {"quarantine_files", s.quarantine_files}};
}

nlohmann::json DiskStatsToJson(const DiskTierStats& s) {
  nlohmann::json j;
  for (const auto& [name, v] : Counters(s)) j[name] = v;
  for (const auto& [name, v] : Gauges(s)) j[name] = v;
  j["reconcile_running"] = s.reconcile_running;
  j["load_latency"] = stats::HistogramToJson(s.load_latency);
  j["write_latency"] = stats::HistogramToJson(s.write_latency);
  nlohmann::json per = nlohmann::json::array();
  for (const SignatureUsage& u : s.per_signature) {
    per.push_back({{"signature", u.signature},
                   {"blocks", u.blocks},
                   {"bytes", u.bytes},
                   {"compatible", u.compatible}});
  }
  j["per_signature"] = per;
  return j;
}

}  // namespace kvtier::disk

namespace kvtier {

std::string DiskTierStats::ToJson() const {
  try {
    return disk::DiskStatsToJson(*this).dump();
  } catch (const std::exception&) {
    // Only a failed allocation can get here; keep the API exception-free.
    return "{\"error\":\"stats rendering failed\"}";
  }
}

std::string DiskTierStats::ToPrometheus(std::string_view prefix, DiskStatsScope scope) const {
  const DiskTierStats& s = *this;
  std::ostringstream out;
  const std::string p(prefix);
  const bool all = scope == DiskStatsScope::kAll;
  if (all) stats::PrometheusFields(out, p, disk::Counters(s), stats::MetricKind::kCounter);
  for (const auto& [name, v] : disk::Gauges(s)) {
    if (!all &&
        (std::string_view(name) == "queue_bytes" || std::string_view(name) == "queue_blocks" ||
         std::string_view(name) == "reconcile_running" ||
         std::string_view(name) == "effective_max_bytes" ||
         std::string_view(name) == "configured_max_bytes")) {
      continue;  // properties of a running tier, not of the folder
    }
    out << "# TYPE " << p << "_" << name << " gauge\n";
    out << p << "_" << name << " " << v << "\n";
  }
  if (all) {
    stats::PrometheusHistogram(out, p + "_load_latency_seconds", s.load_latency);
    stats::PrometheusHistogram(out, p + "_write_latency_seconds", s.write_latency);
  }
  out << "# TYPE " << p << "_signature_blocks gauge\n";
  for (const SignatureUsage& u : s.per_signature) {
    out << p << "_signature_blocks{signature=\"" << stats::PrometheusLabel(u.signature)
        << "\",compatible=\"" << (u.compatible ? "true" : "false") << "\"} " << u.blocks << "\n";
  }
  out << "# TYPE " << p << "_signature_bytes gauge\n";
  for (const SignatureUsage& u : s.per_signature) {
    out << p << "_signature_bytes{signature=\"" << stats::PrometheusLabel(u.signature)
        << "\",compatible=\"" << (u.compatible ? "true" : "false") << "\"} " << u.bytes << "\n";
  }
  return out.str();
}

}  // namespace kvtier
