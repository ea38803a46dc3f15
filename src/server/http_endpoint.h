// HttpEndpoint: the daemon's HTTP side (docs/server.md: GET /metrics,
// /healthz): a listening TCP socket and at most kMaxHttpConnections open
// connections, driven by the daemon's poll loop and never blocking it.
// Every socket is non-blocking. A connection reads one request head (at
// most kMaxHttpHeadBytes), gets one response from the handler, writes it
// as the socket takes it (POLLOUT when it does not at once), then shuts
// its side down and reads and drops what the client still sends until the
// client closes, so that no unread byte turns the close into a reset that
// could cut the response. A connection not done `deadline_ms` after its
// accept is closed, whatever it was doing. A connection past the cap gets
// a 503 (when its socket takes it at once) and is closed.
//
// Ownership: owns its sockets; the Env (the clock) must outlive it.
// Thread safety: one thread (the daemon's loop), Stats() included.
#ifndef KVTIER_SERVER_HTTP_ENDPOINT_H_
#define KVTIER_SERVER_HTTP_ENDPOINT_H_

#include <poll.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"
#include "server/http_message.h"

namespace kvtier::server {

// Connections open at once; more are refused.
inline constexpr size_t kMaxHttpConnections = 16;
// The longest request head read (request line and headers).
inline constexpr size_t kMaxHttpHeadBytes = 8192;

// Where to listen: the `server_http` option.
struct HttpAddress {
  sockaddr_storage addr{};
  socklen_t length = 0;
};

// "HOST:PORT" (HOST an IPv4 address, `localhost`, or an IPv6 address in
// brackets) or a bare "PORT" (on 127.0.0.1); PORT 0..65535, 0 = any free
// one. InvalidArgument (without the option's name) for anything else.
Result<HttpAddress> ParseHttpAddress(std::string_view text);

// The endpoint's counters, X(name, kind, help) (kvtier/stats_table.h).
#define KVTIER_HTTP_STATS(X)                                                                 \
  X(requests, kCounter, "HTTP requests answered (any status)")                               \
  X(bad_requests, kCounter, "HTTP requests answered 400: a malformed or oversized head")     \
  X(refused, kCounter, "HTTP connections closed at once: as many as allowed (16) were open") \
  X(timeouts, kCounter, "HTTP connections closed at their deadline, unanswered or unwritten") \
  X(connections, kGauge, "HTTP connections open")
struct HttpStats {
  KVTIER_HTTP_STATS(KVTIER_STATS_FIELD)
  KVTIER_STATS_FOR_EACH(KVTIER_HTTP_STATS)
};

class HttpEndpoint {
 public:
  // The response to one request whose head parsed (any method, any path).
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  // Binds and listens. IOError naming the address (in use, not this
  // host's). `deadline_ms` > 0.
  static Result<std::unique_ptr<HttpEndpoint>> Listen(const HttpAddress& address,
                                                      uint64_t deadline_ms, Env* env);
  HttpEndpoint(const HttpEndpoint&) = delete;
  HttpEndpoint& operator=(const HttpEndpoint&) = delete;
  // Closes the listener and every connection.
  ~HttpEndpoint();

  // Where it listens, the port the kernel chose included: "127.0.0.1:9464",
  // "[::1]:9464".
  const std::string& address() const { return address_; }

  // Appends one pollfd for the listener, then one per connection, each
  // with the events its state waits for.
  void AddPollFds(std::vector<pollfd>* fds) const;
  // How long poll may wait before a deadline passes: milliseconds, -1 for
  // no deadline.
  int PollTimeoutMs() const;
  // Does what `polled` (the entries AddPollFds appended, revents set by
  // poll) allows: reads, answers through `handler`, writes, accepts; then
  // closes the connections past their deadline.
  void Serve(std::span<const pollfd> polled, const Handler& handler);

  HttpStats Stats() const;

 private:
  struct Connection {
    enum class State { kReading, kWriting, kDraining };
    State state = State::kReading;
    uint64_t deadline_us = 0;
    std::string received;
    std::string reply;
    size_t sent = 0;
  };

  HttpEndpoint(int listen_fd, std::string address, uint64_t deadline_ms, Env* env);
  // Accepts what is waiting and reads what each new connection already sent.
  void AcceptAll(const Handler& handler);
  // Advances one connection; false when it is finished (the caller closes it).
  bool Step(int fd, Connection* c, const Handler& handler);
  bool Read(int fd, Connection* c, const Handler& handler);
  // Writes what the socket takes; false when done or the socket failed.
  bool Write(int fd, Connection* c);
  bool Drain(int fd);
  void Answer(Connection* c, const HttpResponse& response);
  void Close(int fd);

  const int listen_fd_;
  const std::string address_;
  const uint64_t deadline_us_;
  Env* const env_;
  std::map<int, Connection> connections_;  // by fd
  // accept() ran out of descriptors: the listener is not polled until then.
  uint64_t accept_paused_until_us_ = 0;
  HttpStats stats_;
};

}  // namespace kvtier::server

#endif  // KVTIER_SERVER_HTTP_ENDPOINT_H_
