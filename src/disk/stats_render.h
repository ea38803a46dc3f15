// DiskTierStats as JSON (for --json, CacheStats::ToJson and the bindings) and
// as Prometheus text (DiskTierStats::ToPrometheus, `kvtier stats
// --prometheus`). The generic pieces live in core/stats_render.h.
//
// Thread safety: pure functions.
#ifndef KVTIER_DISK_STATS_RENDER_H_
#define KVTIER_DISK_STATS_RENDER_H_

#include <nlohmann/json.hpp>

#include "kvtier/disk_tier.h"

namespace kvtier::disk {

// The object DiskTierStats::ToJson() prints, for embedding in a larger one.
nlohmann::json DiskStatsToJson(const DiskTierStats& s);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_STATS_RENDER_H_
