// Rendering helpers shared by every tier's stats: histograms as JSON, and
// counters, gauges and histograms as Prometheus text exposition.
//
// Thread safety: pure functions.
#ifndef KVTIER_CORE_STATS_RENDER_H_
#define KVTIER_CORE_STATS_RENDER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvtier/latency_histogram.h"

namespace kvtier::stats {

// A named value of a stats struct.
using Field = std::pair<const char*, uint64_t>;

// {"count","sum_us","max_us","p50_us","p99_us","buckets":[{"lt_us","count"}...]}
// (non-empty buckets only; the last bucket's "lt_us" is null).
nlohmann::json HistogramToJson(const LatencyHistogram& h);

enum class MetricKind { kCounter, kGauge };

// `# TYPE` line and value of each field as `<prefix>_<name>`; counters get
// the `_total` suffix.
void PrometheusFields(std::ostringstream& out, std::string_view prefix,
                      const std::vector<Field>& fields, MetricKind kind);

// A Prometheus histogram `name` in seconds: cumulative `_bucket{le=...}`
// lines, `_sum` and `_count`.
void PrometheusHistogram(std::ostringstream& out, std::string_view name, const LatencyHistogram& h);

// Escapes a Prometheus label value (backslash, double quote, newline).
std::string PrometheusLabel(std::string_view value);

}  // namespace kvtier::stats

#endif  // KVTIER_CORE_STATS_RENDER_H_
