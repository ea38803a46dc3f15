// The Prometheus half of core/stats_render.h: every family it writes opens
// with `# HELP` (the table's help, escaped) and then `# TYPE`, byte for byte.
#include "core/stats_render.h"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "kvtier/latency_histogram.h"
#include "kvtier/stats_table.h"
#include "testing/prometheus_text.h"

namespace kvtier {
namespace {

using testing::WellFormedPrometheus;

// A small table with one entry of each kind, the help of one needing escapes.
#define KVTIER_RENDER_TEST_STATS(X)                   \
  X(gets, kCounter, "Get calls, a \\ and a\nnewline") \
  X(histo, kHistogram, "time of one Get")             \
  X(items, kGauge, "items held")                      \
  X(busy, kFlag, "1 while busy, else 0")              \
  X(ratio, kRatio, "hits / gets; 0 with no gets")

struct RenderTestStats {
  KVTIER_RENDER_TEST_STATS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_RENDER_TEST_STATS)
};

std::string RenderOne(const MetricInfo& m, uint64_t value) {
  std::ostringstream out;
  stats::PrometheusMetric(out, "kvtier_t", m, value);
  return out.str();
}

TEST(StatsRenderTest, HelpEscapesBackslashAndNewlineOnly) {
  EXPECT_EQ(stats::PrometheusHelp("a \\ b\nc \"d\" {e}"), "a \\\\ b\\nc \"d\" {e}");
  EXPECT_EQ(stats::PrometheusHelp(""), "");
  // A label value escapes the double quote too.
  EXPECT_EQ(stats::PrometheusLabel("a \\ b\nc \"d\""), "a \\\\ b\\nc \\\"d\\\"");
}

TEST(StatsRenderTest, FamilyIsHelpThenType) {
  std::ostringstream out;
  stats::PrometheusFamily(out, "kvtier_t_x", "gauge", "two\nlines \\ here");
  EXPECT_EQ(out.str(), "# HELP kvtier_t_x two\\nlines \\\\ here\n# TYPE kvtier_t_x gauge\n");
}

TEST(StatsRenderTest, EachKindCarriesItsHelp) {
  EXPECT_EQ(RenderOne({"gets", MetricKind::kCounter, "Get calls"}, 7),
            "# HELP kvtier_t_gets_total Get calls\n"
            "# TYPE kvtier_t_gets_total counter\n"
            "kvtier_t_gets_total 7\n");
  EXPECT_EQ(RenderOne({"items", MetricKind::kGauge, "items\nheld"}, 3),
            "# HELP kvtier_t_items items\\nheld\n"
            "# TYPE kvtier_t_items gauge\n"
            "kvtier_t_items 3\n");

  std::ostringstream flag;
  stats::PrometheusMetric(flag, "kvtier_t", {"busy", MetricKind::kFlag, "1 while busy"}, true);
  EXPECT_EQ(flag.str(),
            "# HELP kvtier_t_busy 1 while busy\n# TYPE kvtier_t_busy gauge\nkvtier_t_busy 1\n");

  std::ostringstream ratio;
  stats::PrometheusMetric(ratio, "kvtier_t", {"ratio", MetricKind::kRatio, "a / b"}, 0.25);
  EXPECT_EQ(ratio.str(),
            "# HELP kvtier_t_ratio a / b\n# TYPE kvtier_t_ratio gauge\nkvtier_t_ratio 0.25\n");

  // A histogram: HELP once for the family, in seconds.
  LatencyHistogram h;
  h.Record(3);
  std::ostringstream hist;
  stats::PrometheusMetric(hist, "kvtier_t", {"lat", MetricKind::kHistogram, "time of one call"}, h);
  const std::string text = hist.str();
  EXPECT_EQ(text.rfind("# HELP kvtier_t_lat_seconds time of one call, in seconds\n"
                       "# TYPE kvtier_t_lat_seconds histogram\n"
                       "kvtier_t_lat_seconds_bucket{le=\"0\"} 0\n",
                       0),
            0u)
      << text;
  EXPECT_EQ(text.find("# HELP", 1), std::string::npos) << text;
  EXPECT_TRUE(text.ends_with("kvtier_t_lat_seconds_sum 3e-06\nkvtier_t_lat_seconds_count 1\n"))
      << text;
  EXPECT_TRUE(WellFormedPrometheus(text));
}

// A whole table: counters, gauges, histograms, each family with its HELP.
TEST(StatsRenderTest, AddPrometheusGivesEveryFamilyItsHelp) {
  RenderTestStats s;
  s.gets = 5;
  s.items = 2;
  s.busy = false;
  s.ratio = 0.5;
  s.histo.Record(1);
  std::ostringstream out;
  stats::AddPrometheus(s, "kvtier_t", out);
  const std::string text = out.str();
  EXPECT_TRUE(WellFormedPrometheus(text));
  const std::string head =
      "# HELP kvtier_t_gets_total Get calls, a \\\\ and a\\nnewline\n"
      "# TYPE kvtier_t_gets_total counter\n"
      "kvtier_t_gets_total 5\n"
      "# HELP kvtier_t_items items held\n"
      "# TYPE kvtier_t_items gauge\n"
      "kvtier_t_items 2\n"
      "# HELP kvtier_t_busy 1 while busy, else 0\n"
      "# TYPE kvtier_t_busy gauge\n"
      "kvtier_t_busy 0\n"
      "# HELP kvtier_t_ratio hits / gets; 0 with no gets\n"
      "# TYPE kvtier_t_ratio gauge\n"
      "kvtier_t_ratio 0.5\n"
      "# HELP kvtier_t_histo_seconds time of one Get, in seconds\n"
      "# TYPE kvtier_t_histo_seconds histogram\n";
  EXPECT_EQ(text.substr(0, head.size()), head);
}

#undef KVTIER_RENDER_TEST_STATS

}  // namespace
}  // namespace kvtier
