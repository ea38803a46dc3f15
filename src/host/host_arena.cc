#include "host/host_arena.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>
#include <utility>

namespace kvtier::host_internal {

void Arena::AddOwner(Owner* owner) {
  MutexLock lock(&mu_);
  ++owners_;
}

void Arena::CloseOwner(Owner* owner) {
  std::vector<SharedBlock> dropped;  // freed after unlocking
  MutexLock lock(&mu_);
  owner->closed = true;
  dropped.reserve(owner->map.size());
  for (auto& [key, it] : owner->map) {
    used_ -= it->bytes;
    dropped.push_back(std::move(it->block));
    order_.Remove(it, KeyFingerprint(key), Removal::kErased);
  }
  owner->map.clear();
  owner->stats.entries = 0;
  owner->stats.bytes = 0;
  owner->stats.dirty_entries = 0;
  owner->stats.dirty_bytes = 0;
  --owners_;
  while (owner->inflight != 0) idle_cv_.Wait(&lock);
  lock.Unlock();
  dropped.clear();
}

void Arena::QueueLocked(DeferredList* out, Deferred d) {
  if (d.to_sink || d.notify_added || d.notify_removed) ++d.owner->inflight;
  out->push_back(std::move(d));
}

void Arena::RemoveLocked(EntryList::iterator it, RemoveReason reason, DeferredList* out) {
  Entry& e = *it;
  Owner* o = e.owner;
  HostTierStats& s = o->stats;
  s.entries -= 1;
  s.bytes -= e.bytes;
  if (e.dirty) {
    s.dirty_entries -= 1;
    s.dirty_bytes -= e.bytes;
  }
  used_ -= e.bytes;

  Deferred d{o,
             e.key,
             std::move(e.block),
             /*to_sink=*/false,
             /*notify_removed=*/static_cast<bool>(o->listener),
             /*notify_added=*/false};
  if (reason == RemoveReason::kEvict) {
    ++s.evictions;
    ++evictions_;
    if (e.dirty) {
      if (o->sink) {
        d.to_sink = true;
        ++s.dirty_evictions;
        auto& [held, calls] = o->handoff[e.key];
        if (calls++ == 0) held = d.block;
      } else {
        ++s.dirty_dropped;
      }
    }
  } else {
    ++s.erases;
  }
  const uint64_t fp = KeyFingerprint(e.key);
  o->map.erase(e.key);
  order_.Remove(it, fp, reason == RemoveReason::kEvict ? Removal::kEvicted : Removal::kErased);
  QueueLocked(out, std::move(d));
}

bool Arena::MakeRoomLocked(uint64_t need, DeferredList* out) {
  while (used_ + reserved_ + need > capacity_ && !order_.empty()) {
    RemoveLocked(order_.begin(), RemoveReason::kEvict, out);
  }
  return used_ + reserved_ + need <= capacity_;
}

void Arena::Run(DeferredList& actions) {
  if (actions.empty()) return;
  // Sink errors per action, settled under the lock below.
  std::vector<uint8_t> failed(actions.size(), 0);
  bool any_call = false;
  for (size_t i = 0; i < actions.size(); ++i) {
    Deferred& a = actions[i];
    // Sink before the removal notice: the lower tier has the key before the
    // index hears that this tier lost it, so a Match never sees a gap.
    if (a.to_sink) {
      any_call = true;
      Status s = a.owner->sink(a.key, std::move(a.block));
      failed[i] = s.ok() ? 0 : 1;
    }
    if (a.notify_removed) {
      any_call = true;
      a.owner->listener(a.key, KeyPresence::kRemoved);
    }
    if (a.notify_added) {
      any_call = true;
      a.owner->listener(a.key, KeyPresence::kAdded);
    }
    a.block.reset();
  }
  if (!any_call) {
    actions.clear();
    return;
  }
  std::vector<SharedBlock> retired;  // handoff blocks, freed after unlocking
  MutexLock lock(&mu_);
  bool wake = false;
  for (size_t i = 0; i < actions.size(); ++i) {
    Deferred& a = actions[i];
    if (!a.to_sink && !a.notify_added && !a.notify_removed) continue;
    a.owner->stats.sink_errors += failed[i];
    if (a.to_sink) {
      auto h = a.owner->handoff.find(a.key);
      assert(h != a.owner->handoff.end());
      if (h != a.owner->handoff.end() && --h->second.second == 0) {
        retired.push_back(std::move(h->second.first));
        a.owner->handoff.erase(h);
      }
    }
    if (--a.owner->inflight == 0 && a.owner->closed) wake = true;
  }
  if (wake) idle_cv_.SignalAll();
  lock.Unlock();
  retired.clear();
  actions.clear();
}

Status Arena::Put(Owner* owner, const BlockKey& key, SharedBlock block, bool dirty,
                  uint64_t* reserved_bytes) {
  const uint64_t bytes = block->size();
  // The list node is built before locking; it is spliced in under the lock.
  EntryList node;
  node.push_back(Entry{owner, key, std::move(block), bytes, dirty});
  SharedBlock replaced;  // freed after unlocking
  DeferredList actions;
  {
    MutexLock lock(&mu_);
    const uint64_t from_reservation = reserved_bytes != nullptr ? *reserved_bytes : 0;
    if (bytes > capacity_) {
      ++owner->stats.rejections;
      return Status::ResourceExhausted("block of " + std::to_string(bytes) +
                                       " bytes is larger than the host budget of " +
                                       std::to_string(capacity_) + " bytes");
    }
    // Every entry except the one replaced may be evicted; only
    // reservations (less the one converted here) cannot.
    if (reserved_ - from_reservation + bytes > capacity_) {
      ++owner->stats.put_failures;
      return Status::ResourceExhausted(
          "host budget: " + std::to_string(reserved_ - from_reservation) + " of " +
          std::to_string(capacity_) + " bytes are reserved for loads; no room for a block of " +
          std::to_string(bytes) + " bytes");
    }
    reserved_ -= from_reservation;
    owner->stats.reserved_bytes -= from_reservation;
    if (reserved_bytes != nullptr) *reserved_bytes = 0;

    HostTierStats& s = owner->stats;
    auto found = owner->map.find(key);
    EntryList parked;  // the entry being replaced, out of the victims' way
    if (found != owner->map.end()) {
      Entry& old = *found->second;
      used_ -= old.bytes;
      s.bytes -= old.bytes;
      if (old.dirty) {
        s.dirty_entries -= 1;
        s.dirty_bytes -= old.bytes;
      }
      parked = order_.Extract(found->second);
    }
    const bool room = MakeRoomLocked(bytes, &actions);
    assert(room);
    (void)room;

    EntryList::iterator it;
    if (!parked.empty()) {
      it = parked.begin();
      replaced = std::move(it->block);
      *it = std::move(node.front());
      // Storing a present key again means it is wanted again.
      order_.Insert(std::move(parked), KeyFingerprint(key), Admission::kReused);
      ++s.replacements;
    } else {
      it = order_.Insert(std::move(node), KeyFingerprint(key), Admission::kNew);
      owner->map.emplace(key, it);
      s.entries += 1;
      if (owner->listener) {
        QueueLocked(&actions, Deferred{owner, key, nullptr, false, false, true});
      }
    }
    used_ += bytes;
    s.bytes += bytes;
    if (dirty) {
      s.dirty_entries += 1;
      s.dirty_bytes += bytes;
    }
    ++s.puts;
  }
  Run(actions);
  return Status::Ok();
}

Result<SharedBlock> Arena::FindLocked(Owner* owner, const BlockKey& key, size_t dst_size) {
  auto found = owner->map.find(key);
  SharedBlock block;
  if (found == owner->map.end()) {
    auto h = owner->handoff.find(key);
    if (h == owner->handoff.end()) {
      ++owner->stats.misses;
      return SharedBlock();
    }
    // Evicted, its sink call still running: serve it without re-adding.
    block = h->second.first;
  } else {
    block = found->second->block;
  }
  if (dst_size != 0 && dst_size < block->size()) {
    return Status::InvalidArgument("destination of " + std::to_string(dst_size) +
                                   " bytes is smaller than the block of " +
                                   std::to_string(block->size()) + " bytes");
  }
  if (found != owner->map.end()) {
    order_.Touch(found->second);
  } else {
    ++owner->stats.handoff_hits;
  }
  ++owner->stats.hits;
  return block;
}

Result<SharedBlock> Arena::Get(Owner* owner, const BlockKey& key, std::span<std::byte> dst) {
  Result<SharedBlock> got = SharedBlock();
  {
    MutexLock lock(&mu_);
    got = FindLocked(owner, key, dst.size());
  }
  if (got.ok() && *got != nullptr && !dst.empty()) {
    std::memcpy(dst.data(), (*got)->data(), (*got)->size());
  }
  return got;
}

std::vector<Result<SharedBlock>> Arena::GetMany(Owner* owner, std::span<const BlockKey> keys,
                                                std::span<const std::span<std::byte>> dsts) {
  std::vector<Result<SharedBlock>> out;
  out.reserve(keys.size());
  {
    // One lock for the batch: besides saving the lock traffic, the lookups
    // of independent keys can overlap their cache misses.
    MutexLock lock(&mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      out.push_back(FindLocked(owner, keys[i], dsts.empty() ? 0 : dsts[i].size()));
    }
  }
  if (!dsts.empty()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      if (out[i].ok() && *out[i] != nullptr) {
        std::memcpy(dsts[i].data(), (*out[i])->data(), (*out[i])->size());
      }
    }
  }
  return out;
}

