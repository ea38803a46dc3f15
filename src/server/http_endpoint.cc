#include "server/http_endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

namespace kvtier::server {
namespace {

static_assert(kMaxHttpConnections == 16, "KVTIER_HTTP_STATS's help text says 16");

// Longest option text echoed back in a message.
constexpr size_t kMaxEcho = 60;
// accept() out of descriptors: how long the listener rests before the next try.
constexpr uint64_t kAcceptPauseUs = 100'000;
// Connections accepted per Serve(): a flood of connects cannot hold the loop.
constexpr int kMaxAcceptsPerServe = 64;
// Bytes read and dropped per Serve() from a connection being drained.
constexpr int kDrainReadsPerServe = 16;

Status BadAddress(std::string_view text) {
  std::string shown(text.substr(0, kMaxEcho));
  if (text.size() > kMaxEcho) shown += "...";
  return Status::InvalidArgument(
      "\"" + shown +
      "\" is not HOST:PORT or PORT (HOST an IPv4 address, localhost or [IPv6]; PORT 0-65535)");
}

// 0..65535 from decimal digits only; -1 otherwise (a long number is refused
// before it could overflow anything).
int ParsePort(std::string_view s) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string_view::npos) return -1;
  s.remove_prefix(std::min(s.find_first_not_of('0'), s.size()));
  if (s.size() > 5) return -1;
  int port = 0;
  for (char c : s) port = port * 10 + (c - '0');
  return port <= 65535 ? port : -1;
}

std::string FormatAddress(const sockaddr_storage& a) {
  char host[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(&a);
    ::inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
    return "[" + std::string(host) + "]:" + std::to_string(ntohs(in6->sin6_port));
  }
  const auto* in = reinterpret_cast<const sockaddr_in*>(&a);
  ::inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
  return std::string(host) + ":" + std::to_string(ntohs(in->sin_port));
}

}  // namespace

Result<HttpAddress> ParseHttpAddress(std::string_view text) {
  std::string host = "127.0.0.1";
  std::string_view port_text = text;
  bool v6 = false;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find("]:");
    if (close == std::string_view::npos) return BadAddress(text);
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
    v6 = true;
  } else if (const size_t colon = text.rfind(':'); colon != std::string_view::npos) {
    host = std::string(text.substr(0, colon));
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) return BadAddress(text);  // IPv6 needs brackets
    if (host == "localhost") host = "127.0.0.1";
  }
  const int port = ParsePort(port_text);
  if (port < 0) return BadAddress(text);
  HttpAddress a;
  if (v6) {
    auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.addr);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) != 1) return BadAddress(text);
    a.length = sizeof(sockaddr_in6);
  } else {
    auto* in = reinterpret_cast<sockaddr_in*>(&a.addr);
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    if (::inet_pton(AF_INET, host.c_str(), &in->sin_addr) != 1) return BadAddress(text);
    a.length = sizeof(sockaddr_in);
  }
  return a;
}

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Listen(const HttpAddress& address,
                                                           uint64_t deadline_ms, Env* env) {
  const std::string wanted = FormatAddress(address.addr);
  const int fd = ::socket(address.addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::IOError("server_http: socket", errno);
  // A daemon restarted at once may bind while its old connections linger.
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address.addr), address.length) != 0 ||
      ::listen(fd, 64) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("server_http: listen on " + wanted, e);
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("server_http: getsockname", e);
  }
  return std::unique_ptr<HttpEndpoint>(
      new HttpEndpoint(fd, FormatAddress(bound), deadline_ms, env));
}

HttpEndpoint::HttpEndpoint(int listen_fd, std::string address, uint64_t deadline_ms, Env* env)
    : listen_fd_(listen_fd),
      address_(std::move(address)),
      deadline_us_(std::min<uint64_t>(deadline_ms, uint64_t{1} << 40) * 1000),
      env_(env) {}

HttpEndpoint::~HttpEndpoint() {
  for (const auto& [fd, c] : connections_) ::close(fd);
  ::close(listen_fd_);
}

void HttpEndpoint::AddPollFds(std::vector<pollfd>* fds) const {
  const short listen_events = accept_paused_until_us_ == 0 ? POLLIN : 0;
  fds->push_back({listen_fd_, listen_events, 0});
  for (const auto& [fd, c] : connections_) {
    fds->push_back({fd, static_cast<short>(c.state == Connection::State::kWriting ? POLLOUT : POLLIN), 0});
  }
}

int HttpEndpoint::PollTimeoutMs() const {
  uint64_t earliest = accept_paused_until_us_ == 0 ? UINT64_MAX : accept_paused_until_us_;
  for (const auto& [fd, c] : connections_) earliest = std::min(earliest, c.deadline_us);
  if (earliest == UINT64_MAX) return -1;
  const uint64_t now = env_->NowMicros();
  if (earliest <= now) return 0;
  return static_cast<int>(std::min<uint64_t>((earliest - now + 999) / 1000, INT_MAX));
}

