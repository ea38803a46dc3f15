// HostTier and SharedHostBudget: the RAM tier of kvtier. A HostTier keeps
// block files in RAM, dirty or clean, under a byte budget (a private or a
// shared SharedHostBudget, one LRU order for every tier on it) and hands
// the dirty entries it evicts to its owner's sink. docs/tiers.md ("The host
// tier") describes the budget, eviction order and the seed 000 mapping.
//
// Ownership: entries are shared read-only (SharedBlock): a holder keeps the
// bytes alive after eviction, outside the budget. A HostTier, and a
// Reservation until dropped, hold their budget alive (shared_ptr).
//
// Thread safety: every method of HostTier, SharedHostBudget and Reservation
// may be called from any thread; one mutex per budget. Sinks and key
// listeners run after it is released, on the calling thread, and may call
// back into any HostTier. Destroying a HostTier waits for the sink and
// listener calls of its entries: never destroy it from inside them.
#ifndef KVTIER_HOST_TIER_H_
#define KVTIER_HOST_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"

namespace kvtier {

namespace host_internal {
class Arena;
struct Owner;
}  // namespace host_internal

// Whether an entry's bytes are already stored in a lower tier.
enum class HostEntryState : uint8_t {
  kDirty,  // only in RAM: eviction hands it to the sink (write-back)
  kClean,  // a lower tier has it: eviction drops it
};

// A key entering or leaving a tier (for a key → tier index).
enum class KeyPresence : uint8_t { kAdded, kRemoved };

// Receives each dirty entry the budget evicts. The returned Status is only
// counted (HostTierStats::sink_errors): the entry has already left RAM.
using HostEvictionSink = std::function<Status(const BlockKey& key, SharedBlock block)>;

// Told each time a key enters or leaves the tier. Calls for different
// threads' operations may arrive out of order, but per key the tier applies
// events strictly alternating kAdded / kRemoved, so a listener that keeps a
// signed count per key (+1 added, -1 removed) converges to the truth once
// the calls in flight have returned.
using HostKeyListener = std::function<void(const BlockKey& key, KeyPresence change)>;

class SharedHostBudget;

// How a host budget picks the entry to evict (docs/replay.md compares them
// on a real trace).
enum class HostEvictionPolicy : uint8_t {
  // Least recently used first.
  kLru,
  // Reuse-aware LRU: entries not yet reused (stored once, never read back)
  // are evicted before reused ones, LRU within each group. An entry counts
  // as reused once it is read (Get), replaced (Put of a present key), or
  // stored again while its key is remembered from a recent eviction (the
  // budget remembers the last 4 × entries evicted keys). Keeps blocks that
  // several requests share when one-off blocks stream through.
  kReuse,
};

struct HostTierOptions {
  // Bytes of RAM for a private budget. Ignored when `shared_budget` is set.
  // Must be > 0 then. Default: 1 GiB.
  uint64_t capacity_bytes = uint64_t{1} << 30;
  // Eviction policy of a private budget. Ignored when `shared_budget` is
  // set (the budget's own policy applies). Default: kLru.
  HostEvictionPolicy eviction_policy = HostEvictionPolicy::kLru;
  // Join this budget (and its global LRU order) instead of creating a
  // private one. Default: none.
  std::shared_ptr<SharedHostBudget> shared_budget;
  // Where evicted dirty entries go (the disk tier). Empty = hot-only mode:
  // dirty evictions are dropped and counted. Default: empty.
  HostEvictionSink eviction_sink;
  // Told of every key added to or removed from this tier. Default: empty.
  HostKeyListener key_listener;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// The metrics of one HostTier, X(name, kind, help) (kvtier/stats_table.h).
// Gauges are the state at the time of the call; counters count since
// creation.
#define KVTIER_HOST_STATS(X)                                                                       \
  X(entries, kGauge, "entries in the tier")                                                        \
  X(bytes, kGauge, "bytes of the entries (their block sizes)")                                     \
  X(dirty_entries, kGauge, "dirty entries: not yet written down to a lower tier")                  \
  X(dirty_bytes, kGauge, "bytes of the dirty entries")                                             \
  X(reserved_bytes, kGauge, "bytes held by this tier's live Reservations")                         \
  X(hits, kCounter, "Get calls that found the key")                                                \
  X(handoff_hits, kCounter, "hits on a key evicted while its sink call ran (counted in hits too)") \
  X(misses, kCounter, "Get calls that did not find the key")                                       \
  X(puts, kCounter, "successful Puts (new keys and replacements)")                                 \
  X(replacements, kCounter, "successful Puts of a key already present")                            \
  X(rejections, kCounter, "Puts refused: block larger than the budget")                            \
  X(put_failures, kCounter, "Puts refused: Reservations hold the room")                            \
  X(erases, kCounter, "entries removed by Erase")                                                  \
  X(evictions, kCounter, "entries removed to make room, by ShrinkTo or Clear")                     \
  X(dirty_evictions, kCounter, "evicted dirty entries handed to the sink")                         \
  X(dirty_dropped, kCounter, "evicted dirty entries dropped (no sink)")                            \
  X(sink_errors, kCounter, "sink calls that returned an error")                                    \
  X(reservations, kCounter, "successful Reserve calls")                                            \
  X(reservation_failures, kCounter, "Reserve calls refused")

struct HostTierStats {
  KVTIER_HOST_STATS(KVTIER_STATS_FIELD)

