#include "testing/fake_redis_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>

namespace kvtier::testing {
namespace {

// Reads the next command from `buf` (consuming it). nullopt if incomplete;
// an empty command on malformed input.
std::optional<FakeRedisServer::Command> ParseCommand(std::string& buf) {
  size_t pos = 0;
  auto line = [&](std::string_view* out) -> bool {
    const size_t nl = buf.find("\r\n", pos);
    if (nl == std::string::npos) return false;
    *out = std::string_view(buf).substr(pos, nl - pos);
    pos = nl + 2;
    return true;
  };
  auto number = [](std::string_view s) {
    int64_t v = -1;
    std::from_chars(s.data(), s.data() + s.size(), v);
    return v;
  };
  std::string_view head;
  if (!line(&head)) return std::nullopt;
  if (head.empty() || head[0] != '*') {
    buf.clear();
    return FakeRedisServer::Command{};
  }
  const int64_t n = number(head.substr(1));
  FakeRedisServer::Command cmd;
  for (int64_t i = 0; i < n; ++i) {
    std::string_view len_line;
    if (!line(&len_line)) return std::nullopt;
    const int64_t len = number(len_line.substr(1));
    if (len < 0) {
      buf.clear();
      return FakeRedisServer::Command{};
    }
    if (buf.size() < pos + static_cast<size_t>(len) + 2) return std::nullopt;
    cmd.push_back(buf.substr(pos, static_cast<size_t>(len)));
    pos += static_cast<size_t>(len) + 2;
  }
  buf.erase(0, pos);
  return cmd;
}

std::string Upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

// Sends `bytes`; with a pause, one byte at a time with that pause before
// each (a server that trickles a reply), until `stop` is set; with
// byte_writes, one byte per send().
void SendAll(int fd, const std::string& bytes, uint32_t byte_pause_micros, bool byte_writes,
             const std::atomic<bool>& stop) {
  size_t off = 0;
  while (off < bytes.size()) {
    size_t len = byte_writes ? 1 : bytes.size() - off;
    if (byte_pause_micros > 0) {
      if (stop.load()) return;
      std::this_thread::sleep_for(std::chrono::microseconds(byte_pause_micros));
      len = 1;
    }
    const ssize_t n = ::send(fd, bytes.data() + off, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::string FakeRedisServer::Bulk(std::string_view s) {
  return "$" + std::to_string(s.size()) + "\r\n" + std::string(s) + "\r\n";
}

Result<std::unique_ptr<FakeRedisServer>> FakeRedisServer::Start(Handler handler) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IOError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = 0;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 64) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("bind/listen on loopback", err);
  }
  std::unique_ptr<FakeRedisServer> s(
      new FakeRedisServer(std::move(handler), fd, ntohs(a.sin_port)));
  s->acceptor_ = std::thread([p = s.get()] { p->AcceptLoop(); });
  return s;
}

FakeRedisServer::~FakeRedisServer() {
  stop_.store(true);
  acceptor_.join();
  ::close(listen_fd_);
  std::vector<std::thread> workers;
  {
    MutexLock lock(&mu_);
    workers.swap(workers_);
  }
  for (std::thread& t : workers) t.join();
}

std::vector<FakeRedisServer::Command> FakeRedisServer::Log() {
  MutexLock lock(&mu_);
  return log_;
}

void FakeRedisServer::AcceptLoop() {
  while (!stop_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) continue;
    connections_.fetch_add(1);
    MutexLock lock(&mu_);
    workers_.emplace_back([this, fd] { Serve(fd); });
  }
}

void FakeRedisServer::Serve(int fd) {
  std::string buf;
  char chunk[65536];
  bool stalled = false;
  while (!stop_.load()) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      closed_.fetch_add(1);
      break;
    }
    if (stalled) continue;  // read and ignore: the client must time out
    buf.append(chunk, static_cast<size_t>(n));
    bool close = false;
    while (!close && !stalled) {
      std::optional<Command> cmd = ParseCommand(buf);
      if (!cmd) break;
      {
        MutexLock lock(&mu_);
        log_.push_back(*cmd);
      }
      std::optional<Reply> r = cmd->empty() ? std::nullopt : handler_(*cmd);
      if (!r) {
        const std::string name = cmd->empty() ? "" : Upper((*cmd)[0]);
        Reply d;
        if (name == "PING") {
          d.bytes = "+PONG\r\n";
        } else if (name == "AUTH" || name == "SELECT" || name == "ASKING") {
          d.bytes = "+OK\r\n";
        } else {
          d.bytes = "-ERR unknown command\r\n";
        }
        r = d;
      }
      SendAll(fd, r->bytes, r->byte_pause_micros, r->byte_writes, stop_);
      close = r->then == Reply::Then::kClose;
      stalled = r->then == Reply::Then::kStall;
    }
    if (close) break;
  }
  ::close(fd);
}

}  // namespace kvtier::testing
