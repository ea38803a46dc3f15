// SlotIndex: what the daemon knows about each arena slot (docs/server.md):
// free, reserved by one client, or published under a key (clean or dirty),
// with its lease count, generation and LRU position; the key -> slot map;
// and each client's leases and reservations, so that a client's socket
// closing releases them all. Of the arena it writes only the key table
// (server_client/key_table.h), in step with its own key -> slot map, for
// clients' matches; the daemon copies, verifies and writes the generations
// it returns.
//
// Rules it keeps: a slot with a lease or a reservation is never handed to
// another block; an erased or replaced slot that is leased is freed when
// its last lease goes; a key is published at most once (a second publish of
// a key already held frees the new slot: replicated stores cost one copy);
// with a namespace quota of Q slots, a namespace that holds Q blocks makes
// room for another by evicting its own least recent unleased block, never
// another namespace's (ResourceExhausted when all Q are leased).
//
// Thread safety: every method takes mu_; no I/O, no callback under it.
#ifndef KVTIER_SERVER_SLOT_INDEX_H_
#define KVTIER_SERVER_SLOT_INDEX_H_

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "kvtier/block_key.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"
#include "server_client/key_table.h"

namespace kvtier::server {

using ClientId = uint64_t;
// The daemon's own reservations (promotions from disk/remote).
inline constexpr ClientId kDaemonClient = 0;

struct SlotRef {
  uint32_t slot = 0;
  uint64_t generation = 0;
  uint64_t length = 0;
};

// A published block pushed out of the arena to make room.
struct EvictedBlock {
  uint32_t slot = 0;
  BlockKey key;
  uint64_t length = 0;
  bool dirty = false;  // never written below: the daemon must write it down
};

struct SlotIndexStats {
  uint64_t slots = 0, free = 0, reserved = 0, published = 0, dirty = 0, leased = 0;
  uint64_t published_bytes = 0;  // the published blocks' lengths
  uint64_t leases_open = 0;
  uint64_t lookups = 0, hits = 0, evictions = 0, publishes = 0, duplicate_publishes = 0;
  uint64_t reserve_failures = 0, client_releases = 0;
  uint64_t quota_evictions = 0, quota_refusals = 0;
  uint64_t namespaces = 0;  // namespaces with a published block
};

// Slots published under one namespace (the block file's `ns`).
struct NamespaceUsage {
  BlockKey ns;
  uint64_t slots = 0;
};

// What one client holds at the time of the call, X(name, kind, help)
// (kvtier/stats_table.h): /metrics's kvtier_server_client_* families.
#define KVTIER_CLIENT_HOLDINGS(X)                                                   \
  X(leases, kGauge, "read leases the client holds")                               \
  X(leased_slots, kGauge, "arena slots its leases hold (once per lease holding one)") \
  X(reserved_slots, kGauge, "arena slots it reserved and has not published or given back")
struct ClientHoldings {
  KVTIER_CLIENT_HOLDINGS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_CLIENT_HOLDINGS)
};

class SlotIndex {
 public:
  // namespace_quota_slots: the most slots one namespace's blocks may hold;
  // 0 = no bound but the arena's. `table`: the arena's key table, kept
  // holding exactly the published keys (none: no table kept).
  explicit SlotIndex(uint32_t slot_count, uint32_t namespace_quota_slots = 0,
                     std::optional<KeyTable> table = std::nullopt);

  // Leases every key found: the returned lease id holds them until
  // Release (or ReleaseClient); a miss is nullopt. Lease 0 = nothing leased.
  struct LookupResult {
    uint64_t lease = 0;
    std::vector<std::optional<SlotRef>> slots;
  };
  LookupResult Lookup(ClientId client, std::span<const BlockKey> keys);
  // False if the lease is not this client's (or already released).
  bool Release(ClientId client, uint64_t lease);

