#include "core/stats_render.h"

namespace kvtier::stats {

nlohmann::json HistogramToJson(const LatencyHistogram& h) {
  nlohmann::json buckets = nlohmann::json::array();
  for (int i = 0; i < LatencyHistogram::kBuckets; ++i) {
    if (h.BucketCount(i) == 0) continue;
    const uint64_t upper = LatencyHistogram::BucketUpperMicros(i);
    buckets.push_back(
        {{"lt_us", upper == UINT64_MAX ? nlohmann::json(nullptr) : nlohmann::json(upper)},
         {"count", h.BucketCount(i)}});
  }
  return {{"count", h.Count()},
          {"sum_us", h.SumMicros()},
          {"max_us", h.MaxMicros()},
          {"p50_us", h.PercentileMicros(50)},
          {"p99_us", h.PercentileMicros(99)},
          {"buckets", buckets}};
}

namespace {

// `<prefix>_<name>` plus `suffix`.
std::string MetricName(std::string_view prefix, std::string_view name, std::string_view suffix) {
  std::string metric(prefix);
  metric += '_';
  metric += name;
  metric += suffix;
  return metric;
}

// Backslash as `\\`, newline as `\n`, and in a label value `"` as `\"`.
enum class Quote : uint8_t { kKeep, kEscape };
std::string Escape(std::string_view text, Quote quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\' || (c == '"' && quote == Quote::kEscape)) {
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

template <typename T>
void PrometheusSample(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      const T& value) {
  const bool counter = m.kind == MetricKind::kCounter;
  const std::string metric = MetricName(prefix, m.name, counter ? "_total" : "");
  PrometheusFamily(out, metric, counter ? "counter" : "gauge", m.help);
  out << metric << " " << value << "\n";
}

}  // namespace

void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      uint64_t value) {
  PrometheusSample(out, prefix, m, value);
}

void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      bool value) {
  PrometheusSample(out, prefix, m, value ? 1u : 0u);
}

void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      double value) {
  PrometheusSample(out, prefix, m, value);
}

void PrometheusMetric(std::ostringstream& out, std::string_view prefix, const MetricInfo& m,
                      const LatencyHistogram& value) {
  PrometheusHistogram(out, MetricName(prefix, m.name, "_seconds"), value,
                      std::string(m.help) + ", in seconds");
}

void PrometheusHistogram(std::ostringstream& out, std::string_view name, const LatencyHistogram& h,
                         std::string_view help) {
  PrometheusFamily(out, name, "histogram", help);
  uint64_t cumulative = 0;
  for (int i = 0; i < LatencyHistogram::kBuckets - 1; ++i) {
    cumulative += h.BucketCount(i);
    // Samples are whole µs: "< 2^i µs" is "<= (2^i − 1) µs".
    const double le = static_cast<double>(LatencyHistogram::BucketUpperMicros(i) - 1) / 1e6;
    out << name << "_bucket{le=\"" << le << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << h.Count() << "\n";
  out << name << "_sum " << static_cast<double>(h.SumMicros()) / 1e6 << "\n";
  out << name << "_count " << h.Count() << "\n";
}

void PrometheusFamily(std::ostringstream& out, std::string_view name, std::string_view type,
                      std::string_view help) {
  out << "# HELP " << name << " " << PrometheusHelp(help) << "\n";
  out << "# TYPE " << name << " " << type << "\n";
}

std::string PrometheusHelp(std::string_view text) { return Escape(text, Quote::kKeep); }

std::string PrometheusLabel(std::string_view value) { return Escape(value, Quote::kEscape); }

}  // namespace kvtier::stats
