// RemoteCounters: the event counters and latencies of one RemoteTier
// (KVTIER_REMOTE_COUNTERS), shared by its parts (connections, pools,
// breakers, handlers, writers) and copied into RemoteTierStats; with them
// the tier's events (RemoteEvents).
//
// Thread safety: relaxed atomics; safe from any thread.
#ifndef KVTIER_REMOTE_COUNTERS_H_
#define KVTIER_REMOTE_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "core/stats_counters.h"
#include "remote/remote_events.h"
#include "kvtier/remote_tier.h"

namespace kvtier::remote {

struct RemoteCounters {
  using Counter = std::atomic<uint64_t>;
  KVTIER_REMOTE_COUNTERS(KVTIER_STATS_ATOMIC)
  // The events an operator must see (DESIGN.md §7), sent besides the
  // counters they bump.
  RemoteEvents events;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
  static uint64_t Get(const Counter& c) { return c.load(std::memory_order_relaxed); }

  // Copies every counter and histogram into `out` (gauges are left alone).
  void CopyTo(RemoteTierStats* out) const;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_COUNTERS_H_
