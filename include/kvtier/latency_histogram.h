// LatencyHistogram: a lock-free histogram of microsecond samples, used by
// every tier's stats.
//
// Record() is wait-free and may be called from many threads at once. Copying
// a histogram takes a snapshot (each bucket is read atomically; the copy as a
// whole is not one instant).
#ifndef KVTIER_LATENCY_HISTOGRAM_H_
#define KVTIER_LATENCY_HISTOGRAM_H_

#include <array>
#include <atomic>
#include <cstdint>

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

}  // namespace kvtier

#endif  // KVTIER_LATENCY_HISTOGRAM_H_
