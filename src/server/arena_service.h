// ArenaService: the daemon's answer to each request (server_client/wire.h):
// the arena's bytes, the SlotIndex over them, and the TieredCache below
// them (disk, remote; null when there is neither). Arena misses are looked
// up below and promoted into free slots; blocks the arena evicts and, at
// shutdown, every block not yet written go down through Store().
//
// Thread safety: Handle() and ClientGone() from the daemon's loop thread
// only (they run the cache calls and the arena copies); StatsJson() from
// any thread (SlotIndex and the counters are thread-safe).
#ifndef KVTIER_SERVER_ARENA_SERVICE_H_
#define KVTIER_SERVER_ARENA_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/server.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"
#include "server/slot_index.h"
#include "server_client/arena.h"
#include "server_client/wire.h"

namespace kvtier::server {

class ArenaService {
 public:
  // `below` may be null (an arena-only daemon). namespace_quota_slots: the
  // most slots one namespace may hold (0 = no bound but the arena's).
  ArenaService(std::unique_ptr<Arena> arena, ModelLayout layout,
               std::unique_ptr<TieredCache> below, uint32_t namespace_quota_slots = 0);

  // The reply to one request of `client`. Corruption for a frame that is
  // not a valid request (the caller closes that client); *pass_arena_fd
  // true when the reply must carry the arena's descriptor (hello).
  Status Handle(ClientId client, std::span<const uint8_t> body, std::vector<uint8_t>* reply,
                bool* pass_arena_fd);
  // The client's socket closed: its leases and reservations end.
  void ClientGone(ClientId client);
  // Writes every block not yet written to the tiers below (those left
  // after `timeout_ms` are dropped, counted; 0 = no bound), then flushes
  // and closes them.
  ServerShutdownReport WriteDownAndClose(uint64_t timeout_ms);

  int arena_fd() const { return arena_->fd(); }
  std::string StatsJson() const;

 private:
  Status Hello(FrameReader* r, FrameWriter* w);
  Status Match(FrameReader* r, FrameWriter* w);
  Status Lookup(ClientId client, FrameReader* r, FrameWriter* w);
  Status Reserve(ClientId client, FrameReader* r, FrameWriter* w);
  Status Publish(ClientId client, FrameReader* r, FrameWriter* w);
  Status Contains(FrameReader* r, FrameWriter* w);
  Status Erase(FrameReader* r, FrameWriter* w);
  // Brings arena misses among `keys` in from the tiers below (clean).
  void PromoteMisses(std::span<const BlockKey> keys);
  // Sends blocks the arena evicted down (dirty ones) before their slots
  // are reused.
  void WriteDown(const std::vector<EvictedBlock>& evicted);
  // Copies one published slot out and stores it below; true if taken.
  bool StoreBelow(uint32_t slot, const BlockKey& key, uint64_t length);
  // The block file in `bytes` is whole and `key`'s (structure, key,
  // signature, checksums); returns its namespace.
  Result<BlockKey> Verify(std::span<const std::byte> bytes, const BlockKey& key) const;

  std::unique_ptr<Arena> arena_;
  const ModelLayout layout_;
  const std::string signature_;
  std::unique_ptr<TieredCache> below_;
  SlotIndex index_;
  std::atomic<uint64_t> written_down_{0}, dropped_{0}, promoted_{0}, publish_refused_{0},
      bad_frames_{0};
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_ARENA_SERVICE_H_
