// The daemon's HTTP endpoint (docs/server.md) through kvtier::Server in
// this process, its loop on a thread: /metrics's exact figures after a
// store and a hit, with HELP and TYPE for every family and the `tier` and
// `client` labels; /healthz 200, then 503 once Stop() was called, then
// refused after Shutdown(); 404, 405, 400; and Unix-socket clients served
// while HTTP clients hang.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/stats_render.h"
#include "kvtier/layout.h"
#include "kvtier/server.h"
#include "kvtier/server_client.h"
#include "server_client/socket_probe.h"
#include "server_client/wire.h"
#include "synth/block_generator.h"
#include "testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::HasSubstr;

// Bounds that end a hung test on a busy machine; not what is measured.
constexpr int kDaemonHangMs = 60'000;

ModelLayout TinyLayout() { return *ModelLayout::Resolve(Env::Default(), "tiny", 0); }

BlockBuffer TinyBlock(uint64_t i) {
  Result<BlockBuffer> b = MakeBlockFile(TinyLayout(), TestBlockKey(i), BlockKey{}, BlockKey{}, 1);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(*b);
}

// A daemon with a 4-slot arena, a disk tier below it and HTTP on a port
// the kernel picks, Run() on a thread.
class HttpDaemon {
 public:
  explicit HttpDaemon(uint64_t io_timeout_ms = kDaemonHangMs) {
    ServerOptions o;
    o.server = "unix:" + socket_path();
    o.layout = TinyLayout();
    o.cache.host.capacity_bytes = 4 * o.SlotBytes();
    DiskTierOptions disk;
    disk.dir = dir_.path() + "/cache";
    o.cache.disk = disk;
    o.http = "127.0.0.1:0";
    o.client_io_timeout_ms = io_timeout_ms;
    Result<std::unique_ptr<Server>> s = Server::Open(o, Env::Default());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    const std::string address = server_->HttpAddress();
    EXPECT_EQ(address.substr(0, 10), "127.0.0.1:");
    port_ = static_cast<uint16_t>(std::stoi(address.substr(10)));
    Start();
  }
  ~HttpDaemon() {
    if (thread_.joinable()) StopAndJoin();
    (void)server_->Shutdown();
  }
  void Start() {
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
  }
  void StopAndJoin() {
    server_->Stop();
    thread_.join();
  }
  Server* server() { return server_.get(); }
  uint16_t port() const { return port_; }
  std::string socket_path() const { return dir_.path() + "/s.sock"; }

  std::unique_ptr<ServerClient> Client() {
    ServerClientOptions o;
    o.server = "unix:" + socket_path();
    o.layout_signature = TinyLayout().Signature();
    o.timeout_ms = kDaemonHangMs;
    Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(o);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return std::move(*c);
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<Server> server_;
  uint16_t port_ = 0;
  std::thread thread_;
};

// A client on the daemon's socket speaking the wire format itself, so
// that it can hold a lease and reservations while /metrics is read.
class RawWireClient {
 public:
  explicit RawWireClient(const std::string& path) {
    Result<int> fd = server::DialUnixSocket(path);
    EXPECT_TRUE(fd.ok()) << fd.status().ToString();
    fd_ = fd.value_or(-1);
    server::FrameWriter hello(server::Op::kHello);
    hello.Str16(TinyLayout().Signature());
    Call(&hello);
  }
  ~RawWireClient() { ::close(fd_); }
  // Sends the request and checks that the reply says OK.
  void Call(server::FrameWriter* request) {
    const uint64_t deadline = server::MonotonicMicros() + kDaemonHangMs * uint64_t{1000};
    ASSERT_TRUE(server::SendFrame(fd_, request->Finish(), deadline).ok());
    std::vector<uint8_t> body;
    int passed_fd = -1;
    ASSERT_TRUE(server::RecvFrame(fd_, &body, deadline, &passed_fd).ok());
    if (passed_fd >= 0) ::close(passed_fd);  // the arena: not mapped here
    server::FrameReader r(body);
    ASSERT_TRUE(r.Header().ok());
    EXPECT_TRUE(r.StatusOf().ok());
  }

