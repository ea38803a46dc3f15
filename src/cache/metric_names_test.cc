// The names kvtier exports, pinned: every JSON key and every Prometheus
// metric (with its TYPE) of CacheStats, HostTierStats and HostBudgetStats
// (inside CacheStats), DiskTierStats and RemoteTierStats, as they were
// before the stats tables (issue 19), plus the disk's allocated_bytes gauge
// (issue 25: space as the file system allocates it); each family's text is
// well formed, its HELP line right before its TYPE line (issue 35).
// Dashboards, alerts and scripts depend on these names; a change here is a
// change of the interface. Last, the tables themselves
// (kvtier/stats_table.h): each struct's JSON is its table, and each help
// text a line that stands alone.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cache/stats_test_util.h"
#include "kvtier/disk_tier.h"
#include "kvtier/host_tier.h"
#include "kvtier/remote_tier.h"
#include "kvtier/stats_table.h"
#include "kvtier/tiered_cache.h"
#include "testing/prometheus_text.h"

namespace kvtier {
namespace {

using stats_test::PopulatedCache;
using stats_test::PopulatedDisk;
using stats_test::PopulatedRemote;
using testing::WellFormedPrometheus;

// Key paths of a JSON object: "a", "a.b"; members of an array's objects as
// "a[].b".
void AddKeys(const nlohmann::json& j, const std::string& path, std::set<std::string>* out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out->insert(path + k);
      AddKeys(v, path + k + ".", out);
    }
  } else if (j.is_array()) {
    for (const nlohmann::json& e : j) AddKeys(e, path.substr(0, path.size() - 1) + "[].", out);
  }
}

std::set<std::string> JsonKeys(const std::string& text) {
  std::set<std::string> keys;
  AddKeys(nlohmann::json::parse(text), "", &keys);
  return keys;
}

// The expected key paths: `keys`, each histogram's own keys under its name,
// and every key under `prefix`. Without samples, histograms have no buckets
// and per-signature lists no entries: no "[]" paths.
enum class Samples { kSome, kNone };
std::set<std::string> Expected(const std::vector<std::string>& keys,
                               const std::vector<std::string>& histograms, Samples samples,
                               const std::string& prefix = "") {
  std::set<std::string> out;
  auto add = [&](const std::string& k) {
    if (samples == Samples::kNone && k.find("[]") != std::string::npos) return;
    out.insert(prefix + k);
  };
  for (const std::string& k : keys) add(k);
  for (const std::string& h : histograms) {
    for (const char* sub : {"count", "sum_us", "max_us", "p50_us", "p99_us", "buckets",
                            "buckets[].lt_us", "buckets[].count"}) {
      add(h + "." + sub);
    }
  }
  return out;
}

// The "# TYPE" lines of Prometheus text, in order, as "name type".
std::vector<std::string> PrometheusTypes(const std::string& text) {
  std::vector<std::string> types;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) types.push_back(line.substr(7));
  }
  return types;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Whitespace-separated words of `text`.
std::vector<std::string> Words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

// Non-empty lines of `text`.
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

// ---- The names, as main exported them before the tables (e7f8fb2) ----

// CacheStats::ToJson(), without "disk" and "remote" (HostTierStats is
// "host", HostBudgetStats "host_budget").
const std::vector<std::string> kCacheJsonKeys = Words(R"(
bytes_loaded_disk bytes_loaded_host bytes_loaded_remote bytes_promoted bytes_stored
bytes_written_back bytes_written_through close_dropped hit_ratio hits_disk hits_host hits_remote
host host.bytes host.dirty_bytes host.dirty_dropped host.dirty_entries host.dirty_evictions
host.entries host.erases host.evictions host.handoff_hits host.hits host.misses
host.put_failures host.puts host.rejections host.replacements host.reservation_failures
host.reservations host.reserved_bytes host.sink_errors host_budget host_budget.capacity_bytes
host_budget.entries host_budget.evictions host_budget.reserved_bytes host_budget.tiers
host_budget.used_bytes index_bytes index_disk_keys index_host_keys index_keys load_errors
load_latency loads_cancelled lookups match_blocks match_disk_probes match_remote_found
match_remote_probes matches misses preloads promotion_failures promotions read_buffer_free_bytes
read_buffer_fresh_bytes read_buffers read_buffers_prefaulted read_buffers_reused remote_lookups
remote_misses remote_promotions remote_puts_dropped remote_puts_queued reservation_failures
stale_disk_hints store_bypasses store_errors store_latency stores write_back_errors write_backs)");
const std::vector<std::string> kCacheHistograms = {"load_latency", "store_latency"};

