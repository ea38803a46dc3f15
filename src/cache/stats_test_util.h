// Stats structs with every field set to its own value, for the tests that pin
// the JSON and Prometheus output of every tier (metric_names_test.cc,
// stats_output_test.cc). Each field is set by name here, not through the
// stats tables, so the tests do not lean on the code they check.
#ifndef KVTIER_CACHE_STATS_TEST_UTIL_H_
#define KVTIER_CACHE_STATS_TEST_UTIL_H_

#include <cstdint>

#include "kvtier/disk_tier.h"
#include "kvtier/host_tier.h"
#include "kvtier/latency_histogram.h"
#include "kvtier/remote_tier.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::stats_test {

// A few samples spread over several buckets, all derived from `base`.
inline LatencyHistogram Samples(uint64_t base) {
  LatencyHistogram h;
  h.Record(0);
  h.Record(base);
  h.Record(base * 3 + 1);
  h.Record(base * 1000);
  return h;
}

// Values base, base + 1, ... in field order.
inline DiskTierStats PopulatedDisk(uint64_t base = 1000) {
  DiskTierStats s;
  uint64_t v = base;
  s.saves = v++;
  s.saves_persisted = v++;
  s.saves_deduplicated = v++;
  s.loads = v++;
  s.hits = v++;
  s.hits_pending = v++;
  s.misses = v++;
  s.incompatible_misses = v++;
  s.evictions = v++;
  s.expired = v++;
  s.unlink_failures = v++;
  s.errors = v++;
  s.inline_writes = v++;
  s.drops = v++;
  s.quarantined = v++;
  s.bytes_written = v++;
  s.bytes_read = v++;
  s.reconcile_passes = v++;
  s.reconcile_adopted = v++;
  s.reconcile_rows_dropped = v++;
  s.reconcile_temps_removed = v++;
  s.load_latency = Samples(7);
  s.write_latency = Samples(11);
  s.queue_bytes = v++;
  s.queue_blocks = v++;
  s.reconcile_running = true;
  s.entries = v++;
  s.bytes = v++;
  s.compatible_entries = v++;
  s.compatible_bytes = v++;
  s.configured_max_bytes = v++;
  s.effective_max_bytes = v++;
  s.quarantine_files = v++;
  // A label that needs escaping, and one of another signature.
  s.per_signature.push_back({"sig\"a\\b\nc", v, v + 1, true});
  s.per_signature.push_back({"other", v + 2, v + 3, false});
  return s;
}

inline RemoteTierStats PopulatedRemote(uint64_t base = 2000) {
  RemoteTierStats s;
  uint64_t v = base;
  s.exists_calls = v++;
  s.exists_keys = v++;
  s.exists_found = v++;
  s.lookups = v++;
  s.hits = v++;
  s.misses = v++;
  s.misses_unavailable = v++;
  s.bad_values = v++;
  s.bad_values_deleted = v++;
  s.too_small = v++;
  s.alloc_failures = v++;
  s.bytes_read = v++;
  s.puts = v++;
  s.puts_deduplicated = v++;
  s.stored = v++;
  s.skipped_existing = v++;
  s.drops_queue_full = v++;
  s.drops_unavailable = v++;
  s.drops_oom = v++;
  s.drops_error = v++;
  s.drops_closed = v++;
  s.bytes_written = v++;
  s.erases = v++;
  s.connects = v++;
  s.connect_failures = v++;
  s.auth_failures = v++;
  s.timeouts = v++;
  s.protocol_errors = v++;
  s.io_errors = v++;
  s.error_replies = v++;
  s.moved = v++;
  s.asked = v++;
  s.retries = v++;
  s.redirect_limit = v++;
  s.topology_refreshes = v++;
  s.topology_failures = v++;
  s.breaker_opens = v++;
  s.breaker_rejections = v++;
  s.exists_latency = Samples(13);
  s.get_latency = Samples(17);
  s.write_latency = Samples(19);
  s.queue_bytes = v++;
  s.queue_blocks = v++;
  s.nodes = v++;
  s.nodes_down = v++;
  s.connections = v++;
  return s;
}

inline HostTierStats PopulatedHost(uint64_t base = 3000) {
  HostTierStats s;
  uint64_t v = base;
  s.entries = v++;
  s.bytes = v++;
  s.dirty_entries = v++;
  s.dirty_bytes = v++;
  s.reserved_bytes = v++;
  s.hits = v++;
  s.handoff_hits = v++;
  s.misses = v++;
  s.puts = v++;
  s.replacements = v++;
  s.rejections = v++;
  s.put_failures = v++;
  s.erases = v++;
  s.evictions = v++;
  s.dirty_evictions = v++;
  s.dirty_dropped = v++;
  s.sink_errors = v++;
  s.reservations = v++;
  s.reservation_failures = v++;
  return s;
}

inline HostBudgetStats PopulatedBudget(uint64_t base = 4000) {
  HostBudgetStats s;
  uint64_t v = base;
  s.capacity_bytes = v++;
  s.used_bytes = v++;
  s.reserved_bytes = v++;
  s.entries = v++;
  s.tiers = v++;
  s.evictions = v++;
  s.ghost_hits = v++;  // not exported: the outputs must not show it
  return s;
}

// Every tier present.
inline CacheStats PopulatedCache(uint64_t base = 5000) {
  CacheStats s;
  uint64_t v = base;
  s.lookups = v++;
  s.hits_host = v++;
  s.hits_disk = v++;
  s.hits_remote = v++;
  s.misses = v++;
  s.hit_ratio = 0.3125;
  s.load_errors = v++;
  s.loads_cancelled = v++;
  s.matches = v++;
  s.match_blocks = v++;
  s.match_disk_probes = v++;
  s.stale_disk_hints = v++;
  s.match_remote_probes = v++;
  s.match_remote_found = v++;
  s.remote_lookups = v++;
  s.remote_misses = v++;
  s.stores = v++;
  s.store_errors = v++;
  s.store_bypasses = v++;
  s.remote_puts_queued = v++;
  s.remote_puts_dropped = v++;
  s.bytes_stored = v++;
  s.bytes_loaded_host = v++;
  s.bytes_loaded_disk = v++;
  s.bytes_loaded_remote = v++;
  s.bytes_written_back = v++;
  s.bytes_written_through = v++;
  s.bytes_promoted = v++;
  s.write_backs = v++;
  s.write_back_errors = v++;
  s.promotions = v++;
  s.promotion_failures = v++;
  s.remote_promotions = v++;
  s.reservation_failures = v++;
  s.preloads = v++;
  s.close_dropped = v++;
  s.read_buffers = v++;
  s.read_buffers_reused = v++;
  s.read_buffer_fresh_bytes = v++;
  s.read_buffers_prefaulted = v++;
  s.read_buffer_free_bytes = v++;
  s.load_latency = Samples(23);
  s.store_latency = Samples(29);
  s.index_keys = v++;
  s.index_host_keys = v++;
  s.index_disk_keys = v++;
  s.index_bytes = v++;
  s.host = PopulatedHost();
  s.host_budget = PopulatedBudget();
  s.disk = PopulatedDisk();
  s.remote = PopulatedRemote();
  return s;
}

}  // namespace kvtier::stats_test

#endif  // KVTIER_CACHE_STATS_TEST_UTIL_H_
