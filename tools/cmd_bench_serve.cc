// `kvtier bench serve`: the figures of the host daemon (`kvtier serve`,
// docs/server.md), each against its limit measured in the same run. The
// bench starts its own daemons (child processes on sockets in a temporary
// folder, arena only) and its own client processes:
//
//   (a) arena_load_GBps    one client's Load of a --tokens prefix (one
//                          batch) out of the arena, verified, against
//                          memcpy_GBps: memcpy of the same bytes into the
//                          same buffers. Target ratio >= 0.8.
//   (b) match/load ns per block of --tiny-layout blocks in chains of 64,
//                          served against the in-process host tier of a
//                          TieredCache. Target <= 2x each.
//   (c) arena bytes after --clients processes stored the same blocks at
//                          once, against the bytes one process's store
//                          takes. Target <= 1.05x (private host tiers
//                          would hold --clients copies).
//   (d) --rounds new client processes, one after another: each connects
//                          (ServerClient::Connect, which reads the arena's
//                          published pages; timed apart: an engine's cache
//                          connects at open, at start-up),
//                          then its first Load of the prefix is timed; the
//                          best against (a). Target >= 0.8x of (a). Then
//                          each one's Load of a second prefix it never
//                          read, into the same buffers (no target).
//   (e) --kills client processes killed (SIGKILL) 0-20 ms after they start
//                          a store/load loop over blocks already stored: wrong bytes read by anyone
//                          (must be 0), leases and reservations left
//                          (must be 0), the daemon's anonymous RSS before
//                          and after.
//
// The bench forks its daemons and clients before it starts any thread of
// its own (the in-process part of (b) runs last).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_util.h"
#include "command.h"
#include "kvtier/file_tree.h"
#include "kvtier/layout.h"
#include "kvtier/server.h"
#include "kvtier/server_client.h"
#include "kvtier/tiered_cache.h"
#include "progress.h"
#include "shmem_pages.h"
#include "synth/block_generator.h"

namespace kvtier::cli {
namespace {

constexpr size_t kChain = 64;
constexpr double kLoadTargetRatio = 0.8;
constexpr double kTinyTargetRatio = 2.0;
constexpr double kSharedTargetRatio = 1.05;
constexpr uint64_t kMaxTokens = uint64_t{1} << 22;
constexpr uint32_t kMaxClients = 256;
constexpr uint32_t kMaxKills = 1'000'000;
constexpr uint32_t kMaxRounds = 1000;
constexpr uint32_t kMaxTinySamples = 1'000'000;
// Keys the killed clients store and load (tiny blocks).
constexpr uint64_t kKillKeys = 256;

struct ServeBenchArgs {
  std::string layout = "qwen2.5-0.5b";
  std::string tiny_layout = "tiny";
  uint64_t tokens = 32768;
  uint32_t clients = 8;
  uint32_t kills = 1000;
  uint32_t rounds = 5;
  uint32_t tiny_samples = 2000;
};

double Since(Clock::time_point t0) { return Seconds(t0, Clock::now()); }

// `count` chained keys of one namespace (one prefix) per `chain` keys.
std::vector<BlockKey> PrefixKeys(const KeyChain& kc, uint64_t count, uint64_t first_token,
                                 size_t chain) {
  std::vector<BlockKey> keys;
  keys.reserve(count);
  std::vector<uint32_t> tokens(kc.block_tokens());
  BlockKey parent = kc.ns();
  for (uint64_t i = 0; i < count; ++i) {
    if (i % chain == 0) parent = kc.ns();
    for (size_t t = 0; t < tokens.size(); ++t) {
      tokens[t] = static_cast<uint32_t>(first_token + i * 31 + t);
    }
    parent = kc.Next(parent, tokens);
    keys.push_back(parent);
  }
  return keys;
}

Result<std::vector<BlockBuffer>> BlockFiles(const ModelLayout& layout, const KeyChain& kc,
                                            std::span<const BlockKey> keys, size_t chain) {
  std::vector<BlockBuffer> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& parent = i % chain == 0 ? kc.ns() : keys[i - 1];
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, MakeBlockFile(layout, keys[i], parent, kc.ns()));
    out.push_back(std::move(b));
  }
  return out;
}

std::vector<std::span<const std::byte>> Spans(const std::vector<BlockBuffer>& blocks) {
  std::vector<std::span<const std::byte>> out;
  for (const BlockBuffer& b : blocks) out.emplace_back(b.data(), b.size());
  return out;
}

// Destination buffers for loads: page-aligned, as an engine's KV pool pages
// are (a std::vector's bytes sit 16 bytes past a page or a malloc chunk's
// start, which made glibc's memcpy of page-aligned arena slots into them up
// to 2.5x slower here: a misaligned destination, not the copy's cost).
struct LoadBuffers {
  std::vector<BlockBuffer> storage;
  std::vector<std::span<std::byte>> spans;
};
Result<LoadBuffers> MakeLoadBuffers(size_t n, size_t bytes) {
  LoadBuffers b;
  for (size_t i = 0; i < n; ++i) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer one, BlockBuffer::Allocate(bytes));
    b.storage.push_back(std::move(one));
    b.spans.emplace_back(b.storage.back().data(), bytes);
  }
  return b;
}

Result<KeyChain> ChainFor(const ModelLayout& layout, const std::string& model) {
  NamespaceOptions ns;
  ns.model_id = model;
  ns.layout_signature = layout.Signature();
  ns.block_tokens = layout.block_tokens;
  return KeyChain::Create(ns);
}