// DiskTierStats::ToJson(), also CacheStats "disk".
const std::vector<std::string> kDiskJsonKeys = Words(R"(
allocated_bytes bytes bytes_read bytes_written compatible_bytes compatible_entries configured_max_bytes drops
effective_max_bytes entries errors evictions expired hits hits_pending incompatible_misses
inline_writes load_latency loads misses per_signature per_signature[].blocks
per_signature[].bytes per_signature[].compatible per_signature[].signature quarantine_files
quarantined queue_blocks queue_bytes read_only_skips reconcile_adopted reconcile_passes reconcile_rows_dropped
reconcile_running reconcile_temps_removed saves saves_deduplicated saves_persisted
unlink_failures write_latency)");
const std::vector<std::string> kDiskHistograms = {"load_latency", "write_latency"};

// RemoteTierStats::ToJson(), also CacheStats "remote".
const std::vector<std::string> kRemoteJsonKeys = Words(R"(
alloc_failures asked auth_failures bad_values bad_values_deleted breaker_opens
breaker_rejections bytes_read bytes_written connect_failures connections connects drops_closed
drops_error drops_oom drops_queue_full drops_unavailable erases error_replies exists_calls
exists_found exists_keys exists_late exists_latency get_latency hits io_errors lookups mac_failures misses
misses_unavailable moved nodes nodes_down protocol_errors puts puts_deduplicated queue_blocks
queue_bytes redirect_limit retries skipped_existing stored timeouts tls_failures too_small topology_failures
topology_refreshes write_latency)");
const std::vector<std::string> kRemoteHistograms = {"exists_latency", "get_latency",
                                                    "write_latency"};

// CacheStats::ToPrometheus() up to the disk tier: kvtier_cache_* and kvtier_host_*.
const std::vector<std::string> kCacheHostPrometheus = Lines(R"(
kvtier_cache_lookups_total counter
kvtier_cache_hits_host_total counter
kvtier_cache_hits_disk_total counter
kvtier_cache_hits_remote_total counter
kvtier_cache_misses_total counter
kvtier_cache_load_errors_total counter
kvtier_cache_loads_cancelled_total counter
kvtier_cache_matches_total counter
kvtier_cache_match_blocks_total counter
kvtier_cache_match_disk_probes_total counter
kvtier_cache_stale_disk_hints_total counter
kvtier_cache_match_remote_probes_total counter
kvtier_cache_match_remote_found_total counter
kvtier_cache_remote_lookups_total counter
kvtier_cache_remote_misses_total counter
kvtier_cache_stores_total counter
kvtier_cache_store_errors_total counter
kvtier_cache_store_bypasses_total counter
kvtier_cache_remote_puts_queued_total counter
kvtier_cache_remote_puts_dropped_total counter
kvtier_cache_bytes_stored_total counter
kvtier_cache_bytes_loaded_host_total counter
kvtier_cache_bytes_loaded_disk_total counter
kvtier_cache_bytes_loaded_remote_total counter
kvtier_cache_bytes_written_back_total counter
kvtier_cache_bytes_written_through_total counter
kvtier_cache_bytes_promoted_total counter
kvtier_cache_write_backs_total counter
kvtier_cache_write_back_errors_total counter
kvtier_cache_promotions_total counter
kvtier_cache_promotion_failures_total counter
kvtier_cache_remote_promotions_total counter
kvtier_cache_reservation_failures_total counter
kvtier_cache_preloads_total counter
kvtier_cache_close_dropped_total counter
kvtier_cache_read_buffers_total counter
kvtier_cache_read_buffers_reused_total counter
kvtier_cache_read_buffer_fresh_bytes_total counter
kvtier_cache_read_buffers_prefaulted_total counter
kvtier_cache_index_keys gauge
kvtier_cache_index_host_keys gauge
kvtier_cache_index_disk_keys gauge
kvtier_cache_index_bytes gauge
kvtier_cache_read_buffer_free_bytes gauge
kvtier_cache_hit_ratio gauge
kvtier_cache_load_latency_seconds histogram
kvtier_cache_store_latency_seconds histogram
kvtier_host_hits_total counter
kvtier_host_handoff_hits_total counter
kvtier_host_misses_total counter
kvtier_host_puts_total counter
kvtier_host_replacements_total counter
kvtier_host_rejections_total counter
kvtier_host_put_failures_total counter
kvtier_host_erases_total counter
kvtier_host_evictions_total counter
kvtier_host_dirty_evictions_total counter
kvtier_host_dirty_dropped_total counter
kvtier_host_sink_errors_total counter
kvtier_host_reservations_total counter
kvtier_host_reservation_failures_total counter
kvtier_host_entries gauge
kvtier_host_bytes gauge
kvtier_host_dirty_entries gauge
kvtier_host_dirty_bytes gauge
kvtier_host_reserved_bytes gauge
kvtier_host_budget_capacity_bytes gauge
kvtier_host_budget_used_bytes gauge
kvtier_host_budget_reserved_bytes gauge
kvtier_host_budget_entries gauge
kvtier_host_budget_tiers gauge
kvtier_host_budget_evictions gauge
)");

