#include "kvtier/eviction_policy.h"

#include <string>

namespace kvtier {

std::string_view HostEvictionPolicyName(HostEvictionPolicy policy) {
  switch (policy) {
    case HostEvictionPolicy::kLru:
      return "lru";
    case HostEvictionPolicy::kReuse:
      return "reuse";
  }
  return "unknown";
}

Result<HostEvictionPolicy> ParseHostEvictionPolicy(std::string_view name) {
  for (HostEvictionPolicy p : {HostEvictionPolicy::kLru, HostEvictionPolicy::kReuse}) {
    if (name == HostEvictionPolicyName(p)) return p;
  }
  return Status::InvalidArgument("unknown eviction policy '" + std::string(name.substr(0, 40)) +
                                 "' (expected lru or reuse)");
}

namespace host_internal {

uint64_t KeyFingerprint(const BlockKey& key) {
  uint64_t fp = 0;
  for (int i = 7; i >= 0; --i) fp = (fp << 8) | static_cast<uint8_t>(key.bytes[i]);
  return fp;
}

void GhostList::Add(uint64_t fp) {
  auto found = index_.find(fp);
  if (found != index_.end()) {
    order_.splice(order_.end(), order_, found->second);
    return;
  }
  order_.push_back(fp);
  index_.emplace(fp, std::prev(order_.end()));
}

bool GhostList::Take(uint64_t fp) {
  auto found = index_.find(fp);
  if (found == index_.end()) return false;
  order_.erase(found->second);
  index_.erase(found);
  return true;
}

void GhostList::Trim(size_t limit) {
  while (index_.size() > limit) {
    index_.erase(order_.front());
    order_.pop_front();
  }
}

}  // namespace host_internal
}  // namespace kvtier