 private:
  int fd_ = -1;
};

// A TCP connection to 127.0.0.1:port; -1 with errno set when refused.
int DialHttp(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// Reads what the daemon sends on `fd` up to its close, and closes `fd`.
std::string ReadAnswer(int fd) {
  std::string got;
  char buf[65536];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, kDaemonHangMs) != 1) {
      ADD_FAILURE() << "no answer within " << kDaemonHangMs << " ms";
      break;
    }
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return got;
}

// Sends `request` on `fd` and reads the answer up to the daemon's close.
std::string ExchangeOn(int fd, const std::string& request) {
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
            static_cast<ssize_t>(request.size()));
  return ReadAnswer(fd);
}

std::string Exchange(uint16_t port, const std::string& request) {
  const int fd = DialHttp(port);
  EXPECT_GE(fd, 0) << "connect: errno " << errno;
  return fd < 0 ? "" : ExchangeOn(fd, request);
}

// The body of an answer (after its blank line).
std::string BodyOf(const std::string& answer) {
  const size_t blank = answer.find("\r\n\r\n");
  return blank == std::string::npos ? "" : answer.substr(blank + 4);
}

// Every line of the page that starts with `prefix` (samples, HELP, TYPE).
std::string LinesOf(const std::string& page, const std::string& family) {
  std::istringstream in(page);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(family + " ", 0) == 0 || line.rfind(family + "{", 0) == 0 ||
        line.rfind("# HELP " + family + " ", 0) == 0 ||
        line.rfind("# TYPE " + family + " ", 0) == 0) {
      out += line + "\n";
    }
  }
  return out;
}

// Families that break the exposition format's rules: a sample whose family
// has no TYPE line before it, a TYPE line without its HELP line right
// before it (`need_help`), a family declared twice.
std::vector<std::string> FamilyProblems(const std::string& page, bool need_help,
                                        const std::string& prefix) {
  std::vector<std::string> problems;
  std::set<std::string> typed;
  std::istringstream in(page);
  std::string previous;
  for (std::string line; std::getline(in, line); previous = line) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string name = line.substr(7, line.find(' ', 7) - 7);
      if (name.rfind(prefix, 0) != 0) continue;
      if (!typed.insert(name).second) problems.push_back("twice: " + name);
      if (need_help && previous.rfind("# HELP " + name + " ", 0) != 0) {
        problems.push_back("no HELP: " + name);
      }
    } else if (!line.empty() && line[0] != '#' && line.rfind(prefix, 0) == 0) {
      std::string name = line.substr(0, line.find_first_of("{ "));
      // A histogram's samples belong to the family without the suffix.
      for (const char* suffix : {"_bucket", "_sum", "_count"}) {
        const std::string s(suffix);
        if (typed.count(name) == 0 && name.size() > s.size() &&
            name.compare(name.size() - s.size(), s.size(), s) == 0) {
          name.resize(name.size() - s.size());
        }
      }
      if (typed.count(name) == 0) problems.push_back("no TYPE: " + name);
    }
  }
  return problems;
}