  // Reserves n slots for `client`, evicting unleased published blocks in LRU
  // order (the dirty ones are in *evicted: the daemon copies them out before
  // anyone writes the slot). ResourceExhausted (nothing reserved) when not
  // enough slots are free or evictable.
  Result<std::vector<SlotRef>> Reserve(ClientId client, size_t n,
                                       std::vector<EvictedBlock>* evicted);
  // Publishes a reserved slot of `client` under `key` of namespace `ns` as
  // `dirty` (a store) or clean (a promotion). InvalidArgument if the slot
  // is not reserved by the client. A key already published elsewhere frees
  // this slot. A namespace at its quota evicts its least recent unleased
  // block first (into *evicted, like Reserve); ResourceExhausted, the slot
  // freed, when every block it holds is leased.
  Status Publish(ClientId client, uint32_t slot, const BlockKey& key, const BlockKey& ns,
                 uint64_t length, bool dirty, std::vector<EvictedBlock>* evicted);
  // Gives a reservation back (freed). False if not reserved by `client`.
  bool Abort(ClientId client, uint32_t slot);
  // Every lease and reservation of `client`; returns how many.
  size_t ReleaseClient(ClientId client);

  // Blocks a client read from the arena on its own (the key table, no
  // lease): each slot still published under that generation becomes the
  // most recent and counts a lookup and a hit; others (evicted, reused
  // since) are ignored.
  void Touch(std::span<const SlotRef> read);

  // Leading keys published.
  size_t Match(std::span<const BlockKey> keys) const;
  bool Contains(const BlockKey& key) const;
  // Whether `slot` is reserved by `client` (what Publish requires).
  bool ReservedBy(ClientId client, uint32_t slot) const;
  // Unpublishes `key`; true if it was published.
  bool Erase(const BlockKey& key);

  // The dirty published blocks, each leased to kDaemonClient under the
  // returned lease (so the copy-out is safe); MarkClean then Release it.
  LookupResult DirtyBlocks(std::vector<BlockKey>* keys);
  void MarkClean(uint32_t slot, uint64_t generation);

  SlotIndexStats Stats() const;
  // Slots held per namespace, largest first.
  std::vector<NamespaceUsage> Namespaces() const;
  // Every client (kDaemonClient included) that holds a lease or a
  // reservation; clients holding nothing are not in the map.
  std::map<ClientId, ClientHoldings> Holdings() const;

 private:
  enum class State : uint8_t { kFree, kReserved, kPublished, kZombie };
  struct Slot {
    State state = State::kFree;
    bool dirty = false;
    uint32_t leases = 0;
    ClientId owner = 0;  // reservation holder
    uint64_t generation = 0;
    uint64_t length = 0;
    BlockKey key;
    BlockKey ns;
    std::list<uint32_t>::iterator lru;     // valid when published
    std::list<uint32_t>::iterator ns_lru;  // in its namespace's list, when published
  };
  // A namespace's published slots, least recent first.
  struct Namespace {
    std::list<uint32_t> lru;
  };
  void FreeLocked(uint32_t slot) REQUIRES(mu_);
  void UnpublishLocked(uint32_t slot) REQUIRES(mu_);
  void ReleaseSlotsLocked(const std::vector<uint32_t>& slots) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<Slot> slots_ GUARDED_BY(mu_);
  std::vector<uint32_t> free_ GUARDED_BY(mu_);
  std::list<uint32_t> lru_ GUARDED_BY(mu_);  // published slots, least recent first
  std::unordered_map<BlockKey, uint32_t, BlockKeyHash> by_key_ GUARDED_BY(mu_);
  const uint32_t namespace_quota_;
  std::optional<KeyTable> table_ GUARDED_BY(mu_);
  std::unordered_map<BlockKey, Namespace, BlockKeyHash> namespaces_ GUARDED_BY(mu_);
  struct Lease {
    ClientId client;
    std::vector<uint32_t> slots;
  };
  std::unordered_map<uint64_t, Lease> leases_ GUARDED_BY(mu_);
  uint64_t next_lease_ GUARDED_BY(mu_) = 1;
  mutable SlotIndexStats counters_ GUARDED_BY(mu_);
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_SLOT_INDEX_H_