  // Each entry of KVTIER_HOST_STATS with its value.
  KVTIER_STATS_FOR_EACH(KVTIER_HOST_STATS)
};

// The metrics of a whole budget (all its tiers), X(name, kind, help).
// Prometheus shows them as `kvtier_host_budget_<name>` gauges.
#define KVTIER_HOST_BUDGET_STATS(X)                                           \
  X(capacity_bytes, kGauge, "the budget, in bytes")                           \
  X(used_bytes, kGauge, "bytes of the entries over all tiers")                \
  X(reserved_bytes, kGauge, "bytes held by live Reservations over all tiers") \
  X(entries, kGauge, "entries over all tiers")                                \
  X(tiers, kGauge, "live HostTiers on the budget")                            \
  X(evictions, kGauge, "entries evicted over all tiers since creation (exported as a gauge)")

struct HostBudgetStats {
  KVTIER_HOST_BUDGET_STATS(KVTIER_STATS_FIELD)
  // kReuse only: stores of a key remembered from a recent eviction. Not
  // exported (not in the table); `kvtier replay` reads it.
  uint64_t ghost_hits = 0;

  // Each entry of KVTIER_HOST_BUDGET_STATS with its value (not ghost_hits).
  KVTIER_STATS_FOR_EACH(KVTIER_HOST_BUDGET_STATS)
};

// A byte budget and global LRU order shared by HostTiers. Create it, pass it
// in HostTierOptions::shared_budget to each tier. It outlives its tiers
// (they hold it); dropping a tier releases that tier's share at once.
//
// Thread safety: see the file comment.
class SharedHostBudget {
 public:
  // InvalidArgument if capacity_bytes is 0. `policy` orders the victims of
  // all tiers on the budget (the file comment's "LRU order" is this order).
  static Result<std::shared_ptr<SharedHostBudget>> Create(
      uint64_t capacity_bytes, HostEvictionPolicy policy = HostEvictionPolicy::kLru);

  SharedHostBudget(const SharedHostBudget&) = delete;
  SharedHostBudget& operator=(const SharedHostBudget&) = delete;

  uint64_t capacity_bytes() const;
  // Evicts entries of any tier in global LRU order until the entries' bytes
  // are ≤ target_bytes, skipping keys in `protected_keys` (in every tier).
  // Dirty victims go to their tier's sink. Returns the bytes evicted; it may
  // stop above target when only protected entries remain.
  uint64_t ShrinkTo(uint64_t target_bytes, std::span<const BlockKey> protected_keys = {});
  // Clears every tier on the budget, as HostTier::Clear does. Returns the
  // number of entries removed.
  uint64_t ClearAll();
  HostBudgetStats Stats() const;

 private:
  friend class HostTier;
  explicit SharedHostBudget(std::shared_ptr<host_internal::Arena> arena);
  std::shared_ptr<host_internal::Arena> arena_;
};

// The RAM tier. See the file comment for ownership and thread safety.
class HostTier {
 public:
  // Budget held for a block that is not an entry yet (a disk read in
  // flight). It counts against the capacity until it is dropped, released,
  // or converted into an entry by Put. Move-only; an empty Reservation
  // (default-constructed or moved-from) holds nothing.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();

    uint64_t bytes() const { return bytes_; }
    bool empty() const { return bytes_ == 0; }
    // Gives the bytes back to the budget now.
    void Release();

   private:
    friend class HostTier;
    std::shared_ptr<host_internal::Arena> arena_;
    std::shared_ptr<host_internal::Owner> owner_;
    uint64_t bytes_ = 0;
  };

