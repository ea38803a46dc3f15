// The live side of a stats table (kvtier/stats_table.h): the atomic
// counters a tier's threads update, declared from the same X-macro list as
// the stats struct they are copied into.
//
//   struct DiskCounters {
//     KVTIER_DISK_COUNTERS(KVTIER_STATS_ATOMIC)  // std::atomic<uint64_t> saves{}; ...
//   };
//   #define COPY(name, kind, help) stats::CopyOut(counters.name, &out->name);
//
// Only counters and histograms have a live form; a gauge in such a list
// does not compile (gauges are read from the tier's state when asked).
//
// Thread safety: relaxed atomics and wait-free histograms; a copy reads
// each one atomically, not all at one instant.
#ifndef KVTIER_CORE_STATS_COUNTERS_H_
#define KVTIER_CORE_STATS_COUNTERS_H_

#include <atomic>
#include <cstdint>

#include "kvtier/latency_histogram.h"
#include "kvtier/stats_table.h"

namespace kvtier::stats {

template <MetricKind K>
struct AtomicOf;
template <>
struct AtomicOf<MetricKind::kCounter> {
  using Type = std::atomic<uint64_t>;
};
template <>
struct AtomicOf<MetricKind::kHistogram> {
  using Type = LatencyHistogram;
};

inline void CopyOut(const std::atomic<uint64_t>& from, uint64_t* to) {
  *to = from.load(std::memory_order_relaxed);
}
inline void CopyOut(const LatencyHistogram& from, LatencyHistogram* to) { *to = from; }

}  // namespace kvtier::stats

// An entry of a counters-and-histograms list as its live member, zeroed.
#define KVTIER_STATS_ATOMIC(name, kind, help) \
  ::kvtier::stats::AtomicOf<::kvtier::MetricKind::kind>::Type name{};

#endif  // KVTIER_CORE_STATS_COUNTERS_H_
