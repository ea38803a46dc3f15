// Connection: one client's socket to the daemon and its mapping of the
// arena, with the reconnect rule of kvtier/server_client.h: a transport
// failure (timeout, closed socket, bad reply) drops the connection and
// starts a backoff during which Call() fails at once with Unavailable.
// Connecting sends HELLO with the layout signature and maps the arena
// descriptor that comes back.
//
// Fork: in a child forked while a connection is open, a fork handler closes
// the child's copy of its socket and of the arena's descriptor (the mapping
// is not inherited), so the daemon sees the parent's connection, leases and
// reservations end when the parent's do, and the child holds no arena
// memory. The child must not use the parent's object (its mutex may be held
// forever there by a thread that did not survive the fork); it opens a
// client of its own.
//
// Thread safety: Call() and the arena it hands out are guarded by the one
// mutex the caller takes with Lock(); counters are atomics.
#ifndef KVTIER_SERVER_CLIENT_CONNECTION_H_
#define KVTIER_SERVER_CLIENT_CONNECTION_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "kvtier/server_client.h"
#include "server_client/arena.h"
#include "server_client/wire.h"

namespace kvtier::server {

class Connection {
 public:
  Connection(ServerClientOptions options, std::string socket_path);
  ~Connection();

  Mutex* mu() RETURN_CAPABILITY(mu_) { return &mu_; }
  // Sends `request` and returns the reply's body after its header and
  // status (a reader positioned on the op's fields). The reply's own
  // status (the daemon refused) is returned as is, the connection kept;
  // a transport failure is Unavailable and drops it. REQUIRES: mu() held.
  Result<std::vector<uint8_t>> Call(FrameWriter* request) REQUIRES(mu_);
  // Sends `request`, which the daemon does not answer (release), when
  // connected; nothing when not (what it would end ended with the
  // connection). A failed send drops the connection. Not a round trip:
  // counters.requests is not counted. REQUIRES: mu() held.
  void Post(FrameWriter* request) REQUIRES(mu_);
  // The mapped arena of the current connection; null when not connected.
  // REQUIRES: mu() held.
  Arena* arena() REQUIRES(mu_) { return arena_.get(); }
  // The arena, if connected and its daemon still serves (its owner lock's
  // word as at connect: a memory read, no system call; what a client reads
  // from the arena without asking must not outlive the daemon). A daemon
  // gone drops the connection (and backs off); null then and when not
  // connected. REQUIRES: mu() held.
  Arena* LiveArena() REQUIRES(mu_);
  // ServerClient::Connect: connects now if not connected (no backoff after
  // a failure: the next call tries again as if this one had not been made),
  // then reads the published blocks' pages of the arena it mapped
  // (Arena::WarmPublished) for at most kWarmBudgetUs, counted in
  // counters.warmed_pages. Connected already: Ok, nothing read.
  static constexpr uint64_t kWarmBudgetUs = 1'000'000;
  Status ConnectNow() REQUIRES(mu_);
  // A reply that made no sense: drops the connection (and backs off).
  void Drop() REQUIRES(mu_);

  // Arena reads to report (docs/server.md, "Reads"): the daemon counts each
  // as a hit and makes its block the most recent when it takes the touch
  // frame, which it does not answer. Queued, then sent in one frame ahead of
  // the next request (Call), when kTouchBatch are queued, at a
  // FlushTouchesIfDue() kTouchDelayUs or more after the first was queued, or
  // when the connection is destroyed; dropped with the connection. So a
  // load the arena serves sends nothing: a send wakes the daemon, which
  // cost more than the copies of a batch of small blocks.
  static constexpr size_t kTouchBatch = 4096;
  static constexpr uint64_t kTouchDelayUs = 10'000;
  void QueueTouch(uint32_t slot, uint64_t generation) REQUIRES(mu_);
  void FlushTouchesIfDue() REQUIRES(mu_);
  // The fork handler's work in the child (see Fork above): no lock taken,
  // the child has one thread. Async-signal-safe (close only).
  void AbandonAfterFork() NO_THREAD_SAFETY_ANALYSIS;

  ServerClientStats counters;  // fields updated under mu_
  const ServerClientOptions& options() const { return options_; }

 private:
  Status ConnectLocked() REQUIRES(mu_);
  void DisconnectLocked() REQUIRES(mu_);
  // Sends the queued touches (a failed send drops the connection).
  void SendTouches() REQUIRES(mu_);

  const ServerClientOptions options_;
  const std::string path_;
  const std::string signature_;
  Mutex mu_;
  int fd_ GUARDED_BY(mu_) = -1;
  std::unique_ptr<Arena> arena_ GUARDED_BY(mu_);
  uint32_t owner_ GUARDED_BY(mu_) = 0;  // the arena's owner word at connect
  uint64_t retry_after_us_ GUARDED_BY(mu_) = 0;
  std::vector<std::pair<uint32_t, uint64_t>> touches_ GUARDED_BY(mu_);  // slot, generation
  uint64_t first_touch_us_ GUARDED_BY(mu_) = 0;
};

// Reads a reply body: header (op must be `op`), then the status. The
// reader is left on the op's fields.
Status ReadReplyHead(FrameReader* r, Op op);

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_CLIENT_CONNECTION_H_
