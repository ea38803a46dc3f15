// CoalesceRanges: the preads of a partial read (BlockReader::ReadTensors).
//
// SelectedTensorRanges already makes one range of neighbouring tensors. This
// also joins two ranges with a small gap between them: on a disk, one read
// that carries a few unwanted bytes costs less than a second request (its
// seek or its round trip through the device queue). The unwanted bytes stay
// bounded twice: a gap is joined only if it is at most `max_gap_bytes`, and
// all joined gaps together are at most `gap_budget_bytes`, so a reader that
// passes a budget of `selected / 32` never reads more than 1/32 beyond what
// it needs. Within the budget the smallest gaps are joined first (they buy
// the most requests per byte).
//
// ReadPlanMemo: what the last partial read of each mask read (its header's
// length and its ranges). The blocks of a layout have headers of one length
// and tensors at the same offsets, so the next block's read can ask the
// device for its header and its tensors at once, before the header says
// where they are: one round trip per block instead of two. A guess only:
// the reader still plans from the header it reads, and counts what it
// asked for in vain.
//
// CoalesceRanges and the other functions are of their inputs only.
// Thread safety: ReadPlanMemo may be used from any number of threads at once
// (one mutex guards its map).
#ifndef KVTIER_DISK_RANGE_PLAN_H_
#define KVTIER_DISK_RANGE_PLAN_H_

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_file.h"

namespace kvtier::disk {

// The budget of joined gaps CoalesceRanges gets from a partial read: 1/32 of
// the bytes it selects.
inline constexpr uint64_t kGapBudgetDivisor = 32;
// The largest gap worth reading through: about what a request costs on an
// SSD at its sequential rate (tens of microseconds).
inline constexpr uint64_t kMaxGapBytes = uint64_t{64} << 10;

// `ranges`: disjoint, in file order (as SelectedTensorRanges gives them).
// Returns them with the chosen gaps joined, still in file order.
std::vector<BlockFileRange> CoalesceRanges(std::span<const BlockFileRange> ranges,
                                           uint64_t max_gap_bytes, uint64_t gap_budget_bytes);

// The bytes `ranges` cover.
uint64_t RangeBytes(std::span<const BlockFileRange> ranges);

// The bytes of `a` that no range of `b` covers (both disjoint, in file
// order): what a prefetch of `a` read that the reads of `b` did not use.
uint64_t BytesOutside(std::span<const BlockFileRange> a, std::span<const BlockFileRange> b);

class ReadPlanMemo {
 public:
  // Masks remembered at most; one more empties the memo (a layout has a few:
  // one per pattern of layers a restore needs).
  static constexpr size_t kMaxMasks = 64;

  struct Plan {
    uint64_t header_bytes = 0;  // 8 + N
    std::vector<BlockFileRange> ranges;
  };
  std::optional<Plan> Find(const TensorMask& mask) const;
  void Remember(const TensorMask& mask, Plan plan);

 private:
  mutable Mutex mu_;
  std::map<TensorMask, Plan> plans_ GUARDED_BY(mu_);
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_RANGE_PLAN_H_
