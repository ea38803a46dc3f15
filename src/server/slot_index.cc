#include "server/slot_index.h"

#include <algorithm>

namespace kvtier::server {

SlotIndex::SlotIndex(uint32_t slot_count, uint32_t namespace_quota_slots,
                     std::optional<KeyTable> table)
    : namespace_quota_(namespace_quota_slots) {
  MutexLock lock(&mu_);
  table_ = table;
  slots_.resize(slot_count);
  free_.reserve(slot_count);
  // Lowest slot numbers handed out first.
  for (uint32_t i = slot_count; i > 0; --i) free_.push_back(i - 1);
}

void SlotIndex::FreeLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  s.state = State::kFree;
  s.dirty = false;
  s.owner = 0;
  s.length = 0;
  free_.push_back(slot);
}

void SlotIndex::UnpublishLocked(uint32_t slot) {
  Slot& s = slots_[slot];
  lru_.erase(s.lru);
  by_key_.erase(s.key);
  if (table_) table_->Erase(s.key, slot);
  auto ns = namespaces_.find(s.ns);
  ns->second.lru.erase(s.ns_lru);
  if (ns->second.lru.empty()) namespaces_.erase(ns);
  if (s.leases > 0) {
    s.state = State::kZombie;  // freed by the last Release
  } else {
    FreeLocked(slot);
  }
}

SlotIndex::LookupResult SlotIndex::Lookup(ClientId client, std::span<const BlockKey> keys) {
  MutexLock lock(&mu_);
  LookupResult r;
  r.slots.resize(keys.size());
  Lease lease{client, {}};
  for (size_t i = 0; i < keys.size(); ++i) {
    ++counters_.lookups;
    auto it = by_key_.find(keys[i]);
    if (it == by_key_.end()) continue;
    Slot& s = slots_[it->second];
    ++s.leases;
    lru_.splice(lru_.end(), lru_, s.lru);
    std::list<uint32_t>& ns_lru = namespaces_[s.ns].lru;
    ns_lru.splice(ns_lru.end(), ns_lru, s.ns_lru);
    lease.slots.push_back(it->second);
    r.slots[i] = SlotRef{it->second, s.generation, s.length};
    ++counters_.hits;
  }
  if (!lease.slots.empty()) {
    r.lease = next_lease_++;
    leases_.emplace(r.lease, std::move(lease));
  }
  return r;
}

void SlotIndex::ReleaseSlotsLocked(const std::vector<uint32_t>& slots) {
  for (uint32_t slot : slots) {
    Slot& s = slots_[slot];
    --s.leases;
    if (s.leases == 0 && s.state == State::kZombie) FreeLocked(slot);
  }
}

bool SlotIndex::Release(ClientId client, uint64_t lease) {
  MutexLock lock(&mu_);
  auto it = leases_.find(lease);
  if (it == leases_.end() || it->second.client != client) return false;
  ReleaseSlotsLocked(it->second.slots);
  leases_.erase(it);
  return true;
}

Result<std::vector<SlotRef>> SlotIndex::Reserve(ClientId client, size_t n,
                                                std::vector<EvictedBlock>* evicted) {
  MutexLock lock(&mu_);
  // Count what can be had before touching anything: all or nothing.
  size_t available = free_.size();
  for (auto it = lru_.begin(); it != lru_.end() && available < n; ++it) {
    if (slots_[*it].leases == 0) ++available;
  }
  if (available < n) {
    ++counters_.reserve_failures;
    return Status::ResourceExhausted("arena: " + std::to_string(n) + " slots asked, " +
                                     std::to_string(available) +
                                     " free or evictable (the rest are leased or reserved)");
  }
  for (auto it = lru_.begin(); free_.size() < n;) {
    const uint32_t slot = *it++;
    Slot& s = slots_[slot];
    if (s.leases > 0) continue;
    evicted->push_back(EvictedBlock{slot, s.key, s.length, s.dirty});
    ++counters_.evictions;
    UnpublishLocked(slot);
  }
  std::vector<SlotRef> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t slot = free_.back();
    free_.pop_back();
    Slot& s = slots_[slot];
    s.state = State::kReserved;
    s.owner = client;
    ++s.generation;
    out.push_back(SlotRef{slot, s.generation, 0});
  }
  return out;
}

Status SlotIndex::Publish(ClientId client, uint32_t slot, const BlockKey& key,
                          const BlockKey& ns, uint64_t length, bool dirty,
                          std::vector<EvictedBlock>* evicted) {
  MutexLock lock(&mu_);
  if (slot >= slots_.size() || slots_[slot].state != State::kReserved ||
      slots_[slot].owner != client) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " is not reserved by this client");
  }
  Slot& s = slots_[slot];
  if (by_key_.count(key) > 0) {
    ++counters_.duplicate_publishes;
    FreeLocked(slot);
    return Status::Ok();
  }
  Namespace& space = namespaces_[ns];
  if (namespace_quota_ != 0 && space.lru.size() >= namespace_quota_) {
    // The namespace's own least recent block that nobody reads makes room.
    auto victim = space.lru.begin();
    while (victim != space.lru.end() && slots_[*victim].leases > 0) ++victim;
    if (victim == space.lru.end()) {
      ++counters_.quota_refusals;
      FreeLocked(slot);
      return Status::ResourceExhausted("namespace quota: the namespace holds " +
                                       std::to_string(namespace_quota_) +
                                       " slots, every one of them leased");
    }
    const uint32_t v = *victim;
    evicted->push_back(EvictedBlock{v, slots_[v].key, slots_[v].length, slots_[v].dirty});
    ++counters_.quota_evictions;
    UnpublishLocked(v);  // may erase the namespace's entry: look it up again
  }
  std::list<uint32_t>& ns_lru = namespaces_[ns].lru;
  s.state = State::kPublished;
  s.owner = 0;
  s.dirty = dirty;
  s.key = key;
  s.ns = ns;
  s.length = length;
  s.lru = lru_.insert(lru_.end(), slot);
  s.ns_lru = ns_lru.insert(ns_lru.end(), slot);
  by_key_.emplace(key, slot);
  if (table_) table_->Insert(key, slot);
  ++counters_.publishes;
  return Status::Ok();
}

