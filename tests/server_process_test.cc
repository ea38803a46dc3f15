// `kvtier serve` with real processes (docs/server.md): the daemon is the
// built `kvtier serve` ($KVTIER_CLI); clients are this binary run again with
// KVTIER_SERVER_CHILD=<mode> (ChildDispatcher below runs the mode before
// gtest starts, then exits). Processes start with fork+exec. Every block is
// MakeBlockFile(TestBlockKey(i)) with a created_at per process, so any
// reader checks what it got with CheckBlockFile (exact tensor bytes).
//
// Child modes (KVTIER_SERVER_SOCKET, _FIRST, _COUNT, _STAMP in the env):
//   store         stores keys [first, first+count); exit 0, or 5 on an error
//   load          loads them, checks each; 0, 3 wrong bytes, 7 missing
//   hold_lease    looks them up (a lease), prints "ready", waits to be killed
//   hold_reserve  reserves count slots, writes half of each block into
//                 them, prints "ready", waits to be killed (never publishes)
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "synth/block_generator.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "kvtier/server_client.h"
#include "server_client/connection.h"
#include "server_client/wire.h"
#include "server_raw_frames.h"
#include "testing/temp_dir.h"

extern char** environ;

namespace kvtier {
namespace {

constexpr int kExitWrongBytes = 3;
constexpr int kExitSetup = 4;
constexpr int kExitStoreError = 5;
constexpr int kExitMissing = 7;
// Generous bounds for a busy 2-core machine under ASan: they end a test
// that would hang, they are not what the test measures.
constexpr uint64_t kLongMs = 120'000;

ModelLayout Tiny() { return *ModelLayout::Resolve(Env::Default(), "tiny", 0); }

uint64_t EnvU64(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : std::strtoull(v, nullptr, 10);
}

SharedBlock BlockOf(const ModelLayout& layout, uint64_t i, int64_t stamp) {
  Result<BlockBuffer> b = MakeBlockFile(layout, TestBlockKey(i), BlockKey{}, BlockKey{}, stamp);
  if (!b.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(*b));
}

std::unique_ptr<ServerClient> ClientFor(const std::string& socket, uint64_t timeout_ms = 5000) {
  ServerClientOptions o;
  o.server = "unix:" + socket;
  o.layout_signature = Tiny().Signature();
  o.timeout_ms = timeout_ms;
  o.reconnect_backoff_ms = 50;
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(o);
  return c.ok() ? std::move(*c) : nullptr;
}

// ---- child side -------------------------------------------------------

int ChildStore(ServerClient* c, uint64_t first, uint64_t count, int64_t stamp) {
  const ModelLayout layout = Tiny();
  std::vector<BlockKey> keys;
  std::vector<SharedBlock> blocks;
  std::vector<std::span<const std::byte>> spans;
  for (uint64_t i = first; i < first + count; ++i) {
    keys.push_back(TestBlockKey(i));
    blocks.push_back(BlockOf(layout, i, stamp));
    if (blocks.back() == nullptr) return kExitSetup;
    spans.push_back({blocks.back()->data(), blocks.back()->size()});
  }
  return c->Store(keys, spans).ok() ? 0 : kExitStoreError;
}

int ChildLoad(ServerClient* c, uint64_t first, uint64_t count) {
  const ModelLayout layout = Tiny();
  int rc = 0;
  for (uint64_t i = first; i < first + count; ++i) {
    std::optional<BlockBuffer> b = c->LoadBlock(TestBlockKey(i));
    if (!b) {
      rc = rc == 0 ? kExitMissing : rc;
      continue;
    }
    if (!CheckBlockFile({b->data(), b->size()}, layout, TestBlockKey(i)).ok()) {
      rc = kExitWrongBytes;
    }
  }
  return rc;
}

[[noreturn]] void Ready() {
  std::printf("ready\n");
  std::fflush(stdout);
  for (;;) ::pause();
}

int ChildHold(const std::string& mode, const std::string& socket, uint64_t first, uint64_t count) {
  ServerClientOptions o;
  o.server = "unix:" + socket;
  o.layout_signature = Tiny().Signature();
  o.timeout_ms = 10'000;
  server::Connection conn(o, socket);
  MutexLock lock(conn.mu());
  if (mode == "hold_lease") {
    std::vector<BlockKey> keys;
    for (uint64_t i = first; i < first + count; ++i) keys.push_back(TestBlockKey(i));
    server::FrameWriter w(server::Op::kLookup);
    server::WriteKeys(&w, keys);
    Result<std::vector<uint8_t>> body = conn.Call(&w);
    if (!body.ok()) return kExitSetup;
    server::FrameReader r(*body);
    if (!server::ReadReplyHead(&r, server::Op::kLookup).ok() || r.U64() == 0) return kExitSetup;
    Ready();
  }
  const ModelLayout layout = Tiny();
  SharedBlock block = BlockOf(layout, first, 1);
  server::FrameWriter w(server::Op::kReserve);
  w.U32(static_cast<uint32_t>(count));
  for (uint64_t i = 0; i < count; ++i) w.U64(block->size());
  Result<std::vector<uint8_t>> body = conn.Call(&w);
  if (!body.ok()) return kExitSetup;
  server::FrameReader r(*body);
  if (!server::ReadReplyHead(&r, server::Op::kReserve).ok()) return kExitSetup;
  const uint32_t n = r.U32();
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t slot = r.U32();
    r.U64();
    BlockBuffer torn = *BlockBuffer::CopyOf({block->data(), block->size()});
    std::memcpy(conn.arena()->Bytes(slot).data(), torn.data(), torn.size() / 2);
  }
  Ready();
}

struct ChildDispatcher {
  ChildDispatcher() {
    const char* mode = std::getenv("KVTIER_SERVER_CHILD");
    if (mode == nullptr) return;
    const std::string socket = std::getenv("KVTIER_SERVER_SOCKET");
    const uint64_t first = EnvU64("KVTIER_SERVER_FIRST");
    const uint64_t count = EnvU64("KVTIER_SERVER_COUNT");
    const int64_t stamp = static_cast<int64_t>(EnvU64("KVTIER_SERVER_STAMP"));
    int rc = kExitSetup;
    const std::string m = mode;
    if (m == "hold_lease" || m == "hold_reserve") {
      rc = ChildHold(m, socket, first, count);
    } else if (std::unique_ptr<ServerClient> c = ClientFor(socket)) {
      if (m == "store") rc = ChildStore(c.get(), first, count, stamp);
      if (m == "load") rc = ChildLoad(c.get(), first, count);
    }
    std::fflush(stdout);
    _exit(rc);
  }
} const g_child_dispatcher;

// ---- parent side ------------------------------------------------------

pid_t Spawn(const std::vector<std::string>& args, const std::map<std::string, std::string>& extra,
            int stdout_fd, const std::string& stderr_path) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KVTIER_SERVER_", 14) != 0) env.emplace_back(*e);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  std::vector<char*> envp, argv;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> a = args;
  for (std::string& s : a) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int err = stderr_path.empty() ? -1 : ::open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (stdout_fd >= 0) ::dup2(stdout_fd, 1);
    if (err >= 0) ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  if (err >= 0) ::close(err);
  return pid;
}

