// CacheCounters: the event counters behind CacheStats, updated lock-free
// from any thread.
//
// Thread safety: every member is atomic (LatencyHistogram is wait-free);
// CopyTo reads each one atomically, not all at one instant.
#ifndef KVTIER_CACHE_CACHE_COUNTERS_H_
#define KVTIER_CACHE_CACHE_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "kvtier/latency_histogram.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

struct CacheCounters {
  using Counter = std::atomic<uint64_t>;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

  Counter lookups{0}, hits_host{0}, hits_disk{0}, hits_remote{0}, misses{0}, load_errors{0};
  Counter loads_cancelled{0};
  Counter matches{0}, match_blocks{0}, match_disk_probes{0}, stale_disk_hints{0};
  Counter match_remote_probes{0}, match_remote_found{0}, remote_lookups{0}, remote_misses{0};
  Counter stores{0}, store_errors{0}, store_bypasses{0};
  Counter remote_puts_queued{0}, remote_puts_dropped{0};
  Counter bytes_stored{0}, bytes_loaded_host{0}, bytes_loaded_disk{0}, bytes_loaded_remote{0};
  Counter bytes_written_back{0}, bytes_written_through{0}, bytes_promoted{0};
  Counter write_backs{0}, write_back_errors{0}, promotions{0}, promotion_failures{0};
  Counter remote_promotions{0};
  Counter reservation_failures{0}, preloads{0}, close_dropped{0};
  LatencyHistogram load_latency;
  LatencyHistogram store_latency;

  void CopyTo(CacheStats* s) const {
    auto get = [](const Counter& c) { return c.load(std::memory_order_relaxed); };
    s->lookups = get(lookups);
    s->hits_host = get(hits_host);
    s->hits_disk = get(hits_disk);
    s->hits_remote = get(hits_remote);
    s->misses = get(misses);
    s->load_errors = get(load_errors);
    s->loads_cancelled = get(loads_cancelled);
    s->matches = get(matches);
    s->match_blocks = get(match_blocks);
    s->match_disk_probes = get(match_disk_probes);
    s->stale_disk_hints = get(stale_disk_hints);
    s->match_remote_probes = get(match_remote_probes);
    s->match_remote_found = get(match_remote_found);
    s->remote_lookups = get(remote_lookups);
    s->remote_misses = get(remote_misses);
    s->stores = get(stores);
    s->store_errors = get(store_errors);
    s->store_bypasses = get(store_bypasses);
    s->remote_puts_queued = get(remote_puts_queued);
    s->remote_puts_dropped = get(remote_puts_dropped);
    s->bytes_stored = get(bytes_stored);
    s->bytes_loaded_host = get(bytes_loaded_host);
    s->bytes_loaded_disk = get(bytes_loaded_disk);
    s->bytes_loaded_remote = get(bytes_loaded_remote);
    s->bytes_written_back = get(bytes_written_back);
    s->bytes_written_through = get(bytes_written_through);
    s->bytes_promoted = get(bytes_promoted);
    s->write_backs = get(write_backs);
    s->write_back_errors = get(write_back_errors);
    s->promotions = get(promotions);
    s->promotion_failures = get(promotion_failures);
    s->remote_promotions = get(remote_promotions);
    s->reservation_failures = get(reservation_failures);
    s->preloads = get(preloads);
    s->close_dropped = get(close_dropped);
    s->load_latency = load_latency;
    s->store_latency = store_latency;
    const uint64_t hits = s->hits_host + s->hits_disk + s->hits_remote;
    s->hit_ratio = s->lookups > 0 ? static_cast<double>(hits) / static_cast<double>(s->lookups) : 0;
  }
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_CACHE_COUNTERS_H_
