// Arena: the state behind a SharedHostBudget and all HostTiers on it.
//
// One mutex guards everything: the global eviction order of entries (an
// EvictionList under the budget's policy), each tier's key map and
// counters, and the budget's totals. HostTier and
// SharedHostBudget are thin handles that call in here.
//
// Calls out (eviction sinks, key listeners) are collected under the mutex
// as Deferred actions and run by the public entry points after unlocking.
// While such actions are outstanding the owning tier's `inflight` count is
// raised, so that CloseOwner (the HostTier destructor) can wait for them:
// after it returns, nothing will call that tier's sink or listener again.
//
// Thread safety: all public methods lock `mu_`; the *Locked helpers require
// it. No callback runs with `mu_` held.
#ifndef KVTIER_HOST_HOST_ARENA_H_
#define KVTIER_HOST_HOST_ARENA_H_

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/host_tier.h"

namespace kvtier::host_internal {

struct Owner;

struct Entry {
  Owner* owner = nullptr;  // valid while the entry exists
  BlockKey key;
  SharedBlock block;
  uint64_t bytes = 0;
  bool dirty = false;
  bool reused = false;  // owned by the EvictionList
};

using EntryList = EvictionList<Entry>::List;  // one list node, or the whole order

// One HostTier's share of the arena. The callbacks are set at creation and
// never change (safe to call without the lock); everything else is guarded
// by Arena::mu_ (not annotated: the mutex lives in another object).
struct Owner {
  HostEvictionSink sink;
  HostKeyListener listener;

  std::unordered_map<BlockKey, EntryList::iterator, BlockKeyHash> map;
  // Evicted dirty entries whose sink call has not returned yet, with the
  // number of such calls per key. Get serves them, so a block stays
  // readable while it moves to the lower tier.
  std::unordered_map<BlockKey, std::pair<SharedBlock, uint32_t>, BlockKeyHash> handoff;
  HostTierStats stats;    // gauges kept up to date here as well
  uint64_t inflight = 0;  // deferred actions handed out, not yet finished
  bool closed = false;
};

using KeySet = std::unordered_set<BlockKey, BlockKeyHash>;

class Arena {
 public:
  Arena(uint64_t capacity_bytes, HostEvictionPolicy policy)
      : capacity_(capacity_bytes), order_(policy) {}
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  uint64_t capacity() const { return capacity_; }

  void AddOwner(Owner* owner) EXCLUDES(mu_);
  // Drops the owner's entries without callbacks, then waits until no
  // deferred action for it is outstanding.
  void CloseOwner(Owner* owner) EXCLUDES(mu_);

  Status Put(Owner* owner, const BlockKey& key, SharedBlock block, bool dirty,
             uint64_t* reserved_bytes) EXCLUDES(mu_);
  Result<SharedBlock> Get(Owner* owner, const BlockKey& key, std::span<std::byte> dst)
      EXCLUDES(mu_);
  // REQUIRES: dsts empty or dsts.size() == keys.size().
  std::vector<Result<SharedBlock>> GetMany(Owner* owner, std::span<const BlockKey> keys,
                                           std::span<const std::span<std::byte>> dsts)
      EXCLUDES(mu_);
  bool Contains(const Owner* owner, const BlockKey& key) const EXCLUDES(mu_);
  bool MarkClean(Owner* owner, const BlockKey& key) EXCLUDES(mu_);
  bool Erase(Owner* owner, const BlockKey& key) EXCLUDES(mu_);
  // owner == nullptr: every owner, against the total; otherwise one owner
  // against its own bytes.
  uint64_t ShrinkTo(Owner* owner, uint64_t target_bytes, const KeySet& protected_keys)
      EXCLUDES(mu_);
  // owner == nullptr: every owner.
  uint64_t Clear(Owner* owner) EXCLUDES(mu_);

  // Holds `bytes` for `owner` or fails (counted).
  Status Reserve(Owner* owner, uint64_t bytes) EXCLUDES(mu_);
  void Release(Owner* owner, uint64_t bytes) EXCLUDES(mu_);

  std::vector<HostTier::DirtyEntry> DirtyEntries(const Owner* owner, size_t limit) const
      EXCLUDES(mu_);
  std::vector<BlockKey> Keys(const Owner* owner) const EXCLUDES(mu_);
  HostTierStats OwnerStats(const Owner* owner) const EXCLUDES(mu_);
  HostBudgetStats Stats() const EXCLUDES(mu_);

 private:
  // A call out, run after `mu_` is released.
  struct Deferred {
    Owner* owner;
    BlockKey key;
    SharedBlock block;    // an evicted block: to the sink, or freed unlocked
    bool to_sink;         // hand `block` to the owner's sink
    bool notify_removed;  // tell the listener the key left
    bool notify_added;    // tell the listener the key arrived
  };
  using DeferredList = std::vector<Deferred>;

  enum class RemoveReason { kEvict, kErase };

  // Get's lookup: the entry (or handed-off block) for `key`, touched and
  // counted; nullptr on a miss; InvalidArgument if dst_size is not 0 and
  // smaller than the block (nothing touched or counted then).
  Result<SharedBlock> FindLocked(Owner* owner, const BlockKey& key, size_t dst_size) REQUIRES(mu_);
  // Unlinks `it`, updates every gauge and counter, and queues the calls out
  // it needs (sink for a dirty eviction, listener).
  void RemoveLocked(EntryList::iterator it, RemoveReason reason, DeferredList* out) REQUIRES(mu_);
  // Evicts from the front of the order until `need` more bytes fit. False if they
  // cannot (only reservations left).
  bool MakeRoomLocked(uint64_t need, DeferredList* out) REQUIRES(mu_);
  void QueueLocked(DeferredList* out, Deferred d) REQUIRES(mu_);
  // Runs the deferred actions (without the lock), then settles the
  // owners' inflight counts and sink error counters.
  void Run(DeferredList& actions) EXCLUDES(mu_);

  const uint64_t capacity_;
  mutable Mutex mu_;
  CondVar idle_cv_;                            // an owner's inflight dropped to 0
  EvictionList<Entry> order_ GUARDED_BY(mu_);  // front = next victim
  uint64_t used_ GUARDED_BY(mu_) = 0;
  uint64_t reserved_ GUARDED_BY(mu_) = 0;
  uint64_t owners_ GUARDED_BY(mu_) = 0;
  uint64_t evictions_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::host_internal

#endif  // KVTIER_HOST_HOST_ARENA_H_
