#include "server/daemon.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "server/metrics_page.h"
#include "server_client/socket_probe.h"

namespace kvtier::server {
namespace {

sockaddr_un AddressOf(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  return a;
}

// A socket file nobody answers on is left over from a daemon that died: it
// may be replaced. A live one (or anything that is not a socket) may not.
Status ClearStaleSocket(const std::string& path) {
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return Status::Ok();
  if (!S_ISSOCK(st.st_mode)) {
    return Status::InvalidArgument("server: " + path + " exists and is not a socket");
  }
  KVTIER_ASSIGN_OR_RETURN(const bool live, UnixSocketAnswers(path));
  if (live) return Status::Unavailable("server: a daemon already listens on " + path);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::IOError("unlink " + path, errno);
  return Status::Ok();
}

// The group named `name` (or numbered, when it is all digits).
Result<gid_t> GroupId(const std::string& name) {
  if (!name.empty() && name.size() <= 9 &&
      name.find_first_not_of("0123456789") == std::string::npos) {
    return static_cast<gid_t>(std::stoul(name));
  }
  group g{};
  group* found = nullptr;
  std::vector<char> buf(16 << 10);
  const int e = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (e != 0) return Status::IOError("server_socket_group: looking up '" + name + "'", e);
  if (found == nullptr) {
    return Status::InvalidArgument("server_socket_group: no group '" + name.substr(0, 64) +
                                   "' on this host");
  }
  return found->gr_gid;
}

// A namespace as /metrics names it: its first 8 bytes in hex (enough to
// tell a host's namespaces apart; `kvtier key` prints the whole key).
std::string NamespaceLabel(const BlockKey& ns) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 8; ++i) {
    out += kHex[ns.bytes[i] >> 4];
    out += kHex[ns.bytes[i] & 15];
  }
  return out;
}

}  // namespace

Result<std::unique_ptr<Daemon>> Daemon::Open(ServerOptions options, Env* env) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  KVTIER_ASSIGN_OR_RETURN(std::string path, SocketPathOf(options.server));
  const uint64_t slot_bytes = options.SlotBytes();
  const uint64_t slots =
      std::min<uint64_t>(std::max<uint64_t>(options.cache.host.capacity_bytes / slot_bytes, 1),
                         kMaxArenaSlots);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Arena> arena,
                          Arena::Create({static_cast<uint32_t>(slots), slot_bytes}));
  std::unique_ptr<TieredCache> below;
  if (options.cache.disk.has_value() || options.cache.remote.has_value()) {
    CacheOptions c = options.cache;
    c.layout_signature = options.layout.Signature();
    c.host.capacity_bytes = slot_bytes;  // the arena is the RAM tier
    c.host.shared_budget = nullptr;
    c.promote_disk_hits = false;
    c.promote_remote_hits = false;
    c.write_policy = c.disk.has_value() ? WritePolicy::kWriteThrough : WritePolicy::kWriteBack;
    KVTIER_ASSIGN_OR_RETURN(below, TieredCache::Open(std::move(c), env));
  }
  std::optional<gid_t> group;
  if (!options.socket_group.empty()) {
    KVTIER_ASSIGN_OR_RETURN(group, GroupId(options.socket_group));
  }
  KVTIER_RETURN_IF_ERROR(ClearStaleSocket(path));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::IOError("socket", errno);
  sockaddr_un a = AddressOf(path);
  // The socket file is created with no permission beyond the owner's, then
  // set to what the options say: never wider for a moment.
  const mode_t old_mask = ::umask(0177);
  const int bound = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  const int bind_errno = errno;
  ::umask(old_mask);
  if (bound != 0) {
    ::close(fd);
    return Status::IOError("server: bind " + path, bind_errno);
  }
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(path.c_str());
    return s;
  };
  if (group.has_value() && ::chown(path.c_str(), static_cast<uid_t>(-1), *group) != 0) {
    const int e = errno;
    return fail(Status::IOError("server_socket_group: chown " + path + " to group " +
                                    options.socket_group.substr(0, 64) +
                                    " (the daemon's user must be a member)",
                                e));
  }
  const mode_t mode = options.socket_permissions | (group.has_value() ? 0060 : 0);
  if (::chmod(path.c_str(), mode) != 0 || ::listen(fd, 128) != 0) {
    const int e = errno;
    return fail(Status::IOError("server: listen " + path, e));
  }
  Sockets sockets;
  if (!options.http.empty()) {
    Result<server::HttpAddress> http_address = ParseHttpAddress(options.http);
    if (!http_address.ok()) return fail(http_address.status().WithContext("server_http"));
    Result<std::unique_ptr<HttpEndpoint>> http =
        HttpEndpoint::Listen(*http_address, options.client_io_timeout_ms, env);
    if (!http.ok()) return fail(http.status());
    sockets.http = std::move(*http);
  }
  int wake[2];
  if (::pipe2(wake, O_CLOEXEC | O_NONBLOCK) != 0) {
    const int e = errno;
    return fail(Status::IOError("pipe2", e));
  }
  sockets.path = path;
  sockets.listen_fd = fd;
  sockets.wake_read = wake[0];
  sockets.wake_write = wake[1];
  auto service =
      std::make_unique<ArenaService>(std::move(arena), options.layout, std::move(below),
                                     options.NamespaceQuotaSlots());
  return std::unique_ptr<Daemon>(
      new Daemon(std::move(options), std::move(sockets), std::move(service)));
}

Daemon::Daemon(ServerOptions options, Sockets sockets, std::unique_ptr<ArenaService> service)
    : options_(std::move(options)),
      path_(std::move(sockets.path)),
      http_address_(sockets.http != nullptr ? sockets.http->address() : ""),
      listen_fd_(sockets.listen_fd),
      wake_read_(sockets.wake_read),
      wake_write_(sockets.wake_write),
      http_(std::move(sockets.http)),
      service_(std::move(service)) {}

