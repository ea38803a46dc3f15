#include "disk/range_plan.h"

#include <algorithm>
#include <numeric>

namespace kvtier::disk {

uint64_t RangeBytes(std::span<const BlockFileRange> ranges) {
  uint64_t n = 0;
  for (const BlockFileRange& r : ranges) n += r.end - r.begin;
  return n;
}

std::vector<BlockFileRange> CoalesceRanges(std::span<const BlockFileRange> ranges,
                                           uint64_t max_gap_bytes, uint64_t gap_budget_bytes) {
  if (ranges.size() < 2) return {ranges.begin(), ranges.end()};
  // gap[i]: between ranges[i] and ranges[i + 1].
  const size_t gaps = ranges.size() - 1;
  std::vector<size_t> order(gaps);
  std::iota(order.begin(), order.end(), size_t{0});
  auto gap = [&](size_t i) { return ranges[i + 1].begin - ranges[i].end; };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return gap(a) < gap(b); });
  std::vector<bool> join(gaps, false);
  uint64_t spent = 0;
  for (size_t i : order) {
    const uint64_t g = gap(i);
    if (g > max_gap_bytes || g > gap_budget_bytes - spent) break;  // sorted: no later one fits
    spent += g;
    join[i] = true;
  }
  std::vector<BlockFileRange> out;
  out.push_back(ranges[0]);
  for (size_t i = 0; i < gaps; ++i) {
    if (join[i]) {
      out.back().end = ranges[i + 1].end;
    } else {
      out.push_back(ranges[i + 1]);
    }
  }
  return out;
}

uint64_t BytesOutside(std::span<const BlockFileRange> a, std::span<const BlockFileRange> b) {
  uint64_t out = 0;
  size_t j = 0;
  for (const BlockFileRange& r : a) {
    uint64_t at = r.begin;
    while (at < r.end) {
      while (j < b.size() && b[j].end <= at) ++j;
      if (j == b.size() || b[j].begin >= r.end) {
        out += r.end - at;
        break;
      }
      if (b[j].begin > at) out += b[j].begin - at;
      at = b[j].end;
    }
  }
  return out;
}

std::optional<ReadPlanMemo::Plan> ReadPlanMemo::Find(const TensorMask& mask) const {
  MutexLock lock(&mu_);
  auto it = plans_.find(mask);
  if (it == plans_.end()) return std::nullopt;
  return it->second;
}

void ReadPlanMemo::Remember(const TensorMask& mask, Plan plan) {
  MutexLock lock(&mu_);
  auto it = plans_.find(mask);
  if (it != plans_.end()) {
    it->second = std::move(plan);
    return;
  }
  if (plans_.size() >= kMaxMasks) plans_.clear();
  plans_.emplace(mask, std::move(plan));
}

}  // namespace kvtier::disk