// --- Daemons -------------------------------------------------------------

Server* g_daemon = nullptr;
void StopDaemon(int) {
  if (g_daemon != nullptr) g_daemon->Stop();
}

// An arena-only daemon of `layout` with `slots` slots, in a child process.
class DaemonProcess {
 public:
  static Result<std::unique_ptr<DaemonProcess>> Start(const ModelLayout& layout, uint64_t slots,
                                                      const std::string& socket) {
    ServerOptions o;
    o.server = "unix:" + socket;
    o.layout = layout;
    o.cache.layout_signature = layout.Signature();
    o.cache.host.capacity_bytes = SatMul(slots, o.SlotBytes());
    KVTIER_RETURN_IF_ERROR(o.Validate());
    KVTIER_RETURN_IF_ERROR(
        CheckMemory("the bench's arena of " + std::to_string(slots) + " slots",
                    o.cache.host.capacity_bytes));
    const pid_t pid = ::fork();
    if (pid < 0) return Status::IOError("fork", errno);
    if (pid == 0) {
      Result<std::unique_ptr<Server>> server = Server::Open(std::move(o), Env::Default());
      if (!server.ok()) {
        std::cerr << "kvtier bench serve: daemon: " << server.status().ToString() << std::endl;
        ::_exit(3);
      }
      g_daemon = server->get();
      struct sigaction sa{};
      sa.sa_handler = StopDaemon;
      sigemptyset(&sa.sa_mask);
      sigaction(SIGTERM, &sa, nullptr);
      const Status run = (*server)->Run();
      (void)(*server)->Shutdown();
      ::_exit(run.ok() ? 0 : 4);
    }
    auto d = std::unique_ptr<DaemonProcess>(new DaemonProcess(pid, socket));
    KVTIER_RETURN_IF_ERROR(d->WaitListening());
    return d;
  }

  ~DaemonProcess() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGTERM);
    int st = 0;
    ::waitpid(pid_, &st, 0);
  }

  pid_t pid() const { return pid_; }
  std::string server() const { return "unix:" + socket_; }

  // The daemon's "anonymous" resident bytes (its heap: RssAnon), or 0.
  uint64_t AnonRss() const {
    std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
    std::string word;
    while (status >> word) {
      if (word == "RssAnon:") {
        uint64_t kb = 0;
        status >> kb;
        return kb * 1024;
      }
    }
    return 0;
  }

 private:
  DaemonProcess(pid_t pid, std::string socket) : pid_(pid), socket_(std::move(socket)) {}

  Status WaitListening() {
    const auto t0 = Clock::now();
    while (Since(t0) < 30) {
      int st = 0;
      if (::waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return Status::Internal("bench serve: the daemon exited at start (status " +
                                std::to_string(st) + ")");
      }
      if (ServerAnswers(server())) return Status::Ok();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return Status::Unavailable("bench serve: the daemon did not listen within 30 s");
  }

  pid_t pid_;
  std::string socket_;
};

Result<std::unique_ptr<ServerClient>> Connect(const DaemonProcess& d, const ModelLayout& layout) {
  ServerClientOptions o;
  o.server = d.server();
  o.layout_signature = layout.Signature();
  o.timeout_ms = 10'000;
  return ServerClient::Open(std::move(o));
}

Result<nlohmann::json> ArenaStats(ServerClient& c) {
  KVTIER_ASSIGN_OR_RETURN(std::string text, c.DaemonStatsJson());
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("arena")) {
    return Status::Internal("bench serve: the daemon's stats are not the expected JSON");
  }
  return j["arena"];
}

// Runs `body` in a child process; its result (u64s, plain bytes) comes back
// through a pipe. The child must not use anything of the parent's but plain
// memory.
template <typename Body>
Result<pid_t> Child(Body body, int* result_fd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return Status::IOError("pipe", errno);
  const pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork", errno);
  if (pid == 0) {
    ::close(p[0]);
    const auto v = body();
    static_assert(sizeof(v) <= PIPE_BUF, "one atomic write");
    (void)!::write(p[1], &v, sizeof(v));
    ::_exit(0);
  }
  ::close(p[1]);
  *result_fd = p[0];
  return pid;
}

// The child's result, after it exited; Internal if it died or sent none.
template <typename T = uint64_t>
Result<T> Join(pid_t pid, int fd) {
  T v{};
  const ssize_t n = ::read(fd, &v, sizeof(v));
  ::close(fd);
  int st = 0;
  ::waitpid(pid, &st, 0);
  if (n != sizeof(v) || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    return Status::Internal("bench serve: a client process failed (status " + std::to_string(st) +
                            ")");
  }
  return v;
}

constexpr uint64_t kChildFailed = UINT64_MAX;

// --- (a) and (d) ------------------------------------------------------------

struct PrefixFigures {
  uint64_t blocks = 0, bytes = 0;
  double load_gbps = 0, memcpy_gbps = 0;
  // (d): the best and the median of its processes' first loads, and their
  // median connect (at start-up, before the first load: not in the load).
  double first_load_gbps = 0, first_load_median_gbps = 0, connect_ms = 0;
  uint32_t first_processes = 0;
  // (d)'s processes, next: a second prefix each never read, into the
  // buffers its first load filled (the best).
  double new_slots_load_gbps = 0;
  // The arena bytes the last of (d)'s processes mapped in 2 MiB pages after
  // its first load, and the system's shmem_enabled setting.
  uint64_t first_huge_bytes = 0;
  std::string shmem_enabled;
  // The 2 MiB arena pages the last of them read at connect.
  uint64_t warmed_pages = 0;
};