// The exit code (128 + signal for a signal), or -1 if still running after
// timeout_ms (polled: waitpid has no timeout).
int WaitExit(pid_t pid, uint64_t timeout_ms) {
  const uint64_t end = server::MonotonicMicros() + timeout_ms * 1000;
  for (;;) {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG);
    if (r == pid) return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (r < 0 || server::MonotonicMicros() > end) return -1;
    ::usleep(5000);
  }
}

// One process whose stdout is a pipe we read lines from.
struct Proc {
  pid_t pid = -1;
  int out = -1;
  std::string buf;
  bool exited = false;

  std::string ReadLine(uint64_t timeout_ms) {
    const uint64_t end = server::MonotonicMicros() + timeout_ms * 1000;
    for (;;) {
      if (size_t nl = buf.find('\n'); nl != std::string::npos) {
        std::string line = buf.substr(0, nl);
        buf.erase(0, nl + 1);
        return line;
      }
      const uint64_t now = server::MonotonicMicros();
      if (now >= end) return "";
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>((end - now) / 1000 + 1)) <= 0) continue;
      char c[256];
      const ssize_t n = ::read(out, c, sizeof(c));
      if (n <= 0) return "";
      buf.append(c, static_cast<size_t>(n));
    }
  }
  int Wait(uint64_t timeout_ms = kLongMs) {
    const int rc = WaitExit(pid, timeout_ms);
    exited = rc >= 0;
    return rc;
  }
  void Kill(int sig) {
    if (pid > 0 && !exited) ::kill(pid, sig);
  }
  ~Proc() {
    if (pid > 0 && !exited) {
      ::kill(pid, SIGKILL);
      (void)WaitExit(pid, kLongMs);
    }
    if (out >= 0) ::close(out);
  }
};