Daemon::~Daemon() {
  (void)Shutdown();
  ::close(wake_read_);
  ::close(wake_write_);
}

void Daemon::Stop() {
  stopping_.store(true);
  const char b = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_write_, &b, 1);
}

void Daemon::Accept() {
  for (;;) {
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN: none left; anything else: try on the next poll
    Client c;
    c.id = next_client_++;
    ucred cred{};
    socklen_t length = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &length) == 0) c.pid = cred.pid;
    clients_.emplace(fd, c);
    ++clients_accepted_;
  }
}

void Daemon::Drop(int fd) {
  auto it = clients_.find(fd);
  if (it == clients_.end()) return;
  service_->ClientGone(it->second.id);
  ::close(fd);
  clients_.erase(it);
}

bool Daemon::Serve(int fd, ClientId client) {
  const uint64_t deadline = MonotonicMicros() + options_.client_io_timeout_ms * 1000;
  std::vector<uint8_t> body;
  if (!RecvFrame(fd, &body, deadline).ok()) return false;
  std::vector<uint8_t> reply;
  bool pass_fd = false;
  if (!service_->Handle(client, body, &reply, &pass_fd).ok()) return false;
  return SendFrame(fd, reply, deadline, pass_fd ? service_->arena_fd() : -1).ok();
}

HttpResponse Daemon::Answer(const HttpRequest& request) const {
  HttpResponse r;
  if (request.method != "GET") {
    r.status = 405;
    r.headers.emplace_back("Allow", "GET");
    r.body = "method not allowed: GET only\n";
  } else if (request.path == "/metrics") {
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    r.body = MetricsPage();
  } else if (request.path == "/healthz") {
    const bool stopping = stopping_.load();
    r.status = stopping ? 503 : 200;
    r.body = stopping ? "stopping\n" : "ok\n";
  } else {
    r.status = 404;
    r.body = "not found: GET /metrics or /healthz\n";
  }
  return r;
}

std::string Daemon::MetricsPage() const {
  MetricsSnapshot s;
  s.daemon.clients = clients_.size();
  s.daemon.clients_accepted = clients_accepted_;
  if (http_ != nullptr) s.http = http_->Stats();
  s.arena = service_->Stats();
  s.below = service_->BelowStats();
  const std::map<ClientId, ClientHoldings> held = service_->Holdings();
  for (const auto& [fd, c] : clients_) {
    ClientFigures f;
    f.id = c.id;
    f.pid = c.pid;
    if (auto it = held.find(c.id); it != held.end()) f.held = it->second;
    s.clients.push_back(f);
  }
  std::sort(s.clients.begin(), s.clients.end(),
            [](const ClientFigures& a, const ClientFigures& b) { return a.id < b.id; });
  for (const NamespaceUsage& u : service_->Namespaces()) {
    NamespaceFigures f;
    f.slots = u.slots;
    f.bytes = u.slots * s.arena.slot_bytes;
    s.namespaces.emplace_back(NamespaceLabel(u.ns), f);
  }
  return RenderMetricsPage(s);
}

Status Daemon::Run() {
  if (shut_down_) return Status::FailedPrecondition("kvtier serve: shut down");
  const HttpEndpoint::Handler answer = [this](const HttpRequest& r) { return Answer(r); };
  // Held while this loop serves; let go on every way out of it (a killed
  // daemon's is marked dead by the kernel).
  KVTIER_RETURN_IF_ERROR(service_->BeginServing());
  struct EndServing {
    ArenaService* service;
    ~EndServing() { service->EndServing(); }
  } end_serving{service_.get()};
  for (;;) {
    std::vector<pollfd> fds;
    fds.push_back({wake_read_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& [fd, c] : clients_) fds.push_back({fd, POLLIN, 0});
    const size_t http_begin = fds.size();
    if (http_ != nullptr) http_->AddPollFds(&fds);
    const int timeout_ms = http_ != nullptr ? http_->PollTimeoutMs() : -1;
    const int n = ::poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError("poll", errno);
    }
    const std::span<const pollfd> http_fds = std::span<const pollfd>(fds).subspan(http_begin);
    if (fds[0].revents != 0) {
      char buf[64];
      while (::read(wake_read_, buf, sizeof(buf)) > 0) {
      }
      // Requests already here are answered (/healthz: 503) before the loop ends.
      if (http_ != nullptr) http_->Serve(http_fds, answer);
      return Status::Ok();
    }
    if (fds[1].revents & POLLIN) Accept();
    for (size_t i = 2; i < http_begin; ++i) {
      if (fds[i].revents == 0) continue;
      auto it = clients_.find(fds[i].fd);
      if (it == clients_.end()) continue;
      if (!Serve(it->first, it->second.id)) Drop(fds[i].fd);
    }
    // Every turn, events or not: it also closes connections past their deadline.
    if (http_ != nullptr) http_->Serve(http_fds, answer);
  }
}

Result<ServerShutdownReport> Daemon::Shutdown() {
  if (shut_down_) return ServerShutdownReport{};
  shut_down_ = true;
  http_.reset();  // HTTP clients are refused from here on
  ::close(listen_fd_);
  ::unlink(path_.c_str());
  ServerShutdownReport closed;
  while (!clients_.empty()) {
    Drop(clients_.begin()->first);
    ++closed.clients_closed;
  }
  ServerShutdownReport report = service_->WriteDownAndClose(options_.cache.close_timeout_ms);
  report.clients_closed = closed.clients_closed;
  return report;
}

}  // namespace kvtier::server