// What one of (d)'s processes measured: ns of its connect, of its first
// load, then of its load of the second prefix; its arena bytes in 2 MiB
// pages after the first load.
struct FirstLoadNs {
  uint64_t connect = 0, first = 0, new_slots = 0, huge_bytes = 0, warmed_pages = 0;
};

uint64_t NsBetween(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

double Median(std::vector<double> v) {
  std::ranges::sort(v);
  return v.empty() ? 0 : v[v.size() / 2];
}

Result<PrefixFigures> BenchPrefix(const ModelLayout& layout, const std::string& dir,
                                  const ServeBenchArgs& a, bool json) {
  KVTIER_ASSIGN_OR_RETURN(KeyChain kc, ChainFor(layout, "kvtier-bench-serve"));
  const uint64_t n = std::max<uint64_t>(1, (a.tokens + layout.block_tokens - 1) / layout.block_tokens);
  const std::vector<BlockKey> keys = PrefixKeys(kc, n, 0, n);
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockBuffer> blocks, BlockFiles(layout, kc, keys, n));
  const uint64_t block_bytes = blocks[0].size();
  // Two prefixes here and in the arena, the parent's buffers, the child's.
  KVTIER_RETURN_IF_ERROR(CheckMemory("--tokens " + std::to_string(a.tokens) + " of " + layout.name,
                                     SatMul(SatMul(n, block_bytes), 6)));
  // (d)'s second prefix: other tokens, so other keys and slots.
  const std::vector<BlockKey> keys2 = PrefixKeys(kc, n, uint64_t{1} << 31, n);
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockBuffer> blocks2, BlockFiles(layout, kc, keys2, n));
  KVTIER_ASSIGN_OR_RETURN(auto daemon,
                          DaemonProcess::Start(layout, 2 * n + 1, dir + "/prefix.sock"));
  PrefixFigures f;
  f.blocks = n;
  f.bytes = n * block_bytes;
  {
    // The storing process: a child, which exits before anything is read.
    int fd = -1;
    KVTIER_ASSIGN_OR_RETURN(pid_t pid, Child(
                                           [&]() -> uint64_t {
                                             auto c = Connect(*daemon, layout);
                                             if (!c.ok()) return kChildFailed;
                                             return (*c)->Store(keys, Spans(blocks)).ok() &&
                                                            (*c)->Store(keys2, Spans(blocks2)).ok()
                                                        ? 0
                                                        : kChildFailed;
                                           },
                                           &fd));
    KVTIER_ASSIGN_OR_RETURN(uint64_t stored, Join(pid, fd));
    if (stored != 0) return Status::Internal("bench serve: storing the prefix failed");
  }
  KVTIER_ASSIGN_OR_RETURN(LoadBuffers buffers, MakeLoadBuffers(n, block_bytes));
  std::vector<std::span<std::byte>>& dsts = buffers.spans;

  // (d) first: processes that never touched the arena, one after another
  // (each a client restarted), load the prefix. Each connects as an engine
  // does at start-up, then its first load is timed: the best of a.rounds
  // processes, as (a) keeps the best of a.rounds loads.
  Step(json, "bench serve", "new processes' first load of the prefix");
  std::vector<double> first_gbps, connect_ms;
  for (uint32_t r = 0; r < a.rounds; ++r) {
    int fd = -1;
    KVTIER_ASSIGN_OR_RETURN(
        pid_t pid, Child(
                       [&]() -> FirstLoadNs {
                         const FirstLoadNs failed{0, kChildFailed, kChildFailed, 0, 0};
                         // Its own buffers, page-aligned as (a)'s (and an
                         // engine's pool pages) are, written once before
                         // the clock starts (as an engine's are).
                         Result<LoadBuffers> own = MakeLoadBuffers(n, block_bytes);
                         if (!own.ok()) return failed;
                         for (std::span<std::byte> o : own->spans) {
                           std::memset(o.data(), 1, o.size());
                         }
                         const std::vector<std::span<std::byte>>& to = own->spans;
                         const auto t0 = Clock::now();
                         auto c = Connect(*daemon, layout);
                         // As an engine's cache does at open (ServedCache).
                         if (!c.ok() || !(*c)->Connect().ok()) return failed;
                         auto all_hit = [&](const Result<std::vector<uint64_t>>& got) {
                           return got.ok() && std::ranges::all_of(*got, [&](uint64_t len) {
                             return len == block_bytes;
                           });
                         };
                         const auto t1 = Clock::now();
                         if (!all_hit((*c)->Load(keys, to))) return failed;
                         const auto t2 = Clock::now();
                         const uint64_t huge = ShmemPmdMappedBytes(::getpid());
                         // Then slots new to it, into buffers a load filled.
                         const auto t3 = Clock::now();
                         if (!all_hit((*c)->Load(keys2, to))) return failed;
                         const auto t4 = Clock::now();
                         return {NsBetween(t0, t1), NsBetween(t1, t2), NsBetween(t3, t4), huge,
                                 (*c)->Stats().warmed_pages};
                       },
                       &fd));
    KVTIER_ASSIGN_OR_RETURN(FirstLoadNs ns, Join<FirstLoadNs>(pid, fd));
    if (ns.first == kChildFailed) {
      return Status::Internal("bench serve: a new process missed the prefix");
    }
    auto gbps = [&](uint64_t t) {
      return static_cast<double>(f.bytes) / static_cast<double>(std::max<uint64_t>(t, 1));
    };
    first_gbps.push_back(gbps(ns.first));
    connect_ms.push_back(static_cast<double>(ns.connect) / 1e6);
    f.new_slots_load_gbps = std::max(f.new_slots_load_gbps, gbps(ns.new_slots));
    f.first_huge_bytes = ns.huge_bytes;
    f.warmed_pages = ns.warmed_pages;
  }
  f.first_processes = a.rounds;
  f.first_load_gbps = *std::ranges::max_element(first_gbps);
  f.first_load_median_gbps = Median(first_gbps);
  f.connect_ms = Median(connect_ms);
  f.shmem_enabled = ShmemHugeSetting();

  Step(json, "bench serve", "prefix loads from the arena against memcpy");
  KVTIER_ASSIGN_OR_RETURN(auto client, Connect(*daemon, layout));
  double best_load = 1e300, best_memcpy = 1e300;
  for (uint32_t r = 0; r < a.rounds; ++r) {
    auto t0 = Clock::now();
    KVTIER_ASSIGN_OR_RETURN(std::vector<uint64_t> got, client->Load(keys, dsts));
    best_load = std::min(best_load, Since(t0));
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != block_bytes) return Status::Internal("bench serve: an arena block missed");
      if (std::memcmp(dsts[i].data(), blocks[i].data(), block_bytes) != 0) {
        return Status::Internal("bench serve: an arena block came back with other bytes");
      }
    }
    t0 = Clock::now();
    for (size_t i = 0; i < n; ++i) std::memcpy(dsts[i].data(), blocks[i].data(), block_bytes);
    asm volatile("" : : "r"(dsts[0].data()) : "memory");
    best_memcpy = std::min(best_memcpy, Since(t0));
  }
  f.load_gbps = static_cast<double>(f.bytes) / best_load / 1e9;
  f.memcpy_gbps = static_cast<double>(f.bytes) / best_memcpy / 1e9;
  return f;
}

