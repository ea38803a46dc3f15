// HttpEndpoint on a real loopback socket, driven by a loop of the test's
// own (the daemon's, reduced to the endpoint): answers written in pieces
// as a slow reader takes them, connections past the cap refused, silent
// ones closed at their deadline, oversized heads answered 400.
#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"

namespace kvtier::server {
namespace {

// Bounds that end a hung test on a busy machine; not what is measured.
constexpr int kHangMs = 60'000;

// The endpoint and a thread running its poll loop until destroyed. The
// handler answers GET /big with `big_body`, anything else with its path.
class EndpointLoop {
 public:
  EndpointLoop(uint64_t deadline_ms, size_t big_bytes) : big_(big_bytes, 'b') {
    Result<HttpAddress> a = ParseHttpAddress("127.0.0.1:0");
    Result<std::unique_ptr<HttpEndpoint>> e = HttpEndpoint::Listen(*a, deadline_ms, Env::Default());
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    endpoint_ = std::move(*e);
    port_ = static_cast<uint16_t>(std::stoi(endpoint_->address().substr(10)));
    thread_ = std::thread([this] { Loop(); });
  }
  ~EndpointLoop() {
    stop_.store(true);
    thread_.join();
  }
  uint16_t port() const { return port_; }
  HttpStats Stats() {
    MutexLock lock(&mu_);
    return endpoint_->Stats();
  }

 private:
  void Loop() {
    const HttpEndpoint::Handler handler = [this](const HttpRequest& r) {
      HttpResponse resp;
      resp.body = r.path == "/big" ? big_ : r.path;
      return resp;
    };
    while (!stop_.load()) {
      MutexLock lock(&mu_);
      std::vector<pollfd> fds;
      endpoint_->AddPollFds(&fds);
      const int t = endpoint_->PollTimeoutMs();
      // Short turns: the destructor's stop flag is seen soon.
      ::poll(fds.data(), fds.size(), t < 0 || t > 20 ? 20 : t);
      endpoint_->Serve(fds, handler);
    }
  }

  const std::string big_;
  std::unique_ptr<HttpEndpoint> endpoint_;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  Mutex mu_;
  std::thread thread_;
};

int ConnectTo(uint16_t port, int rcvbuf = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << errno;
  return fd;
}

// Everything the peer sends until it closes (a reset ends it too).
std::string ReadToEnd(int fd) {
  std::string got;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kHangMs) != 1) {
      ADD_FAILURE() << "no end of the answer within " << kHangMs << " ms";
      return got;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return got;
    got.append(buf, static_cast<size_t>(n));
  }
}

void SendAll(int fd, const std::string& text) {
  ASSERT_EQ(::send(fd, text.data(), text.size(), MSG_NOSIGNAL), static_cast<ssize_t>(text.size()));
}

TEST(HttpEndpoint, ABigAnswerReachesASlowReaderWhole) {
  // 8 MiB: more than a socket's send buffer grows to (tcp_wmem's 4 MiB
  // at most by default) plus the reader's small receive buffer, so the
  // endpoint writes it in pieces as the reader makes room.
  constexpr size_t kBig = 8u << 20;
  EndpointLoop loop(kHangMs, kBig);
  const int fd = ConnectTo(loop.port(), 4096);
  SendAll(fd, "GET /big HTTP/1.1\r\n\r\n");
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    ASSERT_EQ(::poll(&p, 1, kHangMs), 1);
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  const std::string head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\n"
                           "Content-Length: 8388608\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(got.size(), head.size() + kBig);
  EXPECT_EQ(got.substr(0, head.size()), head);
  EXPECT_EQ(got.find_first_not_of('b', head.size()), std::string::npos);
  const HttpStats s = loop.Stats();
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.timeouts, 0u);
}

TEST(HttpEndpoint, ConnectionsPastTheCapAreRefusedAndTheOthersStillServed) {
  EndpointLoop loop(kHangMs, 0);
  std::vector<int> idle;
  for (size_t i = 0; i < kMaxHttpConnections; ++i) idle.push_back(ConnectTo(loop.port()));
  // Accepted in the order they connected: this one is the 17th.
  const int extra = ConnectTo(loop.port());
  EXPECT_EQ(ReadToEnd(extra),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n");
  ::close(extra);
  // The sixteen held connections are served as any.
  SendAll(idle[3], "GET /three HTTP/1.1\r\n\r\n");
  const std::string three = ReadToEnd(idle[3]);
  EXPECT_EQ(three.substr(three.size() - 6), "/three");
  for (int fd : idle) ::close(fd);
  const HttpStats s = loop.Stats();
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.requests, 1u);
}

TEST(HttpEndpoint, SilentConnectionsAreClosedAtTheirDeadline) {
  EndpointLoop loop(/*deadline_ms=*/300, 0);
  const int silent = ConnectTo(loop.port());
  const int partial = ConnectTo(loop.port());
  SendAll(partial, "GET /met");
  EXPECT_EQ(ReadToEnd(silent), "");
  EXPECT_EQ(ReadToEnd(partial), "");
  ::close(silent);
  ::close(partial);
  const HttpStats s = loop.Stats();
  EXPECT_EQ(s.timeouts, 2u);
  EXPECT_EQ(s.requests, 0u);
  EXPECT_EQ(s.connections, 0u);
}

TEST(HttpEndpoint, AnOversizedHeadIsAnswered400AndTheRestDrained) {
  EndpointLoop loop(kHangMs, 0);
  const int fd = ConnectTo(loop.port());
  // A head past 8 KiB, and more after it: the endpoint answers, then reads
  // and drops the rest, so the answer is not cut by a reset.
  SendAll(fd, "GET /x HTTP/1.1\r\nX: " + std::string(kMaxHttpHeadBytes + 20000, 'a'));
  ::shutdown(fd, SHUT_WR);
  EXPECT_EQ(ReadToEnd(fd),
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 56\r\nConnection: close\r\n\r\n"
            "bad request: the request head is longer than 8192 bytes\n");
  ::close(fd);
  EXPECT_EQ(loop.Stats().bad_requests, 1u);
}

TEST(HttpEndpoint, ARequestWhoseSenderClosedItsSideIsStillAnswered) {
  EndpointLoop loop(kHangMs, 0);
  const int fd = ConnectTo(loop.port());
  SendAll(fd, "GET /half HTTP/1.0\r\n\r\n");
  ::shutdown(fd, SHUT_WR);
  const std::string got = ReadToEnd(fd);
  EXPECT_EQ(got.substr(0, 15), "HTTP/1.1 200 OK");
  EXPECT_EQ(got.substr(got.size() - 5), "/half");
  ::close(fd);
}

}  // namespace
}  // namespace kvtier::server
