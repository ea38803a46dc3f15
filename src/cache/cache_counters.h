// CacheCounters: the event counters and latencies behind CacheStats
// (KVTIER_CACHE_COUNTERS), updated lock-free from any thread.
//
// Thread safety: every member is atomic (LatencyHistogram is wait-free);
// CopyTo reads each one atomically, not all at one instant.
#ifndef KVTIER_CACHE_CACHE_COUNTERS_H_
#define KVTIER_CACHE_CACHE_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "core/stats_counters.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

struct CacheCounters {
  using Counter = std::atomic<uint64_t>;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

  KVTIER_CACHE_COUNTERS(KVTIER_STATS_ATOMIC)

  // Copies every counter and histogram into `s`, and the hit ratio they give.
  void CopyTo(CacheStats* s) const {
#define KVTIER_COPY_OUT(name, kind, help) stats::CopyOut(name, &s->name);
    KVTIER_CACHE_COUNTERS(KVTIER_COPY_OUT)
#undef KVTIER_COPY_OUT
    const uint64_t hits = s->hits_host + s->hits_disk + s->hits_remote;
    s->hit_ratio = s->lookups > 0 ? static_cast<double>(hits) / static_cast<double>(s->lookups) : 0;
  }
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_CACHE_COUNTERS_H_
