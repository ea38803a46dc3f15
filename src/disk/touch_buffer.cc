#include "disk/touch_buffer.h"

#include <algorithm>

namespace kvtier::disk {

size_t TouchBuffer::Touch(const BlockKey& key, int64_t unix_us) {
  MutexLock lock(&mu_);
  auto [it, inserted] = times_.try_emplace(key, unix_us);
  if (!inserted) it->second = std::max(it->second, unix_us);
  return times_.size();
}

void TouchBuffer::Forget(const BlockKey& key) {
  MutexLock lock(&mu_);
  times_.erase(key);
}

void TouchBuffer::Clear() {
  MutexLock lock(&mu_);
  times_.clear();
}

std::vector<std::pair<BlockKey, int64_t>> TouchBuffer::Drain() {
  std::unordered_map<BlockKey, int64_t, BlockKeyHash> taken;
  {
    MutexLock lock(&mu_);
    taken.swap(times_);
  }
  return {taken.begin(), taken.end()};
}

}  // namespace kvtier::disk