// --- (c) --------------------------------------------------------------------

struct SharedFigures {
  uint64_t blocks = 0, one_copy_bytes = 0, shared_bytes = 0;
};

Result<SharedFigures> BenchShared(const ModelLayout& layout, const std::string& dir,
                                  const ServeBenchArgs& a, bool json) {
  Step(json, "bench serve",
       std::to_string(a.clients) + " processes store the same blocks at once");
  KVTIER_ASSIGN_OR_RETURN(KeyChain kc, ChainFor(layout, "kvtier-bench-serve-shared"));
  const uint64_t n = 16;
  const std::vector<BlockKey> one = PrefixKeys(kc, n, 1'000'000, n);
  const std::vector<BlockKey> many = PrefixKeys(kc, n, 2'000'000, n);
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockBuffer> one_blocks, BlockFiles(layout, kc, one, n));
  KVTIER_ASSIGN_OR_RETURN(std::vector<BlockBuffer> many_blocks, BlockFiles(layout, kc, many, n));
  // Room for every client's reservation at once.
  KVTIER_ASSIGN_OR_RETURN(auto daemon, DaemonProcess::Start(layout, n * (a.clients + 2),
                                                            dir + "/shared.sock"));
  KVTIER_ASSIGN_OR_RETURN(auto client, Connect(*daemon, layout));
  auto published = [&]() -> Result<uint64_t> {
    KVTIER_ASSIGN_OR_RETURN(nlohmann::json s, ArenaStats(*client));
    return s["published"].get<uint64_t>() * s["slot_bytes"].get<uint64_t>();
  };
  auto store_in = [&](const std::vector<BlockKey>& keys, const std::vector<BlockBuffer>& blocks,
                      uint32_t processes) -> Status {
    std::vector<std::pair<pid_t, int>> kids;
    for (uint32_t p = 0; p < processes; ++p) {
      int fd = -1;
      KVTIER_ASSIGN_OR_RETURN(pid_t pid, Child(
                                             [&]() -> uint64_t {
                                               auto c = Connect(*daemon, layout);
                                               if (!c.ok()) return kChildFailed;
                                               const auto spans = Spans(blocks);
                                               return (*c)->Store(keys, spans).ok() ? 0
                                                                                    : kChildFailed;
                                             },
                                             &fd));
      kids.emplace_back(pid, fd);
    }
    Status first = Status::Ok();
    for (auto [pid, fd] : kids) {
      Result<uint64_t> r = Join(pid, fd);
      if (first.ok() && !r.ok()) first = r.status();
      if (first.ok() && *r != 0) first = Status::Internal("bench serve: a client's store failed");
    }
    return first;
  };
  KVTIER_ASSIGN_OR_RETURN(uint64_t before, published());
  KVTIER_RETURN_IF_ERROR(store_in(one, one_blocks, 1));
  KVTIER_ASSIGN_OR_RETURN(uint64_t after_one, published());
  KVTIER_RETURN_IF_ERROR(store_in(many, many_blocks, a.clients));
  KVTIER_ASSIGN_OR_RETURN(uint64_t after_many, published());
  SharedFigures f;
  f.blocks = n;
  f.one_copy_bytes = after_one - before;
  f.shared_bytes = after_many - after_one;
  return f;
}

// --- (b) --------------------------------------------------------------------

struct TinyFigures {
  double served_match_ns = 0, served_load_ns = 0, local_match_ns = 0, local_load_ns = 0;
};