// DiskTierStats::ToPrometheus() (DiskStatsScope::kAll).
const std::vector<std::string> kDiskPrometheus = Lines(R"(
kvtier_disk_saves_total counter
kvtier_disk_saves_persisted_total counter
kvtier_disk_saves_deduplicated_total counter
kvtier_disk_loads_total counter
kvtier_disk_hits_total counter
kvtier_disk_hits_pending_total counter
kvtier_disk_misses_total counter
kvtier_disk_incompatible_misses_total counter
kvtier_disk_evictions_total counter
kvtier_disk_expired_total counter
kvtier_disk_unlink_failures_total counter
kvtier_disk_errors_total counter
kvtier_disk_inline_writes_total counter
kvtier_disk_drops_total counter
kvtier_disk_read_only_skips_total counter
kvtier_disk_quarantined_total counter
kvtier_disk_bytes_written_total counter
kvtier_disk_bytes_read_total counter
kvtier_disk_reconcile_passes_total counter
kvtier_disk_reconcile_adopted_total counter
kvtier_disk_reconcile_rows_dropped_total counter
kvtier_disk_reconcile_temps_removed_total counter
kvtier_disk_queue_bytes gauge
kvtier_disk_queue_blocks gauge
kvtier_disk_reconcile_running gauge
kvtier_disk_entries gauge
kvtier_disk_bytes gauge
kvtier_disk_allocated_bytes gauge
kvtier_disk_compatible_entries gauge
kvtier_disk_compatible_bytes gauge
kvtier_disk_configured_max_bytes gauge
kvtier_disk_effective_max_bytes gauge
kvtier_disk_quarantine_files gauge
kvtier_disk_load_latency_seconds histogram
kvtier_disk_write_latency_seconds histogram
kvtier_disk_signature_blocks gauge
kvtier_disk_signature_bytes gauge
)");

// DiskTierStats::ToPrometheus(DiskStatsScope::kFolderOnly), `kvtier stats --prometheus`.
const std::vector<std::string> kDiskFolderPrometheus = Lines(R"(
kvtier_disk_entries gauge
kvtier_disk_bytes gauge
kvtier_disk_allocated_bytes gauge
kvtier_disk_compatible_entries gauge
kvtier_disk_compatible_bytes gauge
kvtier_disk_quarantine_files gauge
kvtier_disk_signature_blocks gauge
kvtier_disk_signature_bytes gauge
)");

