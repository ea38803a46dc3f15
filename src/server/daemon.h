// Daemon: the socket side of `kvtier serve`: the listening Unix socket, the
// connected clients and the poll loop that reads one request frame at a
// time from a ready client and answers it through ArenaService. A client
// that sends a bad frame, or is slower than client_io_timeout_ms within a
// frame, is disconnected (its leases and reservations end); the daemon
// carries on.
//
// Thread safety: Run() and Shutdown() on one thread; Stop() from anywhere
// (a write to a pipe, async-signal-safe).
#ifndef KVTIER_SERVER_DAEMON_H_
#define KVTIER_SERVER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "kvtier/server.h"
#include "kvtier/status.h"
#include "server/arena_service.h"

namespace kvtier::server {

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Open(ServerOptions options, Env* env);
  ~Daemon();

  Status Run();
  void Stop();
  Result<ServerShutdownReport> Shutdown();
  std::string StatsJson() const { return service_->StatsJson(); }

 private:
  Daemon(ServerOptions options, std::string path, int listen_fd, int wake_read, int wake_write,
         std::unique_ptr<ArenaService> service);
  void Accept();
  // Reads and answers one frame; false when the client is gone or dropped.
  bool Serve(int fd, ClientId client);
  void Drop(int fd);

  const ServerOptions options_;
  const std::string path_;
  int listen_fd_;
  int wake_read_;
  int wake_write_;
  std::unique_ptr<ArenaService> service_;
  std::map<int, ClientId> clients_;  // loop thread only
  ClientId next_client_ = 1;
  bool shut_down_ = false;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_DAEMON_H_