double PerBlockNs(double seconds, uint64_t blocks) {
  return seconds * 1e9 / static_cast<double>(std::max<uint64_t>(blocks, 1));
}

// Best of `rounds` timings of `samples` calls of `call` over chains of kChain.
template <typename Call>
Result<double> BestNsPerBlock(uint32_t rounds, uint32_t samples, uint64_t chains, Call call) {
  double best = 1e300;
  for (uint32_t r = 0; r < rounds; ++r) {
    const auto t0 = Clock::now();
    for (uint32_t s = 0; s < samples; ++s) KVTIER_RETURN_IF_ERROR(call(s % chains));
    best = std::min(best, PerBlockNs(Since(t0), uint64_t{samples} * kChain));
  }
  return best;
}

Result<TinyFigures> BenchTinyServed(const ModelLayout& tiny, const DaemonProcess& daemon,
                                    const std::vector<BlockKey>& keys,
                                    const std::vector<BlockBuffer>& blocks,
                                    const ServeBenchArgs& a) {
  const uint64_t chains = keys.size() / kChain;
  KVTIER_ASSIGN_OR_RETURN(auto client, Connect(daemon, tiny));
  KVTIER_RETURN_IF_ERROR(client->Store(keys, Spans(blocks)));
  KVTIER_ASSIGN_OR_RETURN(LoadBuffers buffers, MakeLoadBuffers(kChain, blocks[0].size()));
  std::vector<std::span<std::byte>>& dsts = buffers.spans;
  TinyFigures f;
  KVTIER_ASSIGN_OR_RETURN(
      f.served_match_ns,
      BestNsPerBlock(a.rounds, a.tiny_samples, chains, [&](uint64_t c) -> Status {
        const auto tiers = client->Match(std::span(keys).subspan(c * kChain, kChain));
        if (tiers.size() != kChain) return Status::Internal("bench serve: a served chain missed");
        return Status::Ok();
      }));
  KVTIER_ASSIGN_OR_RETURN(
      f.served_load_ns,
      BestNsPerBlock(a.rounds, a.tiny_samples, chains, [&](uint64_t c) -> Status {
        KVTIER_ASSIGN_OR_RETURN(auto got,
                                client->Load(std::span(keys).subspan(c * kChain, kChain), dsts));
        for (uint64_t len : got) {
          if (len == 0) return Status::Internal("bench serve: a served tiny block missed");
        }
        return Status::Ok();
      }));
  return f;
}

Status BenchTinyLocal(const ModelLayout& tiny, const std::vector<BlockKey>& keys,
                      const std::vector<BlockBuffer>& blocks, const ServeBenchArgs& a,
                      TinyFigures* f) {
  const uint64_t chains = keys.size() / kChain;
  CacheOptions o;
  o.layout_signature = tiny.Signature();
  o.host.capacity_bytes = SatMul(keys.size() + 1, blocks[0].size());
  o.load_threads = 0;
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(o, Env::Default()));
  std::vector<SharedBlock> shared;
  for (const BlockBuffer& b : blocks) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer copy, BlockBuffer::CopyOf(std::span(b.data(), b.size())));
    shared.push_back(std::make_shared<const BlockBuffer>(std::move(copy)));
  }
  KVTIER_RETURN_IF_ERROR(cache->Store(keys, shared));
  KVTIER_ASSIGN_OR_RETURN(LoadBuffers buffers, MakeLoadBuffers(kChain, blocks[0].size()));
  std::vector<std::span<std::byte>>& dsts = buffers.spans;
  KVTIER_ASSIGN_OR_RETURN(
      f->local_match_ns,
      BestNsPerBlock(a.rounds, a.tiny_samples, chains, [&](uint64_t c) -> Status {
        if (cache->Match(std::span(keys).subspan(c * kChain, kChain)).blocks != kChain) {
          return Status::Internal("bench serve: a host-tier chain missed");
        }
        return Status::Ok();
      }));
  KVTIER_ASSIGN_OR_RETURN(
      f->local_load_ns,
      BestNsPerBlock(a.rounds, a.tiny_samples, chains, [&](uint64_t c) -> Status {
        KVTIER_ASSIGN_OR_RETURN(
            LoadFuture fut,
            cache->Load(std::span(keys).subspan(c * kChain, kChain),
                        std::span<const std::span<std::byte>>(dsts)));
        KVTIER_ASSIGN_OR_RETURN(std::vector<LoadedBlock> got, fut.Get());
        for (const LoadedBlock& g : got) {
          if (g.tier != CacheTier::kHost) return Status::Internal("bench serve: a host block missed");
        }
        return Status::Ok();
      }));
  return Status::Ok();
}

// --- (e) --------------------------------------------------------------------

struct KillFigures {
  uint32_t kills = 0;
  uint64_t child_loads = 0, child_wrong = 0, final_hits = 0, final_wrong = 0;
  uint64_t leases_left = 0, reserved_left = 0, client_releases = 0;
  uint64_t rss_before = 0, rss_after = 0;
};

// What the killed clients count, in memory shared with them.
struct KillCounters {
  std::atomic<uint64_t> loads{0}, wrong{0};
};