// RemoteTierStats::ToPrometheus().
const std::vector<std::string> kRemotePrometheus = Lines(R"(
kvtier_remote_exists_calls_total counter
kvtier_remote_exists_keys_total counter
kvtier_remote_exists_found_total counter
kvtier_remote_exists_late_total counter
kvtier_remote_lookups_total counter
kvtier_remote_hits_total counter
kvtier_remote_misses_total counter
kvtier_remote_misses_unavailable_total counter
kvtier_remote_bad_values_total counter
kvtier_remote_bad_values_deleted_total counter
kvtier_remote_mac_failures_total counter
kvtier_remote_too_small_total counter
kvtier_remote_alloc_failures_total counter
kvtier_remote_bytes_read_total counter
kvtier_remote_puts_total counter
kvtier_remote_puts_deduplicated_total counter
kvtier_remote_stored_total counter
kvtier_remote_skipped_existing_total counter
kvtier_remote_drops_queue_full_total counter
kvtier_remote_drops_unavailable_total counter
kvtier_remote_drops_oom_total counter
kvtier_remote_drops_error_total counter
kvtier_remote_drops_closed_total counter
kvtier_remote_bytes_written_total counter
kvtier_remote_erases_total counter
kvtier_remote_connects_total counter
kvtier_remote_connect_failures_total counter
kvtier_remote_auth_failures_total counter
kvtier_remote_tls_failures_total counter
kvtier_remote_timeouts_total counter
kvtier_remote_protocol_errors_total counter
kvtier_remote_io_errors_total counter
kvtier_remote_error_replies_total counter
kvtier_remote_moved_total counter
kvtier_remote_asked_total counter
kvtier_remote_retries_total counter
kvtier_remote_redirect_limit_total counter
kvtier_remote_topology_refreshes_total counter
kvtier_remote_topology_failures_total counter
kvtier_remote_breaker_opens_total counter
kvtier_remote_breaker_rejections_total counter
kvtier_remote_queue_bytes gauge
kvtier_remote_queue_blocks gauge
kvtier_remote_nodes gauge
kvtier_remote_nodes_down gauge
kvtier_remote_connections gauge
kvtier_remote_exists_latency_seconds histogram
kvtier_remote_get_latency_seconds histogram
kvtier_remote_write_latency_seconds histogram
)");

// ---- JSON ----

TEST(MetricNamesTest, CacheJsonKeys) {
  std::set<std::string> want = Expected(kCacheJsonKeys, kCacheHistograms, Samples::kSome);
  want.insert({"disk", "remote"});
  want.merge(Expected(kDiskJsonKeys, kDiskHistograms, Samples::kSome, "disk."));
  want.merge(Expected(kRemoteJsonKeys, kRemoteHistograms, Samples::kSome, "remote."));
  EXPECT_EQ(JsonKeys(PopulatedCache().ToJson()), want);

  // A host-only cache: "disk" and "remote" are null.
  std::set<std::string> bare = Expected(kCacheJsonKeys, kCacheHistograms, Samples::kNone);
  bare.insert({"disk", "remote"});
  EXPECT_EQ(JsonKeys(CacheStats{}.ToJson()), bare);
}

TEST(MetricNamesTest, DiskJsonKeys) {
  EXPECT_EQ(JsonKeys(PopulatedDisk().ToJson()),
            Expected(kDiskJsonKeys, kDiskHistograms, Samples::kSome));
  EXPECT_EQ(JsonKeys(DiskTierStats{}.ToJson()),
            Expected(kDiskJsonKeys, kDiskHistograms, Samples::kNone));
}

TEST(MetricNamesTest, RemoteJsonKeys) {
  EXPECT_EQ(JsonKeys(PopulatedRemote().ToJson()),
            Expected(kRemoteJsonKeys, kRemoteHistograms, Samples::kSome));
  EXPECT_EQ(JsonKeys(RemoteTierStats{}.ToJson()),
            Expected(kRemoteJsonKeys, kRemoteHistograms, Samples::kNone));
}

// ---- Prometheus ----

TEST(MetricNamesTest, CachePrometheusNames) {
  const std::string text = PopulatedCache().ToPrometheus();
  EXPECT_EQ(PrometheusTypes(text),
            Concat(Concat(kCacheHostPrometheus, kDiskPrometheus), kRemotePrometheus));
  EXPECT_TRUE(WellFormedPrometheus(text));
  const std::string bare = CacheStats{}.ToPrometheus();
  EXPECT_EQ(PrometheusTypes(bare), kCacheHostPrometheus);
  EXPECT_TRUE(WellFormedPrometheus(bare));
}

TEST(MetricNamesTest, DiskPrometheusNames) {
  const DiskTierStats s = PopulatedDisk();
  EXPECT_EQ(PrometheusTypes(s.ToPrometheus()), kDiskPrometheus);
  EXPECT_TRUE(WellFormedPrometheus(s.ToPrometheus()));
  const std::string folder = s.ToPrometheus("kvtier_disk", DiskStatsScope::kFolderOnly);
  EXPECT_EQ(PrometheusTypes(folder), kDiskFolderPrometheus);
  EXPECT_TRUE(WellFormedPrometheus(folder));
  // `kvtier stats --prometheus` without --layout: no compatible_* gauges.
  std::vector<std::string> unjudged = kDiskFolderPrometheus;
  std::erase_if(unjudged, [](const std::string& t) { return t.find("compatible") != t.npos; });
  const std::string text = s.ToPrometheus("kvtier_disk", DiskStatsScope::kFolderUnjudged);
  EXPECT_EQ(PrometheusTypes(text), unjudged);
  EXPECT_TRUE(WellFormedPrometheus(text));
}

