// ArenaService: the daemon's answer to each request (server_client/wire.h):
// the arena's bytes, the SlotIndex over them, and the TieredCache below
// them (disk, remote; null when there is neither). Arena misses are looked
// up below and promoted into free slots; blocks the arena evicts and, at
// shutdown, every block not yet written go down through Store().
//
// Thread safety: Handle() and ClientGone() from the daemon's loop thread
// only (they run the cache calls and the arena copies); Stats(),
// BelowStats(), Holdings() and StatsJson() from any thread (SlotIndex, the
// counters and TieredCache::Stats are thread-safe).
#ifndef KVTIER_SERVER_ARENA_SERVICE_H_
#define KVTIER_SERVER_ARENA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/layout.h"
#include "kvtier/server.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"
#include "server/slot_index.h"
#include "server_client/arena.h"
#include "server_client/wire.h"

namespace kvtier::server {

// The arena's figures, X(name, kind, help) (kvtier/stats_table.h): the
// "arena" object of the stats JSON, and on /metrics kvtier_server_arena_*
// (the figures every tier has go to the tier="arena" samples instead: see
// metrics_page.h).
#define KVTIER_ARENA_STATS(X)                                                                   \
  X(slots, kGauge, "slots in the arena")                                                        \
  X(slot_bytes, kGauge, "bytes per slot (a block file and room for its header)")                \
  X(free, kGauge, "slots holding nothing")                                                      \
  X(reserved, kGauge, "slots reserved by a client and not yet published")                       \
  X(published, kGauge, "slots holding a block clients can look up")                             \
  X(published_bytes, kGauge, "their blocks' bytes")                                             \
  X(dirty, kGauge, "published slots not yet written to the tiers below")                       \
  X(leased, kGauge, "slots under at least one read lease")                                      \
  X(leases_open, kGauge, "read leases open")                                                    \
  X(lookups, kCounter, "keys clients looked up")                                                \
  X(hits, kCounter, "keys found in the arena (promoted from below included) and leased")        \
  X(evictions, kCounter, "blocks evicted to make room (least recently used, never leased)")     \
  X(publishes, kCounter, "blocks published: clients' stores and promotions from below")         \
  X(duplicate_publishes, kCounter, "publishes of a key already held (the new slot freed)")      \
  X(publish_refused, kCounter, "publishes refused: bad slot or length, or a bad block file")    \
  X(reserve_failures, kCounter, "reserves refused: too few slots free or evictable")            \
  X(client_releases, kCounter, "clients gone with leases or reservations, which ended")         \
  X(namespaces, kGauge, "key namespaces with a block in the arena")                             \
  X(quota_evictions, kCounter, "blocks a namespace at its quota evicted to publish another")    \
  X(quota_refusals, kCounter, "publishes refused: the namespace at its quota, all of it leased") \
  X(promoted, kCounter, "blocks copied in from the disk or remote tier")                        \
  X(written_down, kCounter, "dirty blocks handed to the tiers below (evicted, or at shutdown)") \
  X(dropped, kCounter, "dirty blocks no tier below took")                                       \
  X(bad_frames, kCounter, "requests that were not valid frames (their client was closed)")
struct ArenaStats {
  KVTIER_ARENA_STATS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_ARENA_STATS)
};

class ArenaService {
 public:
  // `below` may be null (an arena-only daemon). namespace_quota_slots: the
  // most slots one namespace may hold (0 = no bound but the arena's).
  ArenaService(std::unique_ptr<Arena> arena, ModelLayout layout,
               std::unique_ptr<TieredCache> below, uint32_t namespace_quota_slots = 0);

  // The reply to one request of `client`; empty for a request that is not
  // answered (release). An error for a frame that is not a valid request
  // (the caller closes that client); *pass_arena_fd true when the reply
  // must carry the arena's descriptor (hello).
  Status Handle(ClientId client, std::span<const uint8_t> body, std::vector<uint8_t>* reply,
                bool* pass_arena_fd);
  // The client's socket closed: its leases and reservations end.
  void ClientGone(ClientId client);
  // Writes every block not yet written to the tiers below (those left
  // after `timeout_ms` are dropped, counted; 0 = no bound), then flushes
  // and closes them.
  ServerShutdownReport WriteDownAndClose(uint64_t timeout_ms);

  int arena_fd() const { return arena_->fd(); }
  // The serving thread holds the arena's owner lock between these (a
  // client believes the arena while it is held: server_client/arena.h).
  Status BeginServing() { return arena_->LockOwner(); }
  void EndServing() { arena_->UnlockOwner(); }
  ArenaStats Stats() const;
  // The TieredCache's below the arena; nullopt when there is none.
  std::optional<CacheStats> BelowStats() const;
  // What each client holds (SlotIndex::Holdings).
  std::map<ClientId, ClientHoldings> Holdings() const { return index_.Holdings(); }
  // Slots held per key namespace, largest first (SlotIndex::Namespaces).
  std::vector<NamespaceUsage> Namespaces() const { return index_.Namespaces(); }
  // {"arena": ArenaStats, "cache": CacheStats::ToJson() or null}.
  std::string StatsJson() const;

 private:
  // *accepted: the layout is the daemon's (only then does the reply carry
  // the arena's descriptor).
  Status Hello(FrameReader* r, FrameWriter* w, bool* accepted);
  Status Match(FrameReader* r, FrameWriter* w);
  Status Lookup(ClientId client, FrameReader* r, FrameWriter* w);
  Status Reserve(ClientId client, FrameReader* r, FrameWriter* w);
  Status Publish(ClientId client, FrameReader* r, FrameWriter* w);
  Status Contains(FrameReader* r, FrameWriter* w);
  Status Erase(FrameReader* r, FrameWriter* w);
  // Brings arena misses among `keys` in from the tiers below (clean).
  void PromoteMisses(std::span<const BlockKey> keys);
  // Makes a slot the index just reserved a new block's: its header cleared,
  // its generation bumped, before anyone writes it.
  void HandOver(const SlotRef& s);
  // Sends blocks the arena evicted down (dirty ones) before their slots
  // are reused.
  void WriteDown(const std::vector<EvictedBlock>& evicted);
  // Copies one published slot out and stores it below; true if taken.
  bool StoreBelow(uint32_t slot, const BlockKey& key, uint64_t length);
  // The block file in `bytes` is whole and `key`'s (structure, key,
  // signature, checksums); returns its namespace.
  Result<BlockKey> Verify(std::span<const std::byte> bytes, const BlockKey& key) const;
  // Copies `length` bytes of a reserved slot into scratch_, verifies the
  // copy as `key`'s block and returns its namespace and sum (Arena's slot
  // sum: of the bytes verified, which the client may still be writing in
  // the arena).
  struct Verified {
    BlockKey ns;
    SlotSum sum;
  };
  Result<Verified> CopyAndVerify(uint32_t slot, uint64_t length, const BlockKey& key);

  std::unique_ptr<Arena> arena_;
  const ModelLayout layout_;
  const std::string signature_;
  std::unique_ptr<TieredCache> below_;
  SlotIndex index_;
  // CopyAndVerify's copy (loop thread only), allocated at the first publish.
  std::optional<BlockBuffer> scratch_;
  std::atomic<uint64_t> written_down_{0}, dropped_{0}, promoted_{0}, publish_refused_{0},
      bad_frames_{0};
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_ARENA_SERVICE_H_
