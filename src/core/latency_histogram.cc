#include <algorithm>
#include <bit>
#include <cmath>

#include "kvtier/latency_histogram.h"

namespace kvtier {

LatencyHistogram::LatencyHistogram(const LatencyHistogram& other) { *this = other; }

LatencyHistogram& LatencyHistogram::operator=(const LatencyHistogram& other) {
  if (this == &other) return *this;
  for (int i = 0; i < kBuckets; ++i) {
    buckets_[i].store(other.buckets_[i].load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  count_.store(other.count_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  sum_.store(other.sum_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  max_.store(other.max_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  return *this;
}

static int BucketOf(uint64_t micros) {
  // 0 → 0; [2^(i-1), 2^i) → i.
  int i = micros == 0 ? 0 : static_cast<int>(std::bit_width(micros));
  return std::min(i, LatencyHistogram::kBuckets - 1);
}

void LatencyHistogram::Record(uint64_t micros) {
  buckets_[BucketOf(micros)].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(micros, std::memory_order_relaxed);
  uint64_t prev = max_.load(std::memory_order_relaxed);
  while (micros > prev && !max_.compare_exchange_weak(prev, micros, std::memory_order_relaxed)) {
  }
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) {
    buckets_[i].fetch_add(other.buckets_[i].load(std::memory_order_relaxed),
                          std::memory_order_relaxed);
  }
  count_.fetch_add(other.Count(), std::memory_order_relaxed);
  sum_.fetch_add(other.SumMicros(), std::memory_order_relaxed);
  uint64_t m = other.MaxMicros();
  uint64_t prev = max_.load(std::memory_order_relaxed);
  while (m > prev && !max_.compare_exchange_weak(prev, m, std::memory_order_relaxed)) {
  }
}

uint64_t LatencyHistogram::Count() const { return count_.load(std::memory_order_relaxed); }
uint64_t LatencyHistogram::SumMicros() const { return sum_.load(std::memory_order_relaxed); }
uint64_t LatencyHistogram::MaxMicros() const { return max_.load(std::memory_order_relaxed); }

uint64_t LatencyHistogram::BucketCount(int i) const {
  if (i < 0 || i >= kBuckets) return 0;
  return buckets_[i].load(std::memory_order_relaxed);
}

uint64_t LatencyHistogram::BucketUpperMicros(int i) {
  if (i <= 0) return 1;
  if (i >= kBuckets - 1) return UINT64_MAX;
  return uint64_t{1} << i;
}

uint64_t LatencyHistogram::PercentileMicros(double p) const {
  uint64_t total = 0;
  std::array<uint64_t, kBuckets> counts;
  for (int i = 0; i < kBuckets; ++i) {
    counts[i] = buckets_[i].load(std::memory_order_relaxed);
    total += counts[i];
  }
  if (total == 0) return 0;
  p = std::clamp(p, 0.0, 100.0);
  uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(total)));
  rank = std::max<uint64_t>(rank, 1);
  uint64_t seen = 0;
  uint64_t max = MaxMicros();
  for (int i = 0; i < kBuckets; ++i) {
    seen += counts[i];
    if (seen >= rank) {
      if (i == 0) return 0;
      return std::min(BucketUpperMicros(i) - 1, max);
    }
  }
  return max;
}

}  // namespace kvtier
