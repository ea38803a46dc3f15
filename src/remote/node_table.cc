#include "remote/node_table.h"

namespace kvtier::remote {

NodeTable::NodeTable(NodeFactory factory) : factory_(std::move(factory)) { slots_.fill(kNoNode); }

uint16_t NodeTable::IndexLocked(const NodeAddress& address) {
  auto it = by_address_.find(address);
  if (it != by_address_.end()) return it->second;
  if (nodes_.size() >= kMaxNodes) return kNoNode;  // a lying server naming endless nodes
  // Creating a Node opens nothing (connections are made on first use).
  const uint16_t index = static_cast<uint16_t>(nodes_.size());
  nodes_.push_back(factory_(address));
  by_address_.emplace(address, index);
  return index;
}

std::shared_ptr<Node> NodeTable::GetOrAdd(const NodeAddress& address) {
  MutexLock lock(&mu_);
  const uint16_t i = IndexLocked(address);
  return i == kNoNode ? nullptr : nodes_[i];
}

std::shared_ptr<Node> NodeTable::ForSlot(uint16_t slot) {
  MutexLock lock(&mu_);
  const uint16_t i = slots_[slot % kClusterSlots];
  return i == kNoNode ? nullptr : nodes_[i];
}

void NodeTable::SetSlot(uint16_t slot, const NodeAddress& owner) {
  MutexLock lock(&mu_);
  const uint16_t i = IndexLocked(owner);
  if (i != kNoNode) slots_[slot % kClusterSlots] = i;
}

uint32_t NodeTable::SetSlots(const std::vector<SlotRange>& ranges) {
  MutexLock lock(&mu_);
  const std::array<uint16_t, kClusterSlots> before = slots_;
  slots_.fill(kNoNode);
  for (const SlotRange& r : ranges) {
    const uint16_t i = IndexLocked(r.master);
    if (i == kNoNode) continue;
    for (uint32_t s = r.first; s <= r.last && s < kClusterSlots; ++s) slots_[s] = i;
  }
  uint32_t moved = 0;
  for (size_t s = 0; s < kClusterSlots; ++s) {
    moved += before[s] != kNoNode && slots_[s] != kNoNode && before[s] != slots_[s];
  }
  return moved;
}

std::vector<std::shared_ptr<Node>> NodeTable::Owners(bool* complete) {
  MutexLock lock(&mu_);
  std::vector<bool> seen(nodes_.size(), false);
  std::vector<std::shared_ptr<Node>> out;
  *complete = true;
  for (uint16_t i : slots_) {
    if (i == kNoNode) {
      *complete = false;
    } else if (!seen[i]) {
      seen[i] = true;
      out.push_back(nodes_[i]);
    }
  }
  return out;
}

bool NodeTable::Complete() {
  MutexLock lock(&mu_);
  for (uint16_t i : slots_) {
    if (i == kNoNode) return false;
  }
  return true;
}

std::vector<std::shared_ptr<Node>> NodeTable::All() {
  MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Node>> out;
  for (const auto& [addr, i] : by_address_) out.push_back(nodes_[i]);
  return out;
}

}  // namespace kvtier::remote