bool Arena::Contains(const Owner* owner, const BlockKey& key) const {
  MutexLock lock(&mu_);
  return owner->map.count(key) != 0;
}

bool Arena::MarkClean(Owner* owner, const BlockKey& key) {
  MutexLock lock(&mu_);
  auto found = owner->map.find(key);
  if (found == owner->map.end() || !found->second->dirty) return false;
  Entry& e = *found->second;
  e.dirty = false;
  owner->stats.dirty_entries -= 1;
  owner->stats.dirty_bytes -= e.bytes;
  return true;
}

bool Arena::Erase(Owner* owner, const BlockKey& key) {
  DeferredList actions;
  {
    MutexLock lock(&mu_);
    auto found = owner->map.find(key);
    if (found == owner->map.end()) return false;
    RemoveLocked(found->second, RemoveReason::kErase, &actions);
  }
  Run(actions);
  return true;
}

uint64_t Arena::ShrinkTo(Owner* owner, uint64_t target_bytes, const KeySet& protected_keys) {
  uint64_t freed = 0;
  DeferredList actions;
  {
    MutexLock lock(&mu_);
    // Not a lambda: the analysis would not see `mu_` held inside it.
    auto it = order_.begin();
    while ((owner != nullptr ? owner->stats.bytes : used_) > target_bytes && it != order_.end()) {
      if ((owner != nullptr && it->owner != owner) || protected_keys.count(it->key) != 0) {
        ++it;
        continue;
      }
      auto next = std::next(it);
      freed += it->bytes;
      RemoveLocked(it, RemoveReason::kEvict, &actions);
      it = next;
    }
  }
  Run(actions);
  return freed;
}

