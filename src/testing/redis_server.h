// Real redis-server processes for tests: one server, or a Redis Cluster of
// masters made with `redis-cli --cluster create`, on free loopback ports
// with their data in a temp folder, killed (SIGKILL) and removed when the
// object goes away. A server can be killed, restarted on the same port and
// data folder, paused (SIGSTOP) and resumed (SIGCONT) — the remote tier's
// fault tests.
//
// The servers die with the test process (PR_SET_PDEATHSIG), so a crashed
// test leaves none behind.
//
// TestRedisUrl() / TestRedisClusterUrl() are what tests that only need "a
// server" use: the URL in KVTIER_TEST_REDIS_URL / KVTIER_TEST_REDIS_CLUSTER_URL
// (scripts/redis-servers starts them for scripts/test), or else a server
// (cluster) started once for this process. Tests share them through
// distinct key prefixes (UniqueKeyPrefix()), never by flushing.
//
// Thread safety: a RedisServer or RedisCluster is used by one thread.
#ifndef KVTIER_TESTING_REDIS_SERVER_H_
#define KVTIER_TESTING_REDIS_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/status.h"
#include "testing/temp_dir.h"

namespace kvtier::testing {

struct RedisServerOptions {
  std::string password;      // requirepass; empty = none
  bool cluster = false;      // cluster-enabled (needs port + 10000 free too)
  bool append_only = false;  // AOF with fsync always: data survives SIGKILL
  uint64_t maxmemory = 0;    // bytes; 0 = no limit
  std::string maxmemory_policy = "noeviction";
};

class RedisServer {
 public:
  // Starts redis-server on a free port and waits until it answers PING
  // (FailedPrecondition naming redis-server if it is not installed).
  static Result<std::unique_ptr<RedisServer>> Start(const RedisServerOptions& options);
  ~RedisServer();

  uint16_t port() const { return port_; }
  // redis://[:password@]127.0.0.1:<port>
  std::string url() const;
  pid_t pid() const { return pid_; }

  // SIGKILL, and wait for the process to be gone.
  Status Kill();
  // Starts the server again on the same port and data folder and waits
  // until it answers.
  Status Restart();
  Status Pause();   // SIGSTOP
  Status Resume();  // SIGCONT

  // Sends one command (inline form, e.g. "CLUSTER INFO") and returns the
  // raw reply bytes read within 5 s (for readiness checks).
  Result<std::string> RawCommand(const std::string& inline_command);

 private:
  RedisServer(RedisServerOptions options, uint16_t port)
      : options_(std::move(options)), port_(port), dir_("kvtier_redis") {}
  Status Launch();
  Status WaitReady();

  const RedisServerOptions options_;
  const uint16_t port_;
  TempDir dir_;
  pid_t pid_ = -1;
};

class RedisCluster {
 public:
  // `masters` cluster-enabled servers joined with redis-cli --cluster create
  // (no replicas), waiting until every node reports cluster_state:ok.
  static Result<std::unique_ptr<RedisCluster>> Start(int masters = 3);

  // redis-cluster://127.0.0.1:<p1>,127.0.0.1:<p2>,...
  std::string url() const;
  std::vector<std::unique_ptr<RedisServer>>& servers() { return servers_; }

 private:
  std::vector<std::unique_ptr<RedisServer>> servers_;
};

// A free loopback TCP port (and port + 10000 too when `with_bus`).
Result<uint16_t> PickFreePort(bool with_bus);

// KVTIER_TEST_REDIS_URL, or a server started once for this process. An
// error says how to provide one when neither works (tests fail on it,
// never skip).
Result<std::string> TestRedisUrl();
// KVTIER_TEST_REDIS_CLUSTER_URL, or a 3-master cluster started once.
Result<std::string> TestRedisClusterUrl();
// A key prefix no other test (process, run) uses:
// "kvtier-test:<name>:<pid>.<microseconds>.<n>:".
std::string UniqueKeyPrefix(const std::string& name);

}  // namespace kvtier::testing

#endif  // KVTIER_TESTING_REDIS_SERVER_H_
