// ServerClient: a process's connection to the host's `kvtier serve` daemon
// (kvtier/server.h, docs/server.md), selected by the `server` option
// ("unix:PATH"). It speaks the daemon's socket protocol and maps its arena:
// a hit is copied straight out of the arena (found in the arena's key
// table, or leased by the daemon when it had to promote it from below),
// then the slot's generation, key and length are checked again and the
// copy's XXH3-128 compared with the slot's sum (taken by the daemon over the
// bytes it verified at publish: structure, key, signature, checksums), so a
// slot reused or a byte corrupted is a counted miss, never wrong bytes.
// Such a hit makes no system call: the client checks the daemon still
// serves the arena by a word in it (its owner lock), and reports its hits
// to the daemon (counters, recency) in one frame with its next request, at
// a load or match 10 ms after the first unreported one, or at close. A match
// or load of blocks the arena holds asks the daemon nothing; a store is
// written into slots the client reserved, then published (the daemon
// verifies each block before anyone can read it). Every request is one
// round trip for a whole batch.
//
// A daemon that is down or does not answer within `timeout_ms` is not an
// error: lookups are misses and stores Unavailable, both at once for
// `reconnect_backoff_ms` after a failure; the next call after that
// reconnects (to a new daemon and arena, if one was started).
//
// Fork: a child forked from the client's process holds neither its socket
// nor its arena (a fork handler closes them there); it must not call the
// parent's client but open its own.
//
// Thread safety: any method from any thread; calls are serialized on one
// connection (one mutex; no callback runs under it).
#ifndef KVTIER_SERVER_CLIENT_H_
#define KVTIER_SERVER_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/block_key.h"
#include "kvtier/status.h"

namespace kvtier {

namespace server {
class Connection;
}

// Where the daemon holds a block (the values of CacheTier in
// kvtier/tiered_cache.h, which this layer does not include).
enum class ServerTier : uint8_t { kNone = 0, kArena = 1, kDisk = 2, kRemote = 3 };

struct ServerClientOptions {
  // "unix:PATH" of the daemon's socket. Required.
  std::string server;
  // The layout signature (ModelLayout::Signature()) of the blocks this
  // client reads and stores; the daemon refuses a client of another one
  // (so every block it publishes, each verified with the daemon's
  // signature, carries it). Required.
  std::string layout_signature;
  // How long one request may wait for the daemon's answer (connect
  // included) before it counts as down. Milliseconds, > 0. Default 1000.
  uint64_t timeout_ms = 1000;
  // After a failed request, calls answer at once (misses, Unavailable)
  // for this long before one tries to reconnect. Milliseconds. Default 200.
  uint64_t reconnect_backoff_ms = 200;

  Status Validate() const;
};

// What the client counted since Open().
struct ServerClientStats {
  uint64_t requests = 0;        // round trips made
  uint64_t lookups = 0;         // keys asked of Load
  uint64_t hits = 0;            // ... copied out and verified
  uint64_t misses = 0;          // ... not in any tier (or daemon down)
  uint64_t verify_failures = 0; // ... copied but failed the slot or block checks: misses
  uint64_t stores = 0;          // blocks published
  uint64_t store_errors = 0;    // blocks refused
  uint64_t bytes_loaded = 0;    // bytes of the hits (block files)
  uint64_t bytes_stored = 0;    // bytes of the blocks published
  uint64_t unavailable = 0;     // calls answered without the daemon (down, backoff)
  uint64_t connects = 0;        // connections made (reconnects included)
  uint64_t warmed_pages = 0;    // 2 MiB arena pages read by Connect()
};

class ServerClient {
 public:
  // Checks the options; connects lazily (a daemon not yet up is not an
  // error: calls are misses until it is).
  static Result<std::unique_ptr<ServerClient>> Open(ServerClientOptions options);
  // An engine's start-up: connects now unless connected, then reads one
  // byte of each 2 MiB page of the arena that holds a published block (at
  // most 1 s; Stats().warmed_pages), so that the process's first loads
  // after a restart copy at the steady speed instead of paying for mapping
  // the arena page by page (docs/server.md, "Huge pages"). Unavailable when
  // the daemon is down, InvalidArgument when it refuses this layout; the
  // calls after it connect lazily as without it (no backoff is started).
  Status Connect();
  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;
  ~ServerClient();

  // The tier of each leading key of `chain` some tier of the daemon holds
  // (empty when down).
  std::vector<ServerTier> Match(std::span<const BlockKey> chain);
  // Copies block keys[i] into the front of dsts[i]; returns each block's
  // length, 0 for a miss. InvalidArgument if the spans differ in length or
  // a destination is smaller than its block (that key counts as a miss;
  // the others are still loaded).
  Result<std::vector<uint64_t>> Load(std::span<const BlockKey> keys,
                                     std::span<const std::span<std::byte>> dsts);
  // One block into a new buffer; nullopt on a miss.
  std::optional<BlockBuffer> LoadBlock(const BlockKey& key);
  // Gives LoadBlocks the buffer one block is copied into: at least `size`
  // bytes (an arena slot's, which bounds every block), or why there is none.
  using BlockAllocator = std::function<Result<BlockBuffer>(size_t size)>;
  // Each block of `keys` into a new buffer of its own (nullopt: a miss),
  // handed to on_block(i, buffer) on this thread in key order: Load() in
  // rounds of up to kLoadBlocksRoundBytes of buffers (one daemon round trip
  // for the keys of a round the arena does not serve), so a long batch
  // holds at most one round's buffers at a time. The buffers come from
  // `allocate` (null: BlockBuffer::Allocate); a key whose buffer it refuses
  // (or gives smaller than asked) is a counted lookup and miss of its own,
  // and the other keys of its round load as ever.
  static constexpr uint64_t kLoadBlocksRoundBytes = uint64_t{64} << 20;
  void LoadBlocks(std::span<const BlockKey> keys,
                  const std::function<void(size_t, std::optional<BlockBuffer>)>& on_block,
                  const BlockAllocator& allocate = nullptr);
  // Stores block files under their keys (one reserve and one publish round
  // trip for the batch). InvalidArgument for spans of different lengths or
  // a block larger than an arena slot; the first block the daemon refused
  // (Corruption: it failed verification) with its position; Unavailable
  // when the daemon is down; ResourceExhausted when every slot is leased.
  Status Store(std::span<const BlockKey> keys, std::span<const std::span<const std::byte>> blocks);
  // The fastest of the daemon's tiers holding `key`; kNone on a miss or
  // when the daemon is down.
  ServerTier Contains(const BlockKey& key);
  // Removes `key` from every tier of the daemon. Unavailable when down.
  Result<bool> Erase(const BlockKey& key);
  // The daemon's counters (Server::StatsJson). Unavailable when down.
  Result<std::string> DaemonStatsJson();
  ServerClientStats Stats() const;

 private:
  explicit ServerClient(std::unique_ptr<server::Connection> conn);
  std::unique_ptr<server::Connection> conn_;
};

// Whether a daemon accepts connections on `server` ("unix:PATH") now: a
// connect that succeeds, closed at once (nothing is sent, no arena mapped;
// never blocks). false for a malformed address or nothing listening.
bool ServerAnswers(std::string_view server);

}  // namespace kvtier

#endif  // KVTIER_SERVER_CLIENT_H_