[[noreturn]] void KilledClientLoop(const ModelLayout& tiny, const DaemonProcess& daemon,
                                   const std::vector<BlockKey>& keys,
                                   const std::vector<BlockBuffer>& blocks, uint64_t seed,
                                   KillCounters* counters) {
  auto c = Connect(daemon, tiny);
  if (!c.ok()) ::_exit(5);
  std::vector<std::byte> storage(blocks[0].size() * 8);
  uint64_t rng = seed;
  for (;;) {
    const uint64_t first = SplitMix64Next(rng) % (keys.size() - 8);
    const auto ks = std::span(keys).subspan(first, 8);
    if (SplitMix64Next(rng) % 2 == 0) {
      std::vector<std::span<const std::byte>> spans;
      for (size_t i = 0; i < 8; ++i) spans.emplace_back(blocks[first + i].data(), blocks[first + i].size());
      (void)(*c)->Store(ks, spans);
    } else {
      std::vector<std::span<std::byte>> dsts;
      for (size_t i = 0; i < 8; ++i) {
        dsts.emplace_back(storage.data() + i * blocks[0].size(), blocks[0].size());
      }
      auto got = (*c)->Load(ks, dsts);
      if (!got.ok()) continue;
      for (size_t i = 0; i < 8; ++i) {
        if ((*got)[i] == 0) continue;
        counters->loads.fetch_add(1, std::memory_order_relaxed);
        if ((*got)[i] != blocks[first + i].size() ||
            std::memcmp(dsts[i].data(), blocks[first + i].data(), (*got)[i]) != 0) {
          counters->wrong.fetch_add(1, std::memory_order_relaxed);
        }
      }
    }
  }
}

Result<KillFigures> BenchKills(const ModelLayout& tiny, const DaemonProcess& daemon,
                               const std::vector<BlockKey>& keys,
                               const std::vector<BlockBuffer>& blocks, const ServeBenchArgs& a,
                               bool json) {
  Step(json, "bench serve", std::to_string(a.kills) + " client processes killed with SIGKILL");
  void* shm = ::mmap(nullptr, sizeof(KillCounters), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shm == MAP_FAILED) return Status::IOError("mmap", errno);
  auto* counters = new (shm) KillCounters;
  struct Unmap {
    void* p;
    ~Unmap() { ::munmap(p, sizeof(KillCounters)); }
  } unmap{shm};
  KVTIER_ASSIGN_OR_RETURN(auto client, Connect(daemon, tiny));
  // Every key in the arena first, so that the killed clients' loads hit.
  KVTIER_RETURN_IF_ERROR(client->Store(keys, Spans(blocks)));
  KillFigures f;
  uint64_t rng = 0x5eedULL;
  auto one_kill = [&](uint32_t i) -> Status {
    const pid_t pid = ::fork();
    if (pid < 0) return Status::IOError("fork", errno);
    if (pid == 0) KilledClientLoop(tiny, daemon, keys, blocks, 0x1234ULL + i, counters);
    // 0 to 20 ms after the fork: before, during and after connecting,
    // mid-store, mid-load.
    std::this_thread::sleep_for(std::chrono::microseconds(SplitMix64Next(rng) % 20'000));
    ::kill(pid, SIGKILL);
    int st = 0;
    ::waitpid(pid, &st, 0);
    return Status::Ok();
  };
  // A first tenth warms the daemon up (its maps and vectors reach their
  // working size) before the RSS reading the rest is compared with.
  const uint32_t warm = std::max<uint32_t>(1, a.kills / 10);
  for (uint32_t i = 0; i < warm && i < a.kills; ++i) KVTIER_RETURN_IF_ERROR(one_kill(i));
  f.rss_before = daemon.AnonRss();
  for (uint32_t i = warm; i < a.kills; ++i) KVTIER_RETURN_IF_ERROR(one_kill(i));
  f.kills = a.kills;
  // The daemon ends a client's leases when it reads the socket's close:
  // wait (at most 10 s) for the last ones.
  nlohmann::json s;
  for (const auto t0 = Clock::now();;) {
    KVTIER_ASSIGN_OR_RETURN(s, ArenaStats(*client));
    if ((s["leases_open"] == 0 && s["reserved"] == 0) || Since(t0) > 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  f.rss_after = daemon.AnonRss();
  f.leases_left = s["leases_open"].get<uint64_t>();
  f.reserved_left = s["reserved"].get<uint64_t>();
  f.client_releases = s["client_releases"].get<uint64_t>();
  f.child_loads = counters->loads.load();
  f.child_wrong = counters->wrong.load();
  // Everything the arena holds now, read back and compared.
  std::vector<std::vector<std::byte>> storage(keys.size(), std::vector<std::byte>(blocks[0].size()));
  std::vector<std::span<std::byte>> dsts;
  for (auto& st : storage) dsts.emplace_back(st);
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint64_t> got, client->Load(keys, dsts));
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] == 0) continue;
    ++f.final_hits;
    if (got[i] != blocks[i].size() || std::memcmp(dsts[i].data(), blocks[i].data(), got[i]) != 0) {
      ++f.final_wrong;
    }
  }
  return f;
}

// --- The command ------------------------------------------------------------