bool SlotIndex::Abort(ClientId client, uint32_t slot) {
  MutexLock lock(&mu_);
  if (slot >= slots_.size() || slots_[slot].state != State::kReserved ||
      slots_[slot].owner != client) {
    return false;
  }
  FreeLocked(slot);
  return true;
}

size_t SlotIndex::ReleaseClient(ClientId client) {
  MutexLock lock(&mu_);
  size_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.client == client) {
      ReleaseSlotsLocked(it->second.slots);
      it = leases_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  for (uint32_t i = 0; i < slots_.size(); ++i) {
    if (slots_[i].state == State::kReserved && slots_[i].owner == client) {
      FreeLocked(i);
      ++n;
    }
  }
  if (n > 0) ++counters_.client_releases;
  return n;
}

void SlotIndex::Touch(std::span<const SlotRef> read) {
  MutexLock lock(&mu_);
  for (const SlotRef& r : read) {
    if (r.slot >= slots_.size()) continue;
    Slot& s = slots_[r.slot];
    if (s.state != State::kPublished || s.generation != r.generation) continue;
    lru_.splice(lru_.end(), lru_, s.lru);
    std::list<uint32_t>& ns_lru = namespaces_[s.ns].lru;
    ns_lru.splice(ns_lru.end(), ns_lru, s.ns_lru);
    ++counters_.lookups;
    ++counters_.hits;
  }
}

size_t SlotIndex::Match(std::span<const BlockKey> keys) const {
  MutexLock lock(&mu_);
  size_t n = 0;
  while (n < keys.size() && by_key_.count(keys[n]) > 0) ++n;
  return n;
}

bool SlotIndex::Contains(const BlockKey& key) const {
  MutexLock lock(&mu_);
  return by_key_.count(key) > 0;
}

bool SlotIndex::ReservedBy(ClientId client, uint32_t slot) const {
  MutexLock lock(&mu_);
  return slot < slots_.size() && slots_[slot].state == State::kReserved &&
         slots_[slot].owner == client;
}

bool SlotIndex::Erase(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return false;
  UnpublishLocked(it->second);
  return true;
}

SlotIndex::LookupResult SlotIndex::DirtyBlocks(std::vector<BlockKey>* keys) {
  MutexLock lock(&mu_);
  LookupResult r;
  Lease lease{kDaemonClient, {}};
  for (uint32_t slot : lru_) {
    Slot& s = slots_[slot];
    if (!s.dirty) continue;
    ++s.leases;
    lease.slots.push_back(slot);
    keys->push_back(s.key);
    r.slots.push_back(SlotRef{slot, s.generation, s.length});
  }
  if (!lease.slots.empty()) {
    r.lease = next_lease_++;
    leases_.emplace(r.lease, std::move(lease));
  }
  return r;
}

void SlotIndex::MarkClean(uint32_t slot, uint64_t generation) {
  MutexLock lock(&mu_);
  if (slot < slots_.size() && slots_[slot].generation == generation) slots_[slot].dirty = false;
}

SlotIndexStats SlotIndex::Stats() const {
  MutexLock lock(&mu_);
  SlotIndexStats s = counters_;
  s.slots = slots_.size();
  s.free = free_.size();
  s.leases_open = leases_.size();
  s.namespaces = namespaces_.size();
  for (const Slot& slot : slots_) {
    if (slot.state == State::kReserved) ++s.reserved;
    if (slot.state == State::kPublished) {
      ++s.published;
      s.published_bytes += slot.length;
    }
    if (slot.state == State::kPublished && slot.dirty) ++s.dirty;
    if (slot.leases > 0) ++s.leased;
  }
  return s;
}

std::vector<NamespaceUsage> SlotIndex::Namespaces() const {
  std::vector<NamespaceUsage> out;
  {
    MutexLock lock(&mu_);
    out.reserve(namespaces_.size());
    for (const auto& [ns, space] : namespaces_) out.push_back({ns, space.lru.size()});
  }
  std::sort(out.begin(), out.end(), [](const NamespaceUsage& a, const NamespaceUsage& b) {
    return a.slots != b.slots ? a.slots > b.slots : a.ns < b.ns;
  });
  return out;
}

std::map<ClientId, ClientHoldings> SlotIndex::Holdings() const {
  MutexLock lock(&mu_);
  std::map<ClientId, ClientHoldings> out;
  for (const auto& [id, lease] : leases_) {
    ClientHoldings& h = out[lease.client];
    ++h.leases;
    h.leased_slots += lease.slots.size();
  }
  for (const Slot& slot : slots_) {
    if (slot.state == State::kReserved) ++out[slot.owner].reserved_slots;
  }
  return out;
}

}  // namespace kvtier::server