TEST(DaemonHttp, MetricsShowTheExactFiguresWithHelpTypeAndLabels) {
  HttpDaemon d;
  const BlockBuffer b0 = TinyBlock(0);
  const BlockKey k0 = TestBlockKey(0);
  // Client 1: a store, a hit, a miss (asked of the disk tier below too).
  std::unique_ptr<ServerClient> c = d.Client();
  const std::span<const std::byte> spans[] = {{b0.data(), b0.size()}};
  ASSERT_TRUE(c->Store(std::span<const BlockKey>(&k0, 1), spans).ok());
  std::optional<BlockBuffer> got = c->LoadBlock(k0);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::vector<std::byte>(got->data(), got->data() + got->size()),
            std::vector<std::byte>(b0.data(), b0.data() + b0.size()));
  EXPECT_FALSE(c->LoadBlock(TestBlockKey(1)).has_value());
  // Client 2: holds a lease on the block and two reserved slots.
  RawWireClient raw(d.socket_path());
  server::FrameWriter lookup(server::Op::kLookup);
  server::WriteKeys(&lookup, std::span<const BlockKey>(&k0, 1));
  raw.Call(&lookup);
  server::FrameWriter reserve(server::Op::kReserve);
  reserve.U32(2);
  reserve.U64(b0.size());
  reserve.U64(b0.size());
  raw.Call(&reserve);

  const std::string answer = Exchange(d.port(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string page = BodyOf(answer);
  EXPECT_EQ(answer.substr(0, answer.find("Content-Length")),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n");
  EXPECT_THAT(answer, HasSubstr("\r\nContent-Length: " + std::to_string(page.size()) + "\r\n"));

  EXPECT_EQ(LinesOf(page, "kvtier_server_clients"),
            "# HELP kvtier_server_clients clients connected to the Unix socket\n"
            "# TYPE kvtier_server_clients gauge\n"
            "kvtier_server_clients 2\n");
  EXPECT_EQ(LinesOf(page, "kvtier_server_blocks"),
            "# HELP kvtier_server_blocks blocks the tier holds (disk: of the daemon's layout)\n"
            "# TYPE kvtier_server_blocks gauge\n"
            "kvtier_server_blocks{tier=\"arena\"} 1\n"
            "kvtier_server_blocks{tier=\"host\"} 0\n"
            "kvtier_server_blocks{tier=\"disk\"} 0\n");
  EXPECT_EQ(LinesOf(page, "kvtier_server_bytes"),
            "# HELP kvtier_server_bytes their bytes\n"
            "# TYPE kvtier_server_bytes gauge\n"
            "kvtier_server_bytes{tier=\"arena\"} " + std::to_string(b0.size()) + "\n"
            "kvtier_server_bytes{tier=\"host\"} 0\n"
            "kvtier_server_bytes{tier=\"disk\"} 0\n");
  // Two hits in the arena (client 1's load, client 2's lookup); the miss
  // was asked of the arena, then of the disk tier below it.
  EXPECT_EQ(LinesOf(page, "kvtier_server_hits_total"),
            "# HELP kvtier_server_hits_total keys the tier served (arena: to clients; below it: "
            "to promotions)\n"
            "# TYPE kvtier_server_hits_total counter\n"
            "kvtier_server_hits_total{tier=\"arena\"} 2\n"
            "kvtier_server_hits_total{tier=\"host\"} 0\n"
            "kvtier_server_hits_total{tier=\"disk\"} 0\n");
  EXPECT_EQ(LinesOf(page, "kvtier_server_misses_total"),
            "# HELP kvtier_server_misses_total keys asked of the tier that it did not serve\n"
            "# TYPE kvtier_server_misses_total counter\n"
            "kvtier_server_misses_total{tier=\"arena\"} 1\n"
            "kvtier_server_misses_total{tier=\"host\"} 1\n"
            "kvtier_server_misses_total{tier=\"disk\"} 1\n");
  EXPECT_THAT(page, HasSubstr("kvtier_server_stores_total{tier=\"arena\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("kvtier_server_evictions_total{tier=\"arena\"} 0\n"));
  // The arena's own rows; those every tier has are not repeated.
  EXPECT_EQ(LinesOf(page, "kvtier_server_arena_reserved"),
            "# HELP kvtier_server_arena_reserved slots reserved by a client and not yet "
            "published\n"
            "# TYPE kvtier_server_arena_reserved gauge\n"
            "kvtier_server_arena_reserved 2\n");
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_arena_slots 4\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_arena_free 1\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_arena_dirty 1\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_arena_leases_open 1\n"));
  EXPECT_EQ(LinesOf(page, "kvtier_server_arena_hits_total"), "");
  EXPECT_EQ(LinesOf(page, "kvtier_server_arena_published"), "");
  // Per client: its id and the pid the socket reports (this process).
  const std::string p = std::to_string(::getpid());
  EXPECT_EQ(LinesOf(page, "kvtier_server_client_leases"),
            "# HELP kvtier_server_client_leases read leases the client holds\n"
            "# TYPE kvtier_server_client_leases gauge\n"
            "kvtier_server_client_leases{client=\"1\",pid=\"" + p + "\"} 0\n"
            "kvtier_server_client_leases{client=\"2\",pid=\"" + p + "\"} 1\n");
  EXPECT_THAT(page, HasSubstr("kvtier_server_client_leased_slots{client=\"2\",pid=\"" + p +
                              "\"} 1\n"));
  EXPECT_THAT(page, HasSubstr("kvtier_server_client_reserved_slots{client=\"1\",pid=\"" + p +
                              "\"} 0\n"));
  EXPECT_THAT(page, HasSubstr("kvtier_server_client_reserved_slots{client=\"2\",pid=\"" + p +
                              "\"} 2\n"));
  // Per key namespace: the one block's (ns all zero bytes), one slot.
  EXPECT_EQ(LinesOf(page, "kvtier_server_namespace_slots"),
            "# HELP kvtier_server_namespace_slots arena slots holding the namespace's blocks\n"
            "# TYPE kvtier_server_namespace_slots gauge\n"
            "kvtier_server_namespace_slots{namespace=\"0000000000000000\"} 1\n");
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_arena_namespaces 1\n"));
  // The HTTP endpoint counts this request once it is answered: none yet.
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_requests_total 0\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_connections 1\n"));
  // The tiers below, as TieredCache's own Prometheus text.
  EXPECT_THAT(page, HasSubstr("\nkvtier_cache_misses_total 1\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_disk_entries 0\n"));

  // Every family the daemon writes has HELP then TYPE, each once.
  EXPECT_THAT(FamilyProblems(page, /*need_help=*/true, "kvtier_server_"), ::testing::IsEmpty());
  // So do the tiers below once the shared renderer writes HELP lines; every
  // one has its TYPE already.
  std::ostringstream probe;
  stats::PrometheusMetric(probe, "probe", MetricInfo{"x", MetricKind::kCounter, "help"},
                          uint64_t{1});
  const bool shared_help = probe.str().find("# HELP ") != std::string::npos;
  EXPECT_THAT(FamilyProblems(page, shared_help, "kvtier_"), ::testing::IsEmpty());
}

TEST(DaemonHttp, HealthzUntilStopThen503ThenRefused) {
  HttpDaemon d;
  EXPECT_EQ(Exchange(d.port(), "GET /healthz HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\n"
            "Connection: close\r\n\r\nok\n");
  d.StopAndJoin();
  // Stop() was called: a request that reaches the loop after it (here, a
  // Run() started again) is told so.
  const int fd = DialHttp(d.port());
  ASSERT_GE(fd, 0);
  d.Start();
  EXPECT_EQ(ExchangeOn(fd, "GET /healthz HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 9\r\nConnection: close\r\n\r\nstopping\n");
  d.StopAndJoin();
  ASSERT_TRUE(d.server()->Shutdown().ok());
  EXPECT_EQ(DialHttp(d.port()), -1);
  EXPECT_EQ(errno, ECONNREFUSED);
}

TEST(DaemonHttp, UnknownPathsOtherMethodsAndGarbageGet404405And400) {
  HttpDaemon d;
  EXPECT_EQ(Exchange(d.port(), "GET /nope HTTP/1.1\r\n\r\n"),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 36\r\nConnection: close\r\n\r\nnot found: GET /metrics or /healthz\n");
  EXPECT_EQ(Exchange(d.port(), "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi"),
            "HTTP/1.1 405 Method Not Allowed\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 29\r\nConnection: close\r\nAllow: GET\r\n\r\n"
            "method not allowed: GET only\n");
  EXPECT_EQ(Exchange(d.port(), "HEAD /healthz HTTP/1.1\r\n\r\n").substr(0, 33),
            "HTTP/1.1 405 Method Not Allowed\r\n");
  EXPECT_EQ(Exchange(d.port(), "garbage\r\n\r\n"),
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
            "Content-Length: 60\r\nConnection: close\r\n\r\n"
            "bad request: the request line is not METHOD TARGET HTTP/1.1\n");
  EXPECT_EQ(Exchange(d.port(), "GET /x HTTP/1.1\r\nA: " + std::string(9000, 'a') + "\r\n\r\n")
                .substr(0, 26),
            "HTTP/1.1 400 Bad Request\r\n");
  // The query string is not part of the path.
  EXPECT_EQ(BodyOf(Exchange(d.port(), "GET /healthz?verbose=1 HTTP/1.0\r\n\r\n")), "ok\n");
  const std::string page = BodyOf(Exchange(d.port(), "GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_requests_total 6\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_bad_requests_total 2\n"));
}

TEST(DaemonHttp, HangingHttpClientsDoNotHoldUpUnixClients) {
  HttpDaemon d;
  // As many HTTP connections as allowed, all hanging: fifteen send
  // nothing, one stops mid-request. The loop never waits on them (their
  // deadline is a minute away).
  std::vector<int> hanging;
  for (size_t i = 0; i < 16; ++i) {
    hanging.push_back(DialHttp(d.port()));
    ASSERT_GE(hanging.back(), 0);
  }
  ASSERT_EQ(::send(hanging.back(), "GET /met", 8, MSG_NOSIGNAL), 8);
  // The 17th is refused (accepted in the order they connected).
  const int extra = DialHttp(d.port());
  ASSERT_GE(extra, 0);
  EXPECT_EQ(BodyOf(ReadAnswer(extra)), "too many connections\n");
  // A Unix-socket client stores and loads meanwhile.
  std::unique_ptr<ServerClient> c = d.Client();
  std::vector<BlockBuffer> blocks;
  std::vector<BlockKey> keys;
  std::vector<std::span<const std::byte>> spans;
  for (uint64_t i = 0; i < 3; ++i) {
    blocks.push_back(TinyBlock(i));
    keys.push_back(TestBlockKey(i));
  }
  for (const BlockBuffer& b : blocks) spans.push_back({b.data(), b.size()});
  ASSERT_TRUE(c->Store(keys, spans).ok());
  for (uint64_t i = 0; i < 3; ++i) {
    std::optional<BlockBuffer> got = c->LoadBlock(keys[i]);
    ASSERT_TRUE(got.has_value()) << i;
    EXPECT_EQ(std::vector<std::byte>(got->data(), got->data() + got->size()),
              std::vector<std::byte>(blocks[i].data(), blocks[i].data() + blocks[i].size()));
  }
  // Once they close, HTTP is served again (as soon as the loop has seen
  // the closes: a connection that comes first is refused, and retried).
  for (int fd : hanging) ::close(fd);
  std::string health;
  int refused_retries = 0;
  for (int i = 0; i < 3000; ++i) {
    const int fd = DialHttp(d.port());
    ASSERT_GE(fd, 0);
    const std::string request = "GET /healthz HTTP/1.1\r\n\r\n";
    // A refused connection may be closed before this is sent or read.
    [[maybe_unused]] ssize_t n = ::send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    health = ReadAnswer(fd);
    if (BodyOf(health) == "ok\n") break;
    ++refused_retries;
    ::usleep(20'000);
  }
  EXPECT_EQ(BodyOf(health), "ok\n");
  const std::string page = BodyOf(Exchange(d.port(), "GET /metrics HTTP/1.1\r\n\r\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_connections 1\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_timeouts_total 0\n"));
  EXPECT_THAT(page, HasSubstr("\nkvtier_server_http_refused_total " +
                              std::to_string(1 + refused_retries) + "\n"));
}

}  // namespace
}  // namespace kvtier