int Run(const ServeBenchArgs& a, const CommonFlags& flags) {
  if (a.tokens == 0 || a.tokens > kMaxTokens) {
    return ReportError(flags, Status::InvalidArgument("--tokens: expected 1.." +
                                                      std::to_string(kMaxTokens)));
  }
  if (a.clients == 0 || a.clients > kMaxClients) {
    return ReportError(flags, Status::InvalidArgument("--clients: expected 1.." +
                                                      std::to_string(kMaxClients)));
  }
  if (a.kills > kMaxKills) {
    return ReportError(flags, Status::InvalidArgument("--kills: expected 0.." +
                                                      std::to_string(kMaxKills)));
  }
  if (a.rounds == 0 || a.rounds > kMaxRounds) {
    return ReportError(flags, Status::InvalidArgument("--rounds: expected 1.." +
                                                      std::to_string(kMaxRounds)));
  }
  if (a.tiny_samples == 0 || a.tiny_samples > kMaxTinySamples) {
    return ReportError(flags, Status::InvalidArgument("--tiny-samples: expected 1.." +
                                                      std::to_string(kMaxTinySamples)));
  }
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, 0);
  if (!layout.ok()) return ReportError(flags, layout.status().WithContext("--layout"));
  Result<ModelLayout> tiny = ModelLayout::Resolve(Env::Default(), a.tiny_layout, 0);
  if (!tiny.ok()) return ReportError(flags, tiny.status().WithContext("--tiny-layout"));

  std::string dir = (std::filesystem::temp_directory_path() / "kvtier-bench-serve-XXXXXX").string();
  if (::mkdtemp(dir.data()) == nullptr) {
    return ReportError(flags, Status::IOError("mkdtemp " + dir, errno), kExitFailure);
  }
  struct RemoveAfter {
    std::string dir;
    ~RemoveAfter() { (void)RemoveTree(Env::Default(), dir); }
  } remove_after{dir};
  auto fail = [&](const Status& s) { return ReportError(flags, s, kExitFailure); };

  Step(flags.json, "bench serve", "storing a " + std::to_string(a.tokens) + "-token prefix of " +
                                      layout->name + " from one process");
  Result<PrefixFigures> prefix = BenchPrefix(*layout, dir, a, flags.json);
  if (!prefix.ok()) return fail(prefix.status());
  Result<SharedFigures> shared = BenchShared(*layout, dir, a, flags.json);
  if (!shared.ok()) return fail(shared.status());

  // Tiny blocks: (b)'s served half and (e) on one daemon.
  Result<KeyChain> kc = ChainFor(*tiny, "kvtier-bench-serve-tiny");
  if (!kc.ok()) return fail(kc.status());
  const std::vector<BlockKey> tiny_keys = PrefixKeys(*kc, 16 * kChain, 0, kChain);
  Result<std::vector<BlockBuffer>> tiny_blocks = BlockFiles(*tiny, *kc, tiny_keys, kChain);
  if (!tiny_blocks.ok()) return fail(tiny_blocks.status());
  const std::vector<BlockKey> kill_keys = PrefixKeys(*kc, kKillKeys, 5'000'000, kKillKeys);
  Result<std::vector<BlockBuffer>> kill_blocks = BlockFiles(*tiny, *kc, kill_keys, kKillKeys);
  if (!kill_blocks.ok()) return fail(kill_blocks.status());
  Result<TinyFigures> t = TinyFigures{};
  Result<KillFigures> kills = KillFigures{};
  {
    // Room for the tiny chains, the kill keys and 8 in-flight reservations
    // per killed client that the daemon has not yet seen close.
    Result<std::unique_ptr<DaemonProcess>> daemon = DaemonProcess::Start(
        *tiny, tiny_keys.size() + kKillKeys + 64 * 8, dir + "/tiny.sock");
    if (!daemon.ok()) return fail(daemon.status());
    Step(flags.json, "bench serve", "tiny blocks: match and load per block, served");
    t = BenchTinyServed(*tiny, **daemon, tiny_keys, *tiny_blocks, a);
    if (!t.ok()) return fail(t.status());
    if (a.kills > 0) {
      kills = BenchKills(*tiny, **daemon, kill_keys, *kill_blocks, a, flags.json);
      if (!kills.ok()) return fail(kills.status());
    }
  }
  // Threads of the bench's own start here: no fork after this point.
  Step(flags.json, "bench serve", "tiny blocks: match and load per block, in-process host tier");
  if (Status s = BenchTinyLocal(*tiny, tiny_keys, *tiny_blocks, a, &*t); !s.ok()) return fail(s);

  const double load_ratio = prefix->load_gbps / std::max(prefix->memcpy_gbps, 1e-12);
  const double first_ratio = prefix->first_load_gbps / std::max(prefix->load_gbps, 1e-12);
  const double match_ratio = t->served_match_ns / std::max(t->local_match_ns, 1e-12);
  const double tiny_load_ratio = t->served_load_ns / std::max(t->local_load_ns, 1e-12);
  const double shared_ratio = static_cast<double>(shared->shared_bytes) /
                              static_cast<double>(std::max<uint64_t>(shared->one_copy_bytes, 1));
  const bool kills_clean = kills->child_wrong == 0 && kills->final_wrong == 0 &&
                           kills->leases_left == 0 && kills->reserved_left == 0;
  const bool targets_met = load_ratio >= kLoadTargetRatio && first_ratio >= kLoadTargetRatio &&
                           match_ratio <= kTinyTargetRatio && tiny_load_ratio <= kTinyTargetRatio &&
                           shared_ratio <= kSharedTargetRatio && kills_clean;
  if (flags.json) {
    PrintJson({{"layout", layout->name},
               {"prefix_tokens", a.tokens},
               {"prefix_blocks", prefix->blocks},
               {"prefix_bytes", prefix->bytes},
               {"arena_load_GBps", prefix->load_gbps},
               {"memcpy_GBps", prefix->memcpy_gbps},
               {"arena_load_vs_memcpy", load_ratio},
               {"first_load_GBps", prefix->first_load_gbps},
               {"first_load_vs_arena_load", first_ratio},
               {"first_load_median_GBps", prefix->first_load_median_gbps},
               {"first_processes", prefix->first_processes},
               {"first_process_connect_ms", prefix->connect_ms},
               {"first_process_warmed_pages", prefix->warmed_pages},
               {"first_process_new_slots_GBps", prefix->new_slots_load_gbps},
               {"first_process_huge_page_bytes", prefix->first_huge_bytes},
               {"shmem_enabled", prefix->shmem_enabled},
               {"tiny_layout", tiny->name},
               {"served_match_ns_per_block", t->served_match_ns},
               {"local_match_ns_per_block", t->local_match_ns},
               {"match_served_vs_local", match_ratio},
               {"served_load_ns_per_block", t->served_load_ns},
               {"local_load_ns_per_block", t->local_load_ns},
               {"load_served_vs_local", tiny_load_ratio},
               {"clients", a.clients},
               {"shared_blocks", shared->blocks},
               {"one_copy_arena_bytes", shared->one_copy_bytes},
               {"shared_arena_bytes", shared->shared_bytes},
               {"shared_vs_one_copy", shared_ratio},
               {"kills", kills->kills},
               {"killed_clients_loads", kills->child_loads},
               {"killed_clients_wrong_bytes", kills->child_wrong},
               {"final_hits", kills->final_hits},
               {"final_wrong_bytes", kills->final_wrong},
               {"leases_left", kills->leases_left},
               {"reservations_left", kills->reserved_left},
               {"client_releases", kills->client_releases},
               {"daemon_anon_rss_before", kills->rss_before},
               {"daemon_anon_rss_after", kills->rss_after},
               {"targets_met", targets_met}});
  } else {
    std::cout << "(a) prefix " << a.tokens << " tokens of " << layout->name << " = "
              << prefix->blocks << " blocks, " << prefix->bytes << " bytes\n"
              << "    arena load   " << prefix->load_gbps << " GB/s\n"
              << "    memcpy       " << prefix->memcpy_gbps << " GB/s\n"
              << "    ratio        " << load_ratio << " (target >= " << kLoadTargetRatio << ")\n"
              << "(b) " << tiny->name << " blocks, chains of " << kChain << "\n"
              << "    match        " << t->served_match_ns << " ns/block served, "
              << t->local_match_ns << " in-process: " << match_ratio << "x (target <= "
              << kTinyTargetRatio << ")\n"
              << "    load         " << t->served_load_ns << " ns/block served, "
              << t->local_load_ns << " in-process: " << tiny_load_ratio << "x (target <= "
              << kTinyTargetRatio << ")\n"
              << "(c) " << a.clients << " processes storing the same " << shared->blocks
              << " blocks: " << shared->shared_bytes << " arena bytes; one process's store: "
              << shared->one_copy_bytes << ": " << shared_ratio << "x (target <= "
              << kSharedTargetRatio << "; private host tiers: " << a.clients << "x)\n"
              << "(d) " << prefix->first_processes << " new processes' first load: best "
              << prefix->first_load_gbps << " GB/s, median " << prefix->first_load_median_gbps
              << "; best " << first_ratio << "x of (a) (target >= " << kLoadTargetRatio << ")\n"
              << "    connect before it (median) " << prefix->connect_ms << " ms, "
              << prefix->warmed_pages << " published 2 MiB arena pages read\n"
              << "    arena mapped in 2 MiB pages: " << prefix->first_huge_bytes
              << " bytes (shmem_enabled: " << prefix->shmem_enabled
              << (ShmemHugeAllowed(prefix->shmem_enabled)
                      ? ")\n"
                      : "; the arena gets 4 KiB pages: docs/server.md, \"Huge pages\")\n")
              << "    then a prefix never read, into the buffers the first load filled: "
              << prefix->new_slots_load_gbps << " GB/s\n"
              << "(e) " << kills->kills << " clients killed: " << kills->child_loads
              << " blocks loaded by them, " << kills->child_wrong << " wrong; "
              << kills->final_hits << " blocks read back, " << kills->final_wrong
              << " wrong; leases left " << kills->leases_left << ", reservations left "
              << kills->reserved_left << "; daemon anonymous RSS " << kills->rss_before
              << " -> " << kills->rss_after << " bytes\n"
              << (targets_met ? "targets met\n" : "targets NOT met\n");
  }
  return kExitOk;
}

std::function<int()> SetupBenchServe(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<ServeBenchArgs>();
  app->add_option("--layout", a->layout, "Layout of the prefix (default qwen2.5-0.5b)");
  app->add_option("--tokens", a->tokens, "Tokens in the prefix (default 32768)");
  app->add_option("--tiny-layout", a->tiny_layout, "Layout of the tiny blocks (default tiny)");
  app->add_option("--clients", a->clients, "Processes storing the same blocks (default 8)");
  app->add_option("--kills", a->kills, "Client processes killed with SIGKILL (default 1000)");
  app->add_option("--rounds", a->rounds, "Timed rounds, best kept (default 5)");
  app->add_option("--tiny-samples", a->tiny_samples, "Calls per tiny-block round (default 2000)");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_SUBCOMMAND(bench_serve, "bench", "serve",
                  "The host daemon: arena loads vs memcpy, served vs in-process per block, shared "
                  "stores, restarts, kill -9 of clients",
                  SetupBenchServe);
}  // namespace kvtier::cli