uint64_t Arena::Clear(Owner* owner) {
  uint64_t removed = 0;
  DeferredList actions;
  {
    MutexLock lock(&mu_);
    auto it = order_.begin();
    while (it != order_.end()) {
      if (owner != nullptr && it->owner != owner) {
        ++it;
        continue;
      }
      auto next = std::next(it);
      RemoveLocked(it, RemoveReason::kEvict, &actions);
      ++removed;
      it = next;
    }
  }
  Run(actions);
  return removed;
}

Status Arena::Reserve(Owner* owner, uint64_t bytes) {
  DeferredList actions;
  {
    MutexLock lock(&mu_);
    if (bytes > capacity_ || reserved_ + bytes > capacity_) {
      ++owner->stats.reservation_failures;
      return Status::ResourceExhausted("host budget: cannot reserve " + std::to_string(bytes) +
                                       " bytes (" + std::to_string(reserved_) + " of " +
                                       std::to_string(capacity_) + " bytes already reserved)");
    }
    const bool room = MakeRoomLocked(bytes, &actions);
    assert(room);
    (void)room;
    reserved_ += bytes;
    owner->stats.reserved_bytes += bytes;
    ++owner->stats.reservations;
  }
  Run(actions);
  return Status::Ok();
}

void Arena::Release(Owner* owner, uint64_t bytes) {
  MutexLock lock(&mu_);
  assert(reserved_ >= bytes && owner->stats.reserved_bytes >= bytes);
  reserved_ -= bytes;
  owner->stats.reserved_bytes -= bytes;
}

std::vector<HostTier::DirtyEntry> Arena::DirtyEntries(const Owner* owner, size_t limit) const {
  std::vector<HostTier::DirtyEntry> out;
  MutexLock lock(&mu_);
  out.reserve(std::min<size_t>(limit, owner->stats.dirty_entries));
  for (auto it = order_.begin(); it != order_.end() && out.size() < limit; ++it) {
    if (it->owner == owner && it->dirty) out.push_back({it->key, it->block});
  }
  return out;
}

std::vector<BlockKey> Arena::Keys(const Owner* owner) const {
  std::vector<BlockKey> out;
  MutexLock lock(&mu_);
  out.reserve(owner->stats.entries);
  for (auto it = order_.begin(); it != order_.end(); ++it) {
    if (it->owner == owner) out.push_back(it->key);
  }
  return out;
}

HostTierStats Arena::OwnerStats(const Owner* owner) const {
  MutexLock lock(&mu_);
  return owner->stats;
}

HostBudgetStats Arena::Stats() const {
  MutexLock lock(&mu_);
  HostBudgetStats s;
  s.capacity_bytes = capacity_;
  s.used_bytes = used_;
  s.reserved_bytes = reserved_;
  s.entries = order_.size();
  s.tiers = owners_;
  s.evictions = evictions_;
  s.ghost_hits = order_.ghost_hits();
  return s;
}

}  // namespace kvtier::host_internal
