// FakeRedisServer: a thread on a loopback socket that speaks just enough
// RESP to play a broken, slow or lying Redis in fault tests.
//
// Each connection gets a thread that parses the client's commands (RESP
// arrays of bulk strings) and asks the handler what to answer: some bytes
// (sent as they are, so anything from garbage to a 4 GiB bulk header),
// then carry on, close the connection, or stall (keep it open and answer
// nothing more); the bytes may also be trickled out one at a time, or
// written one per send(). A handler returning nullopt gets the default answers:
// PING → +PONG; AUTH, SELECT, ASKING → +OK; anything else → -ERR.
//
// Thread safety: the handler runs on the connection threads, one call at a
// time per connection (it must be safe to call from several). Log() and
// commands() may be called from any thread.
#ifndef KVTIER_TESTING_FAKE_REDIS_SERVER_H_
#define KVTIER_TESTING_FAKE_REDIS_SERVER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/status.h"

namespace kvtier::testing {

class FakeRedisServer {
 public:
  struct Reply {
    enum class Then : uint8_t { kContinue, kClose, kStall };
    std::string bytes;
    Then then = Then::kContinue;
    // > 0: `bytes` go out one at a time, this many microseconds apart (a
    // server that trickles valid replies).
    uint32_t byte_pause_micros = 0;
    // `bytes` go out one per send(), back to back, on this socket with
    // Nagle's algorithm on (as every socket here: no TCP_NODELAY): a server
    // or proxy that writes a reply in small pieces. The kernel sends the
    // first piece and holds the rest until the client acknowledges it.
    bool byte_writes = false;
  };
  using Command = std::vector<std::string>;
  using Handler = std::function<std::optional<Reply>(const Command& command)>;

  static Result<std::unique_ptr<FakeRedisServer>> Start(Handler handler);
  // Stops: closes every socket and joins every thread.
  ~FakeRedisServer();

  uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string url() const { return "redis://" + address(); }

  // Every command received so far, in arrival order (all connections).
  std::vector<Command> Log();
  // Connections accepted so far.
  uint64_t connections() const { return connections_.load(); }
  // Connections the client closed (every command sent on them is in Log()).
  uint64_t closed_connections() const { return closed_.load(); }

  // A RESP bulk string.
  static std::string Bulk(std::string_view s);

 private:
  FakeRedisServer(Handler handler, int listen_fd, uint16_t port)
      : handler_(std::move(handler)), listen_fd_(listen_fd), port_(port) {}
  void AcceptLoop();
  void Serve(int fd);

  const Handler handler_;
  const int listen_fd_;
  const uint16_t port_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> connections_{0};
  std::atomic<uint64_t> closed_{0};
  std::thread acceptor_;
  Mutex mu_;
  std::vector<std::thread> workers_ GUARDED_BY(mu_);
  std::vector<Command> log_ GUARDED_BY(mu_);
};

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_FAKE_REDIS_SERVER_H_
