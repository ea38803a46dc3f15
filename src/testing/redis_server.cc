#include "testing/redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>

#include "core/mutex.h"
#include "core/thread_annotations.h"

extern char** environ;

namespace kvtier::testing {
namespace {

constexpr const char* kRedisServer = "/usr/bin/redis-server";
constexpr const char* kRedisCli = "/usr/bin/redis-cli";
constexpr auto kReadyTimeout = std::chrono::seconds(20);

bool PortFree(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// Runs argv to completion; OK iff it exits 0.
Status RunTool(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return Status::IOError("spawn " + args[0], rc);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return Status::Internal(args[0] + " " + args[1] + " ... failed (status " +
                            std::to_string(status) + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<uint16_t> PickFreePort(bool with_bus) {
  static std::atomic<uint32_t> salt{0};
  std::mt19937 rng(
      static_cast<uint32_t>(::getpid()) * 7919u + salt.fetch_add(1) * 104729u +
      static_cast<uint32_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  // Ports below the usual ephemeral range (32768+), so that the bus port
  // (+10000) stays below 65536 and outgoing connections rarely collide.
  for (int attempt = 0; attempt < 200; ++attempt) {
    const uint16_t p = static_cast<uint16_t>(20000 + rng() % 10000);
    if (PortFree(p) && (!with_bus || PortFree(static_cast<uint16_t>(p + 10000)))) return p;
  }
  return Status::Unavailable("no free loopback port found in 20000..29999");
}

Result<std::unique_ptr<RedisServer>> RedisServer::Start(const RedisServerOptions& options) {
  if (::access(kRedisServer, X_OK) != 0) {
    return Status::FailedPrecondition(std::string(kRedisServer) +
                                      " not found: install redis-server (scripts/bootstrap)");
  }
  Status last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    KVTIER_ASSIGN_OR_RETURN(uint16_t port, PickFreePort(options.cluster));
    std::unique_ptr<RedisServer> s(new RedisServer(options, port));
    if (s->dir_.path().empty()) return Status::IOError("mkdtemp for redis-server", errno);
    last = s->Launch();
    if (last.ok()) return s;  // else the port was taken meanwhile: try another
  }
  return last;
}

RedisServer::~RedisServer() { (void)Kill(); }

std::string RedisServer::url() const {
  std::string auth = options_.password.empty() ? "" : ":" + options_.password + "@";
  return "redis://" + auth + "127.0.0.1:" + std::to_string(port_);
}

Status RedisServer::Launch() {
  std::vector<std::string> args = {kRedisServer,  "--port",    std::to_string(port_),
                                   "--bind",      "127.0.0.1", "--dir",
                                   dir_.path(),   "--save",    "",
                                   "--daemonize", "no",        "--protected-mode",
                                   "no",          "--logfile", dir_.Sub("redis.log")};
  if (!options_.password.empty()) args.insert(args.end(), {"--requirepass", options_.password});
  if (options_.cluster) {
    args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file",
                             dir_.Sub("nodes.conf"), "--cluster-node-timeout", "5000"});
  }
  if (options_.append_only) {
    args.insert(args.end(), {"--appendonly", "yes", "--appendfsync", "always"});
  }
  if (options_.maxmemory > 0) {
    args.insert(args.end(), {"--maxmemory", std::to_string(options_.maxmemory),
                             "--maxmemory-policy", options_.maxmemory_policy});
  }
  std::vector<char*> argv;  // built before fork: the child only execs
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork", errno);
  if (pid == 0) {
    // Die with the test process; never outlive it.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(1);
    ::execv(kRedisServer, argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  return WaitReady();
}

Status RedisServer::WaitReady() {
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  std::string auth = options_.password.empty() ? "" : "AUTH " + options_.password + "\r\n";
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return Status::Unavailable("redis-server on port " + std::to_string(port_) +
                                 " exited at start (see " + dir_.Sub("redis.log") + ")");
    }
    Result<std::string> r = RawCommand(auth + "PING");
    if (r.ok() && r->find("+PONG") != std::string::npos) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  (void)Kill();
  return Status::Unavailable("redis-server on port " + std::to_string(port_) +
                             " did not answer PING");
}

Status RedisServer::Kill() {
  if (pid_ <= 0) return Status::Ok();
  ::kill(pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return Status::Ok();
}

Status RedisServer::Restart() {
  KVTIER_RETURN_IF_ERROR(Kill());
  return Launch();
}

Status RedisServer::Pause() {
  if (pid_ <= 0 || ::kill(pid_, SIGSTOP) != 0) return Status::IOError("SIGSTOP", errno);
  return Status::Ok();
}

Status RedisServer::Resume() {
  if (pid_ <= 0 || ::kill(pid_, SIGCONT) != 0) return Status::IOError("SIGCONT", errno);
  return Status::Ok();
}

Result<std::string> RedisServer::RawCommand(const std::string& inline_command) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return Status::IOError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port_);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::IOError("connect", err);
  }
  const std::string cmd = inline_command + "\r\nQUIT\r\n";
  if (::send(fd, cmd.data(), cmd.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(cmd.size())) {
    ::close(fd);
    return Status::IOError("send", errno);
  }
  std::string out;
  char buf[4096];
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;  // QUIT closes the connection after the replies
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Result<std::unique_ptr<RedisCluster>> RedisCluster::Start(int masters) {
  std::unique_ptr<RedisCluster> c(new RedisCluster());
  RedisServerOptions o;
  o.cluster = true;
  std::vector<std::string> args = {kRedisCli, "--cluster", "create"};
  for (int i = 0; i < masters; ++i) {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RedisServer> s, RedisServer::Start(o));
    args.push_back("127.0.0.1:" + std::to_string(s->port()));
    c->servers_.push_back(std::move(s));
  }
  args.insert(args.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  KVTIER_RETURN_IF_ERROR(RunTool(args));
  const auto deadline = std::chrono::steady_clock::now() + kReadyTimeout;
  for (auto& s : c->servers_) {
    while (true) {
      Result<std::string> r = s->RawCommand("CLUSTER INFO");
      if (r.ok() && r->find("cluster_state:ok") != std::string::npos) break;
      if (std::chrono::steady_clock::now() > deadline) {
        return Status::Unavailable("cluster node " + std::to_string(s->port()) +
                                   " never reported cluster_state:ok");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return c;
}

std::string RedisCluster::url() const {
  std::string u = "redis-cluster://";
  for (size_t i = 0; i < servers_.size(); ++i) {
    if (i > 0) u += ",";
    u += "127.0.0.1:" + std::to_string(servers_[i]->port());
  }
  return u;
}

Result<std::string> TestRedisUrl() {
  if (const char* u = std::getenv("KVTIER_TEST_REDIS_URL"); u != nullptr && *u != '\0') {
    return std::string(u);
  }
  static Mutex mu;
  static std::unique_ptr<RedisServer> server GUARDED_BY(mu);
  static Status error GUARDED_BY(mu);
  MutexLock lock(&mu);
  if (!server && error.ok()) {
    Result<std::unique_ptr<RedisServer>> s = RedisServer::Start({});
    if (s.ok()) {
      server = std::move(s).value();
    } else {
      error = s.status();
    }
  }
  if (server) return server->url();
  return Status::FailedPrecondition(
      "no Redis server for the tests: set KVTIER_TEST_REDIS_URL=redis://127.0.0.1:PORT "
      "(scripts/redis-servers start prints one), or install redis-server so the test can "
      "start its own (" +
      error.message() + ")");
}

Result<std::string> TestRedisClusterUrl() {
  if (const char* u = std::getenv("KVTIER_TEST_REDIS_CLUSTER_URL"); u != nullptr && *u != '\0') {
    return std::string(u);
  }
  static Mutex mu;
  static std::unique_ptr<RedisCluster> cluster GUARDED_BY(mu);
  static Status error GUARDED_BY(mu);
  MutexLock lock(&mu);
  if (!cluster && error.ok()) {
    Result<std::unique_ptr<RedisCluster>> c = RedisCluster::Start(3);
    if (c.ok()) {
      cluster = std::move(c).value();
    } else {
      error = c.status();
    }
  }
  if (cluster) return cluster->url();
  return Status::FailedPrecondition(
      "no Redis Cluster for the tests: set KVTIER_TEST_REDIS_CLUSTER_URL="
      "redis-cluster://127.0.0.1:PORT,... (scripts/redis-servers start prints one), or install "
      "redis-server and redis-cli so the test can start its own (" +
      error.message() + ")");
}

std::string UniqueKeyPrefix(const std::string& name) {
  static std::atomic<uint64_t> n{0};
  const uint64_t us = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                                std::chrono::system_clock::now().time_since_epoch())
                                                .count());
  return "kvtier-test:" + name + ":" + std::to_string(::getpid()) + "." + std::to_string(us) + "." +
         std::to_string(n.fetch_add(1)) + ":";
}

}  // namespace kvtier::testing
