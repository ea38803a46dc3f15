// DiskCounters: the event counters and latencies of one DiskTier
// (KVTIER_DISK_COUNTERS), shared by its parts (writers, capacity, reconcile)
// and copied into DiskTierStats; with them the tier's events (DiskEvents).
//
// Thread safety: relaxed atomics; safe from any thread.
#ifndef KVTIER_DISK_COUNTERS_H_
#define KVTIER_DISK_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "core/stats_counters.h"
#include "disk/disk_events.h"
#include "kvtier/disk_tier.h"

namespace kvtier::disk {

struct DiskCounters {
  using Counter = std::atomic<uint64_t>;
  KVTIER_DISK_COUNTERS(KVTIER_STATS_ATOMIC)
  // The events an operator must see (DESIGN.md §7), sent besides the
  // counters they bump, and the causes of failed writes.
  DiskEvents events;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
  static uint64_t Get(const Counter& c) { return c.load(std::memory_order_relaxed); }

  // Copies every counter and histogram into `out` (gauges are left alone).
  void CopyTo(DiskTierStats* out) const;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_COUNTERS_H_
