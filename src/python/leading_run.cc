#include "python/leading_run.h"

#include <algorithm>

namespace kvtier::python {

LeadingRun::LeadingRun(size_t keys, size_t group)
    : keys_(keys), group_(std::max<size_t>(group, 1)), held_(keys), landed_(keys, 0) {
  first_miss_ = (keys_ + group_ - 1) / group_;  // no miss: past the last group
}

std::vector<std::pair<size_t, SharedBlock>> LeadingRun::Land(size_t i, SharedBlock block) {
  std::vector<std::pair<size_t, SharedBlock>> due;
  std::lock_guard<std::mutex> lock(mu_);
  if (i >= keys_ || landed_[i] != 0) return due;
  landed_[i] = 1;
  const size_t g = i / group_;
  if (block == nullptr) {
    first_miss_ = std::min(first_miss_, g);
  } else if (g < first_miss_) {
    held_[i] = std::move(block);
  }
  while (next_group_ < first_miss_) {
    const size_t begin = next_group_ * group_;
    const size_t end = std::min(keys_, begin + group_);
    if (!std::all_of(landed_.begin() + begin, landed_.begin() + end,
                     [](char c) { return c != 0; })) {
      break;
    }
    for (size_t j = begin; j < end; ++j) due.emplace_back(j, std::move(held_[j]));
    ++next_group_;
  }
  return due;
}

}  // namespace kvtier::python
