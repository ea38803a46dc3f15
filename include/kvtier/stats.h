// Statistics types shared by the tiers: a lock-free latency histogram and
// each tier's stats snapshot.
//
// LatencyHistogram records microsecond samples into power-of-two buckets;
// Record() is wait-free and may be called from many threads at once.
// Copying one takes a snapshot (each bucket is read atomically; the copy as a
// whole is not one instant). The stats structs are plain values returned by
// the tiers' Stats() calls; src/disk/stats_render.h prints them as JSON and
// Prometheus text.
#ifndef KVTIER_STATS_H_
#define KVTIER_STATS_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace kvtier {

class LatencyHistogram {
 public:
  // Bucket 0 holds samples of 0 µs; bucket i (1 ≤ i < kBuckets−1) holds
  // samples in [2^(i−1), 2^i) µs; the last bucket holds everything larger.
  static constexpr int kBuckets = 40;

  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram& other);
  LatencyHistogram& operator=(const LatencyHistogram& other);

  void Record(uint64_t micros);
  // Adds another histogram's samples to this one.
  void Merge(const LatencyHistogram& other);

  uint64_t Count() const;
  uint64_t SumMicros() const;
  uint64_t MaxMicros() const;
  // Samples in bucket i.
  uint64_t BucketCount(int i) const;
  // The exclusive upper bound of bucket i in µs (UINT64_MAX for the last).
  static uint64_t BucketUpperMicros(int i);
  // An upper bound of the p-th percentile (p in [0, 100]): the upper bound of
  // the bucket holding it, capped at the largest sample. 0 if empty.
  uint64_t PercentileMicros(double p) const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_{0};
  std::atomic<uint64_t> max_{0};
};

// Blocks and bytes of one layout signature in a shared cache folder.
struct SignatureUsage {
  std::string signature;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  bool compatible = false;  // equal to the reading tier's own signature
};

// A snapshot of a DiskTier. Counters count events in this process since the
// tier opened; gauges describe the shared folder as its index records it.
struct DiskTierStats {
  // Counters (this process, since Open).
  uint64_t saves = 0;                // Store() calls accepted (queued or written inline)
  uint64_t saves_persisted = 0;      // blocks renamed into place and indexed
  uint64_t saves_deduplicated = 0;   // stores skipped: already queued or on disk
  uint64_t loads = 0;                // Load() lookups (LoadMany counts each key)
  uint64_t hits = 0;                 // loads served verified bytes
  uint64_t hits_pending = 0;         // ... of which from the pending-write buffer
  uint64_t misses = 0;               // loads that served nothing (any reason)
  uint64_t incompatible_misses = 0;  // ... because the block has another signature
  uint64_t evictions = 0;            // block files removed to respect the limit
  uint64_t expired = 0;              // block files removed by retention
  uint64_t unlink_failures = 0;      // evictions whose unlink failed (row kept)
  uint64_t errors = 0;               // failed writes, index calls, renames
  uint64_t inline_writes = 0;        // stores written on the caller's thread (queue full)
  uint64_t drops = 0;                // stores dropped under OnPressure::kDrop
  uint64_t quarantined = 0;          // files moved to quarantine/ (bad, foreign)
  uint64_t bytes_written = 0;        // block bytes persisted
  uint64_t bytes_read = 0;           // block bytes served
  uint64_t reconcile_passes = 0;     // completed reconcile passes
  uint64_t reconcile_adopted = 0;    // files with no row that got a row
  uint64_t reconcile_rows_dropped = 0;   // rows whose file was gone
  uint64_t reconcile_temps_removed = 0;  // temp files of dead writers removed
  LatencyHistogram load_latency;     // Load() of a hit, µs
  LatencyHistogram write_latency;    // one block's write + rename + commit, µs

  // Gauges.
  uint64_t queue_bytes = 0;   // bytes of blocks queued or being written
  uint64_t queue_blocks = 0;  // blocks queued or being written
  bool reconcile_running = false;
  uint64_t entries = 0;       // indexed block files, all signatures
  uint64_t bytes = 0;         // their bytes
  uint64_t compatible_entries = 0;  // ... of this tier's signature
  uint64_t compatible_bytes = 0;
  uint64_t configured_max_bytes = 0;  // DiskTierOptions::max_bytes (0 = none)
  uint64_t effective_max_bytes = 0;   // the limit in force now
  uint64_t quarantine_files = 0;      // files in quarantine/
  std::vector<SignatureUsage> per_signature;  // sorted by signature
};

}  // namespace kvtier

#endif  // KVTIER_STATS_H_
