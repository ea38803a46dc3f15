// RemoteCounters: the event counters of one RemoteTier, shared by its parts
// (connections, pools, breakers, handlers, writers) and copied into
// RemoteTierStats.
//
// Thread safety: relaxed atomics; safe from any thread.
#ifndef KVTIER_REMOTE_COUNTERS_H_
#define KVTIER_REMOTE_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "kvtier/latency_histogram.h"
#include "kvtier/remote_tier.h"

namespace kvtier::remote {

struct RemoteCounters {
  using Counter = std::atomic<uint64_t>;
  Counter exists_calls{0};
  Counter exists_keys{0};
  Counter exists_found{0};
  Counter lookups{0};
  Counter hits{0};
  Counter misses{0};
  Counter misses_unavailable{0};
  Counter bad_values{0};
  Counter bad_values_deleted{0};
  Counter too_small{0};
  Counter alloc_failures{0};
  Counter bytes_read{0};
  Counter puts{0};
  Counter puts_deduplicated{0};
  Counter stored{0};
  Counter skipped_existing{0};
  Counter drops_queue_full{0};
  Counter drops_unavailable{0};
  Counter drops_oom{0};
  Counter drops_error{0};
  Counter drops_closed{0};
  Counter bytes_written{0};
  Counter erases{0};
  Counter connects{0};
  Counter connect_failures{0};
  Counter auth_failures{0};
  Counter timeouts{0};
  Counter protocol_errors{0};
  Counter io_errors{0};
  Counter error_replies{0};
  Counter moved{0};
  Counter asked{0};
  Counter retries{0};
  Counter redirect_limit{0};
  Counter topology_refreshes{0};
  Counter topology_failures{0};
  Counter breaker_opens{0};
  Counter breaker_rejections{0};
  LatencyHistogram exists_latency;
  LatencyHistogram get_latency;
  LatencyHistogram write_latency;

  static void Add(Counter& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
  static uint64_t Get(const Counter& c) { return c.load(std::memory_order_relaxed); }

  // Copies every counter and histogram into `out` (gauges are left alone).
  void CopyTo(RemoteTierStats* out) const;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_COUNTERS_H_