void HttpEndpoint::Serve(std::span<const pollfd> polled, const Handler& handler) {
  for (size_t i = 1; i < polled.size(); ++i) {
    const pollfd& p = polled[i];
    if (p.revents == 0) continue;
    auto it = connections_.find(p.fd);
    if (it == connections_.end()) continue;
    if (!Step(p.fd, &it->second, handler)) Close(p.fd);
  }
  if (!polled.empty() && (polled[0].revents & POLLIN) != 0) AcceptAll(handler);
  const uint64_t now = env_->NowMicros();
  if (accept_paused_until_us_ != 0 && now >= accept_paused_until_us_) accept_paused_until_us_ = 0;
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (now < it->second.deadline_us) {
      ++it;
      continue;
    }
    // A drained connection was answered; the client only kept it open.
    if (it->second.state != Connection::State::kDraining) ++stats_.timeouts;
    ::close(it->first);
    it = connections_.erase(it);
  }
}

HttpStats HttpEndpoint::Stats() const {
  HttpStats s = stats_;
  s.connections = connections_.size();
  return s;
}

void HttpEndpoint::AcceptAll(const Handler& handler) {
  for (int i = 0; i < kMaxAcceptsPerServe; ++i) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // The listener would stay readable and poll would spin: rest it.
        accept_paused_until_us_ = env_->NowMicros() + kAcceptPauseUs;
      }
      return;  // EAGAIN: none left
    }
    if (connections_.size() >= kMaxHttpConnections) {
      HttpResponse busy;
      busy.status = 503;
      busy.body = "too many connections\n";
      const std::string text = FormatHttpResponse(busy);
      [[maybe_unused]] ssize_t n = ::send(fd, text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
      ++stats_.refused;
      continue;
    }
    Connection c;
    c.deadline_us = env_->NowMicros() + deadline_us_;
    auto it = connections_.emplace(fd, std::move(c)).first;
    // A request sent with the connect is answered now, not a poll later
    // (the last pass after Stop() answers it too).
    if (!Read(fd, &it->second, handler)) Close(fd);
  }
}

bool HttpEndpoint::Step(int fd, Connection* c, const Handler& handler) {
  switch (c->state) {
    case Connection::State::kReading:
      return Read(fd, c, handler);
    case Connection::State::kWriting:
      return Write(fd, c);
    case Connection::State::kDraining:
      return Drain(fd);
  }
  return false;
}

bool HttpEndpoint::Read(int fd, Connection* c, const Handler& handler) {
  char buf[4096];
  bool closed = false;
  // One byte past the cap is enough to know the head is too long.
  while (!closed && c->received.size() <= kMaxHttpHeadBytes) {
    const size_t want = std::min(sizeof(buf), kMaxHttpHeadBytes + 1 - c->received.size());
    const ssize_t n = ::recv(fd, buf, want, 0);
    if (n > 0) {
      c->received.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      closed = true;  // its side only, maybe: a whole request before it is still answered
    } else if (errno == EINTR) {
      continue;
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      break;
    } else {
      return false;
    }
  }
  const HttpHead head = ParseHttpHead(c->received, kMaxHttpHeadBytes);
  switch (head.state) {
    case HttpHead::State::kIncomplete:
      return !closed;
    case HttpHead::State::kBad: {
      ++stats_.bad_requests;
      HttpResponse bad;
      bad.status = 400;
      bad.body = "bad request: " + head.error + "\n";
      Answer(c, bad);
      break;
    }
    case HttpHead::State::kComplete:
      Answer(c, handler(head.request));
      break;
  }
  return Write(fd, c);
}

void HttpEndpoint::Answer(Connection* c, const HttpResponse& response) {
  ++stats_.requests;
  c->reply = FormatHttpResponse(response);
  c->sent = 0;
  c->received.clear();
  c->received.shrink_to_fit();
  c->state = Connection::State::kWriting;
}

bool HttpEndpoint::Write(int fd, Connection* c) {
  while (c->sent < c->reply.size()) {
    const ssize_t n =
        ::send(fd, c->reply.data() + c->sent, c->reply.size() - c->sent, MSG_NOSIGNAL);
    if (n > 0) {
      c->sent += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return true;  // the rest when poll says POLLOUT
    } else {
      return false;
    }
  }
  ::shutdown(fd, SHUT_WR);
  c->reply.clear();
  c->reply.shrink_to_fit();
  c->state = Connection::State::kDraining;
  return Drain(fd);
}

bool HttpEndpoint::Drain(int fd) {
  char buf[4096];
  for (int i = 0; i < kDrainReadsPerServe; ++i) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n > 0) continue;
    if (n == 0) return false;  // the client closed: done
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK;
  }
  return true;
}

void HttpEndpoint::Close(int fd) {
  ::close(fd);
  connections_.erase(fd);
}

}  // namespace kvtier::server