std::unique_ptr<Proc> Start(const std::vector<std::string>& args,
                            const std::map<std::string, std::string>& env,
                            const std::string& stderr_path) {
  auto p = std::make_unique<Proc>();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return p;
  p->pid = Spawn(args, env, fds[1], stderr_path);
  ::close(fds[1]);
  p->out = fds[0];
  return p;
}

class ServerProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    const char* cli = std::getenv("KVTIER_CLI");
    ASSERT_NE(cli, nullptr) << "KVTIER_CLI names the built kvtier";
    cli_ = cli;
    socket_ = dir_.Sub("s.sock");
  }

  // Starts `kvtier serve` and waits until its socket answers.
  void StartDaemon(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {cli_, "serve", "--server", "unix:" + socket_, "--layout",
                                     "tiny", "--host-bytes", "4MiB"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = Start(args, {}, dir_.Sub("daemon.err"));
    ASSERT_GT(daemon_->pid, 0);
    const uint64_t end = server::MonotonicMicros() + kLongMs * 1000;
    while (server::MonotonicMicros() < end) {
      if (ServerAnswers("unix:" + socket_)) return;
      ASSERT_EQ(WaitExit(daemon_->pid, 0), -1) << "kvtier serve exited: " << Slurp("daemon.err");
      ::usleep(20'000);
    }
    FAIL() << "kvtier serve did not listen: " << Slurp("daemon.err");
  }

  std::unique_ptr<Proc> Client(const std::string& mode, uint64_t first, uint64_t count,
                               int64_t stamp = 1) {
    return Start({"/proc/self/exe"},
                 {{"KVTIER_SERVER_CHILD", mode},
                  {"KVTIER_SERVER_SOCKET", socket_},
                  {"KVTIER_SERVER_FIRST", std::to_string(first)},
                  {"KVTIER_SERVER_COUNT", std::to_string(count)},
                  {"KVTIER_SERVER_STAMP", std::to_string(stamp)}},
                 "");
  }

  nlohmann::json ArenaStats(ServerClient* c) {
    Result<std::string> s = c->DaemonStatsJson();
    if (!s.ok()) return nlohmann::json::object();
    return nlohmann::json::parse(*s)["arena"];
  }

  // Polls the daemon's arena stats until `pred` holds (or the bound ends).
  template <typename Pred>
  nlohmann::json WaitArena(ServerClient* c, Pred pred) {
    const uint64_t end = server::MonotonicMicros() + kLongMs * 1000;
    nlohmann::json a = ArenaStats(c);
    while (!pred(a) && server::MonotonicMicros() < end) {
      ::usleep(10'000);
      a = ArenaStats(c);
    }
    return a;
  }

  std::string Slurp(const std::string& name) {
    std::ifstream f(dir_.Sub(name));
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

  testing::TempDir dir_{"kvsrv"};
  std::string cli_;
  std::string socket_;
  std::unique_ptr<Proc> daemon_;
};

TEST_F(ServerProcessTest, TwoClientProcessesShareBlocksByteForByte) {
  StartDaemon();
  // Two writers, different keys and different header bytes per process.
  auto a = Client("store", 0, 20, /*stamp=*/111);
  auto b = Client("store", 100, 20, /*stamp=*/222);
  ASSERT_EQ(a->Wait(), 0);
  ASSERT_EQ(b->Wait(), 0);
  // Each reads the other's blocks from the arena, checked to the byte.
  auto ra = Client("load", 100, 20);
  auto rb = Client("load", 0, 20);
  EXPECT_EQ(ra->Wait(), 0);
  EXPECT_EQ(rb->Wait(), 0);
  // And this process sees exactly the bytes process a stored.
  std::unique_ptr<ServerClient> c = ClientFor(socket_);
  std::optional<BlockBuffer> got = c->LoadBlock(TestBlockKey(3));
  ASSERT_TRUE(got.has_value());
  SharedBlock want = BlockOf(Tiny(), 3, 111);
  ASSERT_EQ(got->size(), want->size());
  EXPECT_EQ(std::memcmp(got->data(), want->data(), want->size()), 0);
  std::vector<BlockKey> chain;
  for (uint64_t i = 0; i < 22; ++i) chain.push_back(TestBlockKey(i));
  EXPECT_EQ(c->Match(chain), std::vector<ServerTier>(20, ServerTier::kArena));
  EXPECT_EQ(c->Contains(TestBlockKey(100)), ServerTier::kArena);
  EXPECT_EQ(c->Contains(TestBlockKey(50)), ServerTier::kNone);
  nlohmann::json arena = ArenaStats(c.get());
  EXPECT_EQ(arena["published"], 40);
  EXPECT_EQ(arena["leases_open"], 0);
}

TEST_F(ServerProcessTest, KilledClientsReleaseLeasesAndReservationsAndPublishNothingTorn) {
  StartDaemon();
  auto w = Client("store", 0, 4);
  ASSERT_EQ(w->Wait(), 0);
  auto lease = Client("hold_lease", 0, 4);
  auto reserve = Client("hold_reserve", 500, 3);
  ASSERT_EQ(lease->ReadLine(kLongMs), "ready");
  ASSERT_EQ(reserve->ReadLine(kLongMs), "ready");
  std::unique_ptr<ServerClient> c = ClientFor(socket_);
  nlohmann::json held = ArenaStats(c.get());
  EXPECT_EQ(held["leases_open"], 1);
  EXPECT_EQ(held["leased"], 4);
  EXPECT_EQ(held["reserved"], 3);
  lease->Kill(SIGKILL);
  reserve->Kill(SIGKILL);
  EXPECT_EQ(lease->Wait(), 128 + SIGKILL);
  EXPECT_EQ(reserve->Wait(), 128 + SIGKILL);
  nlohmann::json after = WaitArena(c.get(), [](const nlohmann::json& a) {
    return a.value("leases_open", -1) == 0 && a.value("reserved", -1) == 0;
  });
  EXPECT_EQ(after["leases_open"], 0);
  EXPECT_EQ(after["leased"], 0);
  EXPECT_EQ(after["reserved"], 0);
  EXPECT_EQ(after["published"], 4);  // the torn stores were never published
  EXPECT_EQ(after["client_releases"], 2);
  for (uint64_t i = 500; i < 503; ++i) {
    EXPECT_EQ(c->Contains(TestBlockKey(i)), ServerTier::kNone);
  }
  // The released slots are usable again: the arena holds the blocks that fit.
  auto again = Client("store", 600, 3);
  EXPECT_EQ(again->Wait(), 0);
  auto check = Client("load", 0, 4);
  EXPECT_EQ(check->Wait(), 0);
}

TEST_F(ServerProcessTest, KilledDaemonIsMissesThenClientsReconnectToANewOne) {
  StartDaemon();
  std::unique_ptr<ServerClient> c = ClientFor(socket_, /*timeout_ms=*/2000);
  auto w = Client("store", 0, 2);
  ASSERT_EQ(w->Wait(), 0);
  const BlockKey k0[] = {TestBlockKey(0)};
  ASSERT_EQ(c->Match(k0).size(), 1u);
  daemon_->Kill(SIGKILL);
  ASSERT_EQ(daemon_->Wait(), 128 + SIGKILL);
  // Every call returns (a miss, an error), none hangs or crashes.
  EXPECT_EQ(c->Match(k0).size(), 0u);
  EXPECT_FALSE(c->LoadBlock(TestBlockKey(0)).has_value());
  EXPECT_EQ(c->Contains(TestBlockKey(0)), ServerTier::kNone);
  SharedBlock b = BlockOf(Tiny(), 9, 1);
  const std::span<const std::byte> spans[] = {{b->data(), b->size()}};
  const BlockKey k9[] = {TestBlockKey(9)};
  EXPECT_EQ(c->Store(k9, spans).code(), StatusCode::kUnavailable);
  EXPECT_GE(c->Stats().unavailable, 4u);
  // A new daemon on the same socket (the stale file is replaced): the same
  // client object reconnects and stores and loads again.
  StartDaemon();
  const uint64_t end = server::MonotonicMicros() + kLongMs * 1000;
  Status s = c->Store(k9, spans);
  while (!s.ok() && server::MonotonicMicros() < end) {
    ::usleep(20'000);
    s = c->Store(k9, spans);
  }
  ASSERT_TRUE(s.ok()) << s.ToString();
  std::optional<BlockBuffer> got = c->LoadBlock(TestBlockKey(9));
  ASSERT_TRUE(got.has_value());
  EXPECT_TRUE(CheckBlockFile({got->data(), got->size()}, Tiny(), TestBlockKey(9)).ok());
  EXPECT_GE(c->Stats().connects, 2u);
}

TEST_F(ServerProcessTest, ACorruptedArenaByteIsACountedMissNeverWrongBytes) {
  StartDaemon();
  auto w = Client("store", 0, 1);
  ASSERT_EQ(w->Wait(), 0);
  // Flip one byte of the block's data in the shared arena.
  ServerClientOptions o;
  o.server = "unix:" + socket_;
  o.layout_signature = Tiny().Signature();
  server::Connection conn(o, socket_);
  {
    MutexLock lock(conn.mu());
    Result<server_test::RawLookup> found = server_test::LookUpRaw(&conn, TestBlockKey(0));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    const uint64_t lease = found->lease;
    const uint32_t slot = found->slot;
    const uint64_t length = found->length;
    ASSERT_NE(slot, server::kNoSlot);
    std::byte* last = conn.arena()->Bytes(slot).data() + length - 1;
    *last = ~*last;
    server::FrameWriter rel(server::Op::kRelease);
    rel.U64(lease);
    conn.Post(&rel);  // not answered
    server::FrameWriter st(server::Op::kStats);
    ASSERT_TRUE(conn.Call(&st).ok());  // the release came first and was taken
  }
  std::unique_ptr<ServerClient> c = ClientFor(socket_);
  EXPECT_FALSE(c->LoadBlock(TestBlockKey(0)).has_value());
  EXPECT_EQ(c->Stats().verify_failures, 1u);
  EXPECT_EQ(c->Stats().hits, 0u);
  // A client process sees a miss, not the bad bytes.
  auto r = Client("load", 0, 1);
  EXPECT_EQ(r->Wait(), kExitMissing);
}

// The disk folder `dir` holds blocks 0..n-1 of the "store" clients (seed 1),
// byte for byte, except `missing` (if any), which it must not hold.
void ExpectFolderHolds(const std::string& dir, uint64_t n,
                       std::optional<uint64_t> missing = std::nullopt) {
  DiskTierOptions d;
  d.dir = dir;
  d.layout_signature = Tiny().Signature();
  Result<std::unique_ptr<DiskTier>> disk = DiskTier::Open(d, Env::Default());
  ASSERT_TRUE(disk.ok()) << disk.status().ToString();
  for (uint64_t i = 0; i < n; ++i) {
    SharedBlock want = BlockOf(Tiny(), i, 1);
    std::vector<std::byte> buf(want->size() + 4096);
    Result<std::optional<size_t>> got = (*disk)->Load(TestBlockKey(i), buf);
    ASSERT_TRUE(got.ok()) << i;
    if (missing == i) {
      EXPECT_FALSE(got->has_value()) << i;
      continue;
    }
    ASSERT_TRUE(got->has_value()) << i;
    ASSERT_EQ(**got, want->size());
    EXPECT_EQ(std::memcmp(buf.data(), want->data(), want->size()), 0) << i;
  }
}

// A byte changed in the arena after the daemon verified the block: its
// slot sum no longer holds, so the block is dropped at write-down, never
// written to disk with the wrong byte.
TEST_F(ServerProcessTest, ABlockChangedInTheArenaIsDroppedAtWriteDownNotWritten) {
  StartDaemon({"--disk-dir", dir_.Sub("cache")});
  auto w = Client("store", 0, 3);
  ASSERT_EQ(w->Wait(), 0);
  ServerClientOptions o;
  o.server = "unix:" + socket_;
  o.layout_signature = Tiny().Signature();
  {
    server::Connection conn(o, socket_);
    MutexLock lock(conn.mu());
    Result<server_test::RawLookup> found = server_test::LookUpRaw(&conn, TestBlockKey(1));
    ASSERT_TRUE(found.ok()) << found.status().ToString();
    ASSERT_NE(found->slot, server::kNoSlot);
    std::byte* data = conn.arena()->Bytes(found->slot).data() + found->length - 7;
    *data ^= std::byte{0x01};
    server::FrameWriter rel(server::Op::kRelease);
    rel.U64(found->lease);
    conn.Post(&rel);
    server::FrameWriter st(server::Op::kStats);
    ASSERT_TRUE(conn.Call(&st).ok());  // the release came first and was taken
  }
  daemon_->Kill(SIGTERM);
  ASSERT_EQ(daemon_->Wait(), 0) << Slurp("daemon.err");
  EXPECT_EQ(daemon_->ReadLine(kLongMs), "kvtier serve: wrote 2 blocks to the tiers below (1 dropped)");
  ExpectFolderHolds(dir_.Sub("cache"), 3, /*missing=*/1);
}

TEST_F(ServerProcessTest, SigtermWritesArenaBlocksToDiskAndSaysHowMany) {
  StartDaemon({"--disk-dir", dir_.Sub("cache")});
  auto w = Client("store", 0, 12);
  ASSERT_EQ(w->Wait(), 0);
  daemon_->Kill(SIGTERM);
  ASSERT_EQ(daemon_->Wait(), 0) << Slurp("daemon.err");
  EXPECT_EQ(daemon_->ReadLine(kLongMs), "kvtier serve: wrote 12 blocks to the tiers below (0 dropped)");
  // Every block is in the folder, byte for byte what was stored.
  ExpectFolderHolds(dir_.Sub("cache"), 12);
}

// --server-namespace-quota of one slot (any size under a slot's rounds up
// to one): a namespace's second block evicts its first, never another
// namespace's block, and the daemon counts both namespaces.
TEST_F(ServerProcessTest, ANamespaceAtItsQuotaEvictsItsOwnBlockOnly) {
  StartDaemon({"--server-namespace-quota", "1"});
  std::unique_ptr<ServerClient> c = ClientFor(socket_);
  ASSERT_NE(c, nullptr);
  BlockKey ns_a, ns_b;
  ns_a.bytes[0] = 0xA1;
  ns_b.bytes[0] = 0xB2;
  auto store = [&](uint64_t i, const BlockKey& ns) {
    Result<BlockBuffer> b = MakeBlockFile(Tiny(), TestBlockKey(i), ns, ns, 1);
    ASSERT_TRUE(b.ok());
    const BlockKey key = TestBlockKey(i);
    const std::span<const std::byte> bytes(b->data(), b->size());
    ASSERT_TRUE(c->Store(std::span(&key, 1), std::span(&bytes, 1)).ok()) << i;
  };
  store(1, ns_a);
  store(2, ns_b);
  store(3, ns_a);
  EXPECT_EQ(c->Contains(TestBlockKey(1)), ServerTier::kNone);
  EXPECT_EQ(c->Contains(TestBlockKey(2)), ServerTier::kArena);
  EXPECT_EQ(c->Contains(TestBlockKey(3)), ServerTier::kArena);
  const nlohmann::json a = ArenaStats(c.get());
  EXPECT_EQ(a["quota_evictions"], 1);
  EXPECT_EQ(a["namespaces"], 2);
  EXPECT_EQ(a["published"], 2);
}

// --server-socket-group: the socket file gets that group and 0660; a group
// that does not exist is a start-up error naming the option.
TEST_F(ServerProcessTest, TheSocketGroupOptionWidensTheSocketToThatGroup) {
  StartDaemon({"--server-socket-group", std::to_string(::getegid())});
  struct stat st{};
  ASSERT_EQ(::stat(socket_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, ::getegid());
  daemon_->Kill(SIGTERM);
  ASSERT_EQ(daemon_->Wait(), 0);

  auto bad = Start({cli_, "serve", "--server", "unix:" + dir_.Sub("t.sock"), "--layout", "tiny",
                    "--host-bytes", "4MiB", "--server-socket-group", "no-such-group-kvtier"},
                   {}, dir_.Sub("bad.err"));
  EXPECT_NE(bad->Wait(), 0);
  EXPECT_NE(Slurp("bad.err").find("server_socket_group: no group 'no-such-group-kvtier'"),
            std::string::npos)
      << Slurp("bad.err");
}

// Where descriptor `fd` of this process points ("socket:[N]",
// "/memfd:kvtier-arena (deleted)"), "" when it is closed.
std::string FdTarget(int fd) {
  char buf[256];
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n <= 0 ? "" : std::string(buf, static_cast<size_t>(n));
}

// This process's descriptors that point at a socket.
std::map<int, std::string> Sockets() {
  std::map<int, std::string> out;
  for (int fd = 0; fd < 1024; ++fd) {
    if (std::string t = FdTarget(fd); t.starts_with("socket:")) out[fd] = t;
  }
  return out;
}

bool MapsNameTheArena() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream ss;
  ss << maps.rdbuf();
  return ss.str().find("kvtier-arena") != std::string::npos;
}

TEST_F(ServerProcessTest, AForkedChildHoldsNeitherTheClientsConnectionNorItsArena) {
  StartDaemon();
  auto w = Client("store", 0, 2);
  ASSERT_EQ(w->Wait(), 0);
  // This process holds a lease over both blocks on its connection.
  ServerClientOptions o;
  o.server = "unix:" + socket_;
  o.layout_signature = Tiny().Signature();
  const std::map<int, std::string> before = Sockets();
  auto conn = std::make_unique<server::Connection>(o, socket_);
  std::string arena_target;
  int arena_fd = -1;
  {
    MutexLock lock(conn->mu());
    server::FrameWriter lw(server::Op::kLookup);
    const BlockKey k[] = {TestBlockKey(0), TestBlockKey(1)};
    server::WriteKeys(&lw, k);
    Result<std::vector<uint8_t>> body = conn->Call(&lw);
    ASSERT_TRUE(body.ok());
    arena_fd = conn->arena()->fd();
    arena_target = FdTarget(arena_fd);
  }
  ASSERT_NE(arena_target.find("kvtier-arena"), std::string::npos) << arena_target;
  ASSERT_TRUE(MapsNameTheArena());
  std::map<int, std::string> mine = Sockets();
  for (const auto& [fd, target] : before) mine.erase(fd);
  ASSERT_EQ(mine.size(), 1u);  // the connection's socket
  int to_child[2], from_child[2];
  ASSERT_EQ(::pipe2(to_child, O_CLOEXEC), 0);
  ASSERT_EQ(::pipe2(from_child, O_CLOEXEC), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // The child reports what of the parent's client it still holds, then
    // lives on until the parent is done.
    ::close(to_child[1]);
    ::close(from_child[0]);
    char held = 0;
    if (FdTarget(mine.begin()->first) == mine.begin()->second) held |= 1;
    if (FdTarget(arena_fd) == arena_target) held |= 2;
    if (MapsNameTheArena()) held |= 4;
    (void)!::write(from_child[1], &held, 1);
    char c;
    (void)!::read(to_child[0], &c, 1);  // returns when the parent closes its end
    _exit(0);
  }
  ASSERT_GT(pid, 0);
  ::close(to_child[0]);
  ::close(from_child[1]);
  char held = -1;
  ASSERT_EQ(::read(from_child[0], &held, 1), 1);
  ::close(from_child[0]);
  EXPECT_EQ(held, 0) << "1: the socket, 2: the arena's descriptor, 4: its mapping";
  // The parent's connection still works...
  EXPECT_EQ(FdTarget(mine.begin()->first), mine.begin()->second);
  std::unique_ptr<ServerClient> c = ClientFor(socket_);
  EXPECT_EQ(ArenaStats(c.get())["leases_open"], 1);
  // ... and when it ends, the daemon sees it end (the lease released) while
  // the child still lives.
  conn.reset();
  nlohmann::json after = WaitArena(c.get(), [](const nlohmann::json& a) {
    return a.value("leases_open", -1) == 0;
  });
  EXPECT_EQ(after["leases_open"], 0);
  EXPECT_EQ(after["client_releases"], 1);
  EXPECT_EQ(WaitExit(pid, 0), -1);  // the child was alive all along
  ::close(to_child[1]);
  const int rc = WaitExit(pid, kLongMs);
  if (rc < 0) ::kill(pid, SIGKILL);
  EXPECT_EQ(rc, 0);
}

TEST_F(ServerProcessTest, ABadFrameClosesThatClientOnly) {
  StartDaemon();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strncpy(a.sun_path, socket_.c_str(), sizeof(a.sun_path) - 1);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  // A lookup claiming 1000 keys with none behind them.
  const uint8_t bad[] = {8, 0, 0, 0, server::kWireVersion, 3, 0, 0, 0xE8, 0x03, 0, 0};
  ASSERT_EQ(::write(fd, bad, sizeof(bad)), static_cast<ssize_t>(sizeof(bad)));
  char c;
  EXPECT_EQ(::read(fd, &c, 1), 0);  // closed by the daemon
  ::close(fd);
  auto w = Client("store", 0, 2);
  EXPECT_EQ(w->Wait(), 0);
  std::unique_ptr<ServerClient> client = ClientFor(socket_);
  EXPECT_EQ(ArenaStats(client.get())["bad_frames"], 1);
}

}  // namespace
}  // namespace kvtier
