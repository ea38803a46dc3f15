// Stats tables: each tier declares its metrics once, as an X-macro list of
// X(name, kind, help) entries in its public header (KVTIER_DISK_STATS in
// disk_tier.h, KVTIER_HOST_STATS in host_tier.h, ...). The stats struct's
// fields, the tier's atomic counters, its JSON and its Prometheus text all
// follow from that list; docs/tiers.md lists the tables.
//
// A stats struct declares its fields with KVTIER_STATS_FIELD and gets
// ForEachMetric() from KVTIER_STATS_FOR_EACH, which calls
// `fn(const MetricInfo&, const T& value)` for each entry in table order, T
// being MetricType<kind>; an exporter of its own (OpenTelemetry, statsd)
// can walk the metrics that way.
//
// Thread safety: types and macros only.
#ifndef KVTIER_STATS_TABLE_H_
#define KVTIER_STATS_TABLE_H_

#include <cstdint>
#include <string_view>

#include "kvtier/latency_histogram.h"

namespace kvtier {

// What a metric is: its field's type, and how JSON and Prometheus show it.
enum class MetricKind : uint8_t {
  kCounter,    // uint64_t events since the tier opened; Prometheus `<prefix>_<name>_total`
  kGauge,      // uint64_t state at the time of the call; Prometheus `<prefix>_<name>`
  kFlag,       // bool gauge: JSON true/false, Prometheus 1/0
  kRatio,      // double gauge
  kHistogram,  // LatencyHistogram of µs: JSON object, Prometheus `<prefix>_<name>_seconds`
};

template <MetricKind K>
struct MetricTypeOf;
template <>
struct MetricTypeOf<MetricKind::kCounter> {
  using Type = uint64_t;
};
template <>
struct MetricTypeOf<MetricKind::kGauge> {
  using Type = uint64_t;
};
template <>
struct MetricTypeOf<MetricKind::kFlag> {
  using Type = bool;
};
template <>
struct MetricTypeOf<MetricKind::kRatio> {
  using Type = double;
};
template <>
struct MetricTypeOf<MetricKind::kHistogram> {
  using Type = LatencyHistogram;
};

// The field type of a metric of kind K.
template <MetricKind K>
using MetricType = typename MetricTypeOf<K>::Type;

// One table entry, as ForEachMetric() reports it.
struct MetricInfo {
  std::string_view name;  // the field's name, also its JSON key
  MetricKind kind;
  // What it counts, with its unit: one line that stands alone (Prometheus
  // prints it as the metric's `# HELP`), lower case, no final period. A
  // histogram's says what is timed and leaves the unit out: JSON gives
  // microseconds (`sum_us`), Prometheus seconds (its HELP adds ", in
  // seconds").
  std::string_view help;
};

}  // namespace kvtier

// An entry as a struct field, zero-initialised:
// X(saves, kCounter, "...") declares `uint64_t saves{};`.
#define KVTIER_STATS_FIELD(name, kind, help) \
  ::kvtier::MetricType<::kvtier::MetricKind::kind> name{};

// Declares `template <typename Fn> void ForEachMetric(Fn&& fn) const`,
// calling fn(MetricInfo, value) for each entry of TABLE, in TABLE's order.
#define KVTIER_STATS_FOR_EACH(TABLE)  \
  template <typename Fn>              \
  void ForEachMetric(Fn&& fn) const { \
    TABLE(KVTIER_STATS_VISIT_)        \
  }
#define KVTIER_STATS_VISIT_(name, kind, help) \
  fn(::kvtier::MetricInfo{#name, ::kvtier::MetricKind::kind, help}, name);

#endif  // KVTIER_STATS_TABLE_H_
