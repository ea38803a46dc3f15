// Rendering shared by every tier's stats: a stats table (kvtier/stats_table.h)
// as JSON members and as Prometheus text exposition, histograms included.
// Each tier's ToJson / ToPrometheus is these calls plus what its table does
// not hold (the disk tier's per-signature gauges).
//
// Thread safety: pure functions.
#ifndef KVTIER_CORE_STATS_RENDER_H_
#define KVTIER_CORE_STATS_RENDER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>

#include "kvtier/latency_histogram.h"
#include "kvtier/stats_table.h"

namespace kvtier::stats {

// {"count","sum_us","max_us","p50_us","p99_us","buckets":[{"lt_us","count"}...]}
// (non-empty buckets only; the last bucket's "lt_us" is null).
nlohmann::json HistogramToJson(const LatencyHistogram& h);

inline nlohmann::json JsonValue(uint64_t v) { return v; }
inline nlohmann::json JsonValue(bool v) { return v; }
inline nlohmann::json JsonValue(double v) { return v; }
inline nlohmann::json JsonValue(const LatencyHistogram& h) { return HistogramToJson(h); }

// Sets j[name] for each metric of `s` (a struct with ForEachMetric): numbers,
// flags as booleans, histograms as HistogramToJson.
template <typename Stats>
void AddJson(const Stats& s, nlohmann::json* j) {
  s.ForEachMetric([j](const MetricInfo& m, const auto& value) {
    (*j)[std::string(m.name)] = JsonValue(value);
  });
}

// One metric as `<prefix>_<name>`: its `# HELP` line (m.help), its `# TYPE`
// line and sample(s). Counters get the `_total` suffix; flags print 1 or 0;
// histograms are PrometheusHistogram(`<prefix>_<name>_seconds`), their help
// followed by ", in seconds".
void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      uint64_t value);
void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      bool value);
void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      double value);
void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      const LatencyHistogram& value);

// Every metric of `s` for which keep(MetricInfo) holds, grouped: counters,
// then gauges (flags and ratios among them), then histograms, each group in
// table order.
template <typename Stats, typename Keep>
void AddPrometheus(const Stats& s, std::string_view prefix, std::ostringstream& out, Keep keep) {
  auto group = [](MetricKind k) {
    return k == MetricKind::kCounter ? 0 : k == MetricKind::kHistogram ? 2 : 1;
  };
  for (int g = 0; g < 3; ++g) {
    s.ForEachMetric([&](const MetricInfo& m, const auto& value) {
      if (group(m.kind) == g && keep(m)) PrometheusMetric(out, prefix, m, value);
    });
  }
}

template <typename Stats>
void AddPrometheus(const Stats& s, std::string_view prefix, std::ostringstream& out) {
  AddPrometheus(s, prefix, out, [](const MetricInfo&) { return true; });
}

// A Prometheus histogram `name` in seconds: PrometheusFamily(name,
// "histogram", help), cumulative `_bucket{le=...}` lines, `_sum` and
// `_count`. `help` says what is timed and that it is in seconds.
void PrometheusHistogram(std::ostringstream& out, std::string_view name, const LatencyHistogram& h,
                         std::string_view help);

// The two lines that open a metric family, `# HELP <name> <help>` (help as
// PrometheusHelp escapes it) and `# TYPE <name> <type>`, type being
// "counter", "gauge" or "histogram". Every family kvtier prints opens with
// them; a family written by hand (the disk tier's per-signature gauges)
// calls this, then writes its samples.
void PrometheusFamily(std::ostringstream& out, std::string_view name, std::string_view type,
                      std::string_view help);

// Escapes the text of a `# HELP` line (text format 0.0.4): backslash as
// `\\`, newline as `\n`; nothing else changes.
std::string PrometheusHelp(std::string_view text);

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PrometheusLabel(std::string_view value);

}  // namespace kvtier::stats

#endif  // KVTIER_CORE_STATS_RENDER_H_