  // A dirty entry, as DirtyEntries returns it.
  struct DirtyEntry {
    BlockKey key;
    SharedBlock block;
  };

  // InvalidArgument if the options are invalid.
  static Result<std::unique_ptr<HostTier>> Create(HostTierOptions options);

  HostTier(const HostTier&) = delete;
  HostTier& operator=(const HostTier&) = delete;
  // Releases this tier's share of the budget: its entries are dropped
  // without calling the sink or the key listener (call Clear first to write
  // dirty entries back). Waits for sink and listener calls in flight for
  // this tier's entries (see the file comment).
  ~HostTier();

  // Stores `block` under `key` as the most recently used entry, replacing
  // any entry of this key (the new state wins). Evicts in global LRU order
  // to make room; the entry being replaced is never the victim. With
  // `reservation` (from this tier's Reserve), its bytes are converted into
  // the entry: on success it becomes empty; on failure it is unchanged.
  // ResourceExhausted if the block is larger than the budget's capacity
  // (counted as a rejection) or if Reservations hold the room it needs.
  // InvalidArgument if `block` is null or the reservation is another
  // tier's.
  Status Put(const BlockKey& key, SharedBlock block, HostEntryState state,
             Reservation* reservation = nullptr);

  // On a hit: marks the entry most recently used and returns it; when `dst`
  // is not empty, also copies the block's bytes into its front (the rest of
  // `dst` is left alone). On a miss: returns nullptr. InvalidArgument if
  // `dst` is not empty and is smaller than the block (nothing is copied or
  // counted then). A dirty entry that was evicted stays readable here (a
  // hit, not re-added) until its sink call returns, so a block is never
  // missing from both this tier and the lower one while it moves down.
  Result<SharedBlock> Get(const BlockKey& key, std::span<std::byte> dst = {});

  // Get() of each key (into dsts[i] when `dsts` is not empty), looked up
  // under one lock of the budget and copied after it: cheaper than a Get per
  // key for a batch of small blocks. InvalidArgument if `dsts` is neither
  // empty nor as long as `keys` (for every key then).
  std::vector<Result<SharedBlock>> GetMany(std::span<const BlockKey> keys,
                                           std::span<const std::span<std::byte>> dsts = {});

  // Whether the key is present. Neither touches the LRU order nor counts.
  bool Contains(const BlockKey& key) const;

  // Marks the entry clean after its bytes reached a lower tier. Keys name
  // content, so any entry for `key` holds the bytes that were written.
  // Returns true if a dirty entry became clean.
  bool MarkClean(const BlockKey& key);

  // Drops the entry (no sink call). Returns true if it was present.
  bool Erase(const BlockKey& key);

  // Evicts this tier's entries in LRU order until this tier holds ≤
  // target_bytes, skipping `protected_keys`. Dirty victims go to the sink.
  // Returns the bytes evicted.
  uint64_t ShrinkTo(uint64_t target_bytes, std::span<const BlockKey> protected_keys = {});

  // Evicts every entry of this tier (dirty ones go to the sink). Returns
  // the number of entries removed.
  uint64_t Clear();

  // Holds `bytes` of budget for a block about to be loaded, evicting in
  // global LRU order to make room. InvalidArgument if bytes is 0;
  // ResourceExhausted if bytes exceed the capacity or other Reservations
  // hold the room (counted as a reservation failure).
  Result<Reservation> Reserve(uint64_t bytes);

  // Up to `limit` dirty entries in eviction order (next victim first; least
  // recently used first under kLru): what a flush writes to disk (then
  // calls MarkClean).
  std::vector<DirtyEntry> DirtyEntries(size_t limit = SIZE_MAX) const;
  // The keys of this tier's entries (clean and dirty), in eviction order:
  // what a cache erases one by one to drop them without writing them down.
  std::vector<BlockKey> Keys() const;

  HostTierStats Stats() const;
  // The budget this tier draws from (its private one or the shared one).
  const std::shared_ptr<SharedHostBudget>& budget() const { return budget_; }

 private:
  HostTier(std::shared_ptr<SharedHostBudget> budget, std::shared_ptr<host_internal::Owner> owner);
  host_internal::Arena& arena() const;

  std::shared_ptr<SharedHostBudget> budget_;
  std::shared_ptr<host_internal::Owner> owner_;
};

}  // namespace kvtier

#endif  // KVTIER_HOST_TIER_H_
