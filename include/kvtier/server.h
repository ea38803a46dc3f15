// Server: the `kvtier serve` daemon (DESIGN.md §2, docs/server.md). One per
// host: it owns the host tier as a shared-memory arena of block slots that
// its clients map, and below it a TieredCache for the disk folder and the
// remote tier. Clients (kvtier/server_client.h) reach it over a Unix socket;
// block bytes never cross the socket: a client copies a hit out of the
// arena under a read lease, and writes a store into a slot it reserved,
// then publishes it (the daemon verifies the block file before it does).
// A client's leases and reservations end when its socket closes. With
// ServerOptions::http it also answers HTTP GET /metrics (Prometheus text)
// and /healthz on a TCP port, from the same loop.
//
// One trust domain: every client that can open the socket (0600 by
// default) can read and write every block in the arena.
//
// Ownership: Open() returns the only owner; the Env must outlive it.
// Thread safety: Run() on one thread; Stop() from any thread or a signal
// handler (it writes one byte to a pipe); Shutdown() after Run returned.
#ifndef KVTIER_SERVER_H_
#define KVTIER_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier {

namespace server {
class Daemon;
}

struct ServerOptions {
  // The socket to listen on: the `server` option's "unix:PATH". A stale
  // socket file (nobody answering) is replaced; a live one is an error.
  // Required.
  std::string server;
  // The layout of every block served: clients of another signature are
  // refused at hello; each slot holds one block file of this layout.
  // Required.
  ModelLayout layout;
  // The arena's budget is cache.host.capacity_bytes (whole slots of
  // SlotBytes() each, at least one); cache.disk and cache.remote are the
  // tiers below it, opened as a TieredCache (its own host tier is kept to
  // one slot: the arena is the RAM tier). Blocks the arena evicts, and on
  // Shutdown() every block not yet written, go to the disk tier
  // (write-through) and the remote tier; with neither they are dropped,
  // counted.
  CacheOptions cache;
  // The most bytes of the arena one namespace's blocks may hold (whole
  // slots: at least one): a namespace at its quota makes room for a new
  // block by evicting its own least recent one, never another namespace's.
  // The namespace is the block file's `ns` (DESIGN.md §3: model id,
  // signature, salt, adapter, extra). 0 = no bound but the arena's.
  uint64_t namespace_quota_bytes = 0;
  // Permission bits of the socket file. Default 0600 (owner only).
  uint32_t socket_permissions = 0600;
  // A group (name, or number) given the socket file, with read and write
  // for it (socket_permissions | 0660's group bits): processes of its
  // members may connect, and so read and write every block. The daemon's
  // user must be a member (or root). Empty (default): the owner only.
  std::string socket_group;
  // How long one frame of a client may take to arrive or leave once begun;
  // a client slower than that is disconnected. Milliseconds. Default 2000.
  // Also how long an HTTP connection may take from its accept to the end
  // of its response.
  uint64_t client_io_timeout_ms = 2000;
  // Where to answer HTTP GET /metrics and /healthz (docs/server.md): the
  // `server_http` option, "HOST:PORT" (HOST an IPv4 address, localhost or
  // [IPv6]) or a bare "PORT" on 127.0.0.1; port 0 = one the kernel picks
  // (Server::HttpAddress() says which). Empty: no HTTP (the default).
  std::string http;

  // Bytes per arena slot: the layout's block bytes plus room for the
  // header, rounded up to 4 KiB.
  uint64_t SlotBytes() const;
  // namespace_quota_bytes in whole slots (at least 1; 0 = no quota).
  uint32_t NamespaceQuotaSlots() const;
  // InvalidArgument naming the bad field.
  Status Validate() const;
};

// What Shutdown() did.
struct ServerShutdownReport {
  uint64_t blocks_written = 0;  // arena blocks handed to the disk (and remote) tier
  uint64_t blocks_dropped = 0;  // ... that no tier below took (none, or it refused)
  uint64_t clients_closed = 0;
};

class Server {
 public:
  // Creates the arena, opens the tiers below it and listens on the socket.
  static Result<std::unique_ptr<Server>> Open(ServerOptions options, Env* env);
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  // Shutdown(), ignoring its status.
  ~Server();

  // Serves clients until Stop(). IOError if polling fails.
  Status Run();
  // Makes Run() return soon; HTTP requests already received are answered
  // first, and /healthz answers 503 from then on. Async-signal-safe.
  void Stop();
  // Closes the HTTP endpoint (connections are refused from then on) and
  // every client (their leases and reservations end), writes every
  // arena block not yet written to the tiers below within
  // cache.close_timeout_ms, closes them and removes the socket file.
  // Idempotent (later calls report zeros).
  Result<ServerShutdownReport> Shutdown();

  // The daemon's counters as one JSON object: "arena" and "cache" (the
  // tiers below, CacheStats::ToJson).
  std::string StatsJson() const;
  // Where the HTTP endpoint listens, the port included ("127.0.0.1:9464",
  // "[::1]:9464"); empty without ServerOptions::http.
  std::string HttpAddress() const;

 private:
  explicit Server(std::unique_ptr<server::Daemon> daemon);
  std::unique_ptr<server::Daemon> daemon_;
};

}  // namespace kvtier

#endif  // KVTIER_SERVER_H_
