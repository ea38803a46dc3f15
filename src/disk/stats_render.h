// Renders DiskTierStats as JSON (for --json and the Python bindings) and as
// Prometheus text exposition (for `kvtier stats --prometheus`).
//
// Thread safety: pure functions.
#ifndef KVTIER_DISK_STATS_RENDER_H_
#define KVTIER_DISK_STATS_RENDER_H_

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kvtier/stats.h"

namespace kvtier::disk {

nlohmann::json HistogramToJson(const LatencyHistogram& h);
nlohmann::json DiskStatsToJson(const DiskTierStats& s);
// Metric names are `<prefix>_<counter>`; counters end in `_total`.
std::string DiskStatsToPrometheus(const DiskTierStats& s, std::string_view prefix = "kvtier_disk");

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_STATS_RENDER_H_
