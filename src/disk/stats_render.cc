#include "disk/stats_render.h"

#include <sstream>
#include <utility>
#include <vector>

namespace kvtier::disk {
namespace {

using Field = std::pair<const char*, uint64_t>;

std::vector<Field> Counters(const DiskTierStats& s) {
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

std::vector<Field> Gauges(const DiskTierStats& s) {
  return {{"queue_bytes", s.queue_bytes},
          {"queue_blocks", s.queue_blocks},
          {"reconcile_running", s.reconcile_running ? 1u : 0u},
          {"entries", s.entries},
          {"bytes", s.bytes},
          {"compatible_entries", s.compatible_entries},
          {"compatible_bytes", s.compatible_bytes},
          {"configured_max_bytes", s.configured_max_bytes},
          {"effective_max_bytes", s.effective_max_bytes},
          {"quarantine_files", s.quarantine_files}};
}

// Escapes a Prometheus label value.
std::string Label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

void Histogram(std::ostringstream& out, const std::string& name, const LatencyHistogram& h) {
  out << "# TYPE " << name << " histogram\n";
  uint64_t cumulative = 0;
  for (int i = 0; i < LatencyHistogram::kBuckets - 1; ++i) {
    cumulative += h.BucketCount(i);
    // Buckets are integer µs, so "< 2^i µs" is "<= (2^i − 1) µs".
    double le = static_cast<double>(LatencyHistogram::BucketUpperMicros(i) - 1) / 1e6;
    out << name << "_bucket{le=\"" << le << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << h.Count() << "\n";
  out << name << "_sum " << static_cast<double>(h.SumMicros()) / 1e6 << "\n";
  out << name << "_count " << h.Count() << "\n";
}

}  // namespace

nlohmann::json HistogramToJson(const LatencyHistogram& h) {
  nlohmann::json buckets = nlohmann::json::array();
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) {
    if (h.BucketCount(i) == 0) continue;
    uint64_t upper = LatencyHistogram::BucketUpperMicros(i);
    buckets.push_back({{"lt_us", upper == UINT64_MAX ? nlohmann::json(nullptr)
                                                     : nlohmann::json(upper)},
                       {"count", h.BucketCount(i)}});
  }
  return {{"count", h.Count()},
          {"sum_us", h.SumMicros()},
          {"max_us", h.MaxMicros()},
          {"p50_us", h.PercentileMicros(50)},
          {"p99_us", h.PercentileMicros(99)},
          {"buckets", buckets}};
}

nlohmann::json DiskStatsToJson(const DiskTierStats& s) {
  nlohmann::json j;
  for (const auto& [name, v] : Counters(s)) j[name] = v;
  for (const auto& [name, v] : Gauges(s)) j[name] = v;
  j["reconcile_running"] = s.reconcile_running;
  j["load_latency"] = HistogramToJson(s.load_latency);
  j["write_latency"] = HistogramToJson(s.write_latency);
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

std::string DiskStatsToPrometheus(const DiskTierStats& s, std::string_view prefix) {
  std::ostringstream out;
  const std::string p(prefix);
  for (const auto& [name, v] : Counters(s)) {
    out << "# TYPE " << p << "_" << name << "_total counter\n";
    out << p << "_" << name << "_total " << v << "\n";
  }
  for (const auto& [name, v] : Gauges(s)) {
    out << "# TYPE " << p << "_" << name << " gauge\n";
    out << p << "_" << name << " " << v << "\n";
  }
  Histogram(out, p + "_load_latency_seconds", s.load_latency);
  Histogram(out, p + "_write_latency_seconds", s.write_latency);
  out << "# TYPE " << p << "_signature_blocks gauge\n";
  for (const SignatureUsage& u : s.per_signature) {
    out << p << "_signature_blocks{signature=\"" << Label(u.signature) << "\",compatible=\""
        << (u.compatible ? "true" : "false") << "\"} " << u.blocks << "\n";
  }
  out << "# TYPE " << p << "_signature_bytes gauge\n";
  for (const SignatureUsage& u : s.per_signature) {
    out << p << "_signature_bytes{signature=\"" << Label(u.signature) << "\",compatible=\""
        << (u.compatible ? "true" : "false") << "\"} " << u.bytes << "\n";
  }
  return out.str();
}

}  // namespace kvtier::disk