TEST(MetricNamesTest, RemotePrometheusNames) {
  const std::string text = PopulatedRemote().ToPrometheus();
  EXPECT_EQ(PrometheusTypes(text), kRemotePrometheus);
  EXPECT_TRUE(WellFormedPrometheus(text));
}

// ---- The tables (kvtier/stats_table.h) ----

// The entries of a stats struct's table; each has a help text and a name of
// its own.
template <typename Stats>
std::set<std::string> TableEntries(const Stats& s) {
  std::set<std::string> names;
  s.ForEachMetric([&](const MetricInfo& m, const auto&) {
    // Prometheus prints it as the metric's HELP: one line that stands alone.
    EXPECT_FALSE(m.help.empty()) << m.name;
    EXPECT_FALSE(m.help.starts_with("...")) << m.name << ": " << m.help;
    EXPECT_EQ(m.help.find('\n'), std::string_view::npos) << m.name;
    EXPECT_TRUE(names.insert(std::string(m.name)).second) << m.name << " is in the table twice";
  });
  return names;
}

// The members of a JSON object, nested ones not followed.
std::set<std::string> Members(const nlohmann::json& j) {
  std::set<std::string> names;
  for (const auto& [k, v] : j.items()) names.insert(k);
  return names;
}

// The JSON of each struct is its table, plus what the table does not hold.
TEST(StatsTableTest, TheJsonIsTheTable) {
  const nlohmann::json cache = nlohmann::json::parse(PopulatedCache().ToJson());
  std::set<std::string> want = TableEntries(CacheStats{});
  want.insert({"host", "host_budget", "disk", "remote"});
  EXPECT_EQ(Members(cache), want);
  EXPECT_EQ(Members(cache["host"]), TableEntries(HostTierStats{}));
  EXPECT_EQ(Members(cache["host_budget"]), TableEntries(HostBudgetStats{}));

  want = TableEntries(DiskTierStats{});
  want.insert("per_signature");
  EXPECT_EQ(Members(nlohmann::json::parse(PopulatedDisk().ToJson())), want);
  EXPECT_EQ(Members(nlohmann::json::parse(PopulatedRemote().ToJson())),
            TableEntries(RemoteTierStats{}));
}

// ForEachMetric hands each entry over with its field's value.
TEST(StatsTableTest, ForEachMetricGivesTheFields) {
  const DiskTierStats s = PopulatedDisk();
  int seen = 0;
  s.ForEachMetric([&](const MetricInfo& m, const auto& value) {
    using T = std::decay_t<decltype(value)>;
    if (m.name == "saves") {
      EXPECT_EQ(m.kind, MetricKind::kCounter);
      if constexpr (std::is_same_v<T, uint64_t>) {
        EXPECT_EQ(value, s.saves);
        ++seen;
      }
    } else if (m.name == "reconcile_running") {
      EXPECT_EQ(m.kind, MetricKind::kFlag);
      EXPECT_TRUE((std::is_same_v<T, bool>));
      ++seen;
    } else if (m.name == "write_latency") {
      EXPECT_EQ(m.kind, MetricKind::kHistogram);
      if constexpr (std::is_same_v<T, LatencyHistogram>) {
        EXPECT_EQ(value.Count(), s.write_latency.Count());
        ++seen;
      }
    }
  });
  EXPECT_EQ(seen, 3);
  const CacheStats c = PopulatedCache();
  bool ratio = false;
  c.ForEachMetric([&](const MetricInfo& m, const auto& value) {
    if constexpr (std::is_same_v<std::decay_t<decltype(value)>, double>) {
      EXPECT_EQ(m.name, "hit_ratio");
      EXPECT_EQ(m.kind, MetricKind::kRatio);
      EXPECT_EQ(value, c.hit_ratio);
      ratio = true;
    }
  });
  EXPECT_TRUE(ratio);
}

}  // namespace
}  // namespace kvtier
