// Daemon: the socket side of `kvtier serve`: the listening Unix socket, the
// connected clients and the poll loop that reads one request frame at a
// time from a ready client and answers it through ArenaService. A client
// that sends a bad frame, or is slower than client_io_timeout_ms within a
// frame, is disconnected (its leases and reservations end); the daemon
// carries on. With ServerOptions::http the same loop drives the
// HttpEndpoint: GET /metrics (RenderMetricsPage) and /healthz (200 "ok"
// until Stop(), then 503); whatever an HTTP client does, the loop never
// waits on it.
//
// Thread safety: Run() and Shutdown() on one thread; Stop() from anywhere
// (an atomic store and a write to a pipe, async-signal-safe).
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
#include "server/http_endpoint.h"
#include "server/http_message.h"

namespace kvtier::server {

class Daemon {
 public:
  static Result<std::unique_ptr<Daemon>> Open(ServerOptions options, Env* env);
  ~Daemon();

  Status Run();
  void Stop();
  Result<ServerShutdownReport> Shutdown();
  std::string StatsJson() const { return service_->StatsJson(); }
  // Where the HTTP endpoint listens ("127.0.0.1:9464"); empty without one.
  const std::string& HttpAddress() const { return http_address_; }

 private:
  struct Client {
    ClientId id = 0;
    int64_t pid = 0;  // SO_PEERCRED's; 0 when unknown
  };
  struct Sockets {
    std::string path;
    int listen_fd = -1;
    int wake_read = -1;
    int wake_write = -1;
    std::unique_ptr<HttpEndpoint> http;
  };
  Daemon(ServerOptions options, Sockets sockets, std::unique_ptr<ArenaService> service);
  void Accept();
  // Reads and answers one frame; false when the client is gone or dropped.
  bool Serve(int fd, ClientId client);
  void Drop(int fd);
  // The HTTP endpoint's answer to one request.
  HttpResponse Answer(const HttpRequest& request) const;
  std::string MetricsPage() const;

  const ServerOptions options_;
  const std::string path_;
  const std::string http_address_;
  int listen_fd_;
  int wake_read_;
  int wake_write_;
  std::unique_ptr<HttpEndpoint> http_;  // null without ServerOptions::http
  std::unique_ptr<ArenaService> service_;
  std::map<int, Client> clients_;  // by fd; loop thread only
  ClientId next_client_ = 1;
  uint64_t clients_accepted_ = 0;
  std::atomic<bool> stopping_{false};  // Stop() was called
  bool shut_down_ = false;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_DAEMON_H_
