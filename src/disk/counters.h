// DiskCounters: the event counters of one DiskTier, shared by its parts
// (writers, capacity, reconcile) and copied into DiskTierStats.
//
// Thread safety: relaxed atomics; safe from any thread.
#ifndef KVTIER_DISK_COUNTERS_H_
#define KVTIER_DISK_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "kvtier/disk_tier.h"
#include "kvtier/latency_histogram.h"

namespace kvtier::disk {

struct DiskCounters {
  using Counter = std::atomic<uint64_t>;
  Counter saves{0};
  Counter saves_persisted{0};
  Counter saves_deduplicated{0};
  Counter loads{0};
  Counter hits{0};
  Counter hits_pending{0};
  Counter misses{0};
  Counter incompatible_misses{0};
  Counter evictions{0};
  Counter expired{0};
  Counter unlink_failures{0};
  Counter errors{0};
  Counter inline_writes{0};
  Counter drops{0};
  Counter quarantined{0};
  Counter bytes_written{0};
  Counter bytes_read{0};
  Counter reconcile_passes{0};
  Counter reconcile_adopted{0};
  Counter reconcile_rows_dropped{0};
  Counter reconcile_temps_removed{0};
  LatencyHistogram load_latency;
  LatencyHistogram write_latency;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
  static uint64_t Get(const Counter& c) { return c.load(std::memory_order_relaxed); }

  // Copies every counter into `out` (gauges are left alone).
  void CopyTo(DiskTierStats* out) const;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_COUNTERS_H_
