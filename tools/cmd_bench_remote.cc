// `kvtier bench remote`: the remote tier against the limit of the same Redis
// server (DESIGN.md §6).
//
//   kvtier bench remote --remote URL (--layout P | --block-bytes N) --blocks M
//                       [--batch B] [--rounds R] [--tls URL] [--signed] [--json]
//
// In one run, with the same M block files (generated in RAM first):
//   raw set   one socket, a minimal loop: SET <name> <value> (header, value
//             and trailer in one writev), wait for +OK, next;
//   raw get   the same socket: GET <name>, read "$<n>", read the n bytes
//             into one reused buffer, next (tools/bench_remote_raw.h);
//   set       Put() of every block into the tier's write queue (sized to
//             hold them all), then Flush(): the writer threads' pipelined
//             EXISTS + SET (parts in MULTI/EXEC), values sent with writev;
//   get       LoadBuffers() in batches of B keys (default 16), as the cache
//             reads remote hits: each value read from the socket straight
//             into an exact-size buffer from RecycledReadBuffers (the
//             cache's recycled buffers, so not page-faulted again) and
//             verified (structure, key, signature, checksum), then dropped;
//   exists    Exists() of all M keys at once (one round trip), per key.
// --signed adds, in the same rounds, set and get through a second tier with
// a MAC key (remote_mac_keys: a fresh random key in a temp file): every
// value signed on set and its `:mac` checked on get, against the unsigned
// tier's figures (signed_set_ratio, signed_get_ratio), and against the
// bound the hardware sets: HMAC-SHA256 over a block on one core (hmac_GBps,
// measured first), and the core-seconds per GB the unsigned set and get
// cost (this process's getrusage, plus the server's INFO cpu when it runs
// on this machine: 127.0.0.1, localhost, ::1). A signed phase needs that
// CPU plus one hash pass per byte, on `cores` cores, and cannot beat its
// unsigned self: bound = min(unsigned, cores / (cpu_s_per_GB + 1/hmac)),
// `cores` being those this process may run on (taskset counts).
// The phases run --rounds times (default 2), alternating which side goes
// first; each side's best round is reported. Keys are fresh per round and
// deleted afterwards. Needs one server (redis://): the raw loop has one
// socket.
//   --tls URL  also the tier's set and get over TLS (a rediss:// URL of one
//             server, best the TLS port of the same server, `--tls-port`;
//             its CA from --config's remote_tls_ca_file), in the same
//             rounds, printed against the plaintext tier's (what TLS costs)
//             and against the raw loop over OpenSSL on that TLS port (what
//             the server and OpenSSL allow).
//   --json: {"set_GBps","get_GBps","raw_set_GBps","raw_get_GBps",
//   "exists_us_per_key","blocks","block_bytes","parts","set_ratio","get_ratio"}
//   and with --signed "signed_set_GBps","signed_get_GBps","signed_set_ratio",
//   "signed_get_ratio","hmac_GBps","cores","set_cpu_s_per_GB",
//   "get_cpu_s_per_GB","signed_set_bound_GBps","signed_get_bound_GBps",
//   "signed_set_bound_ratio","signed_get_bound_ratio","signed_set_cores_busy",
//   "signed_get_cores_busy" (the signed phase's least core-seconds over its
//   least seconds, client and local server: 2.0 on 2 cores is the machine
//   full); with --tls:
//   "tls_set_GBps","tls_get_GBps","tls_set_ratio","tls_get_ratio" (TLS over
//   plaintext), "raw_tls_set_GBps","raw_tls_get_GBps","tls_set_raw_ratio",
//   "tls_get_raw_ratio" (the tier over the raw TLS loop),
//   "raw_server_set_cpu_s_per_GB","raw_server_get_cpu_s_per_GB",
//   "raw_tls_server_set_cpu_s_per_GB","raw_tls_server_get_cpu_s_per_GB" (the
//   server's INFO cpu over the raw loops) and "server_tls_set_ratio",
//   "server_tls_get_ratio" (plaintext over TLS of those: the TLS / plaintext
//   ratio of a server that has a core of its own and is the bottleneck).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <optional>
#include <random>
#include <thread>

#include "bench_remote_raw.h"
#include "bench_util.h"
#include "command.h"
#include "config_flag.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "kvtier/read_buffers.h"
#include "kvtier/redis_url.h"
#include "kvtier/remote_tier.h"
#include "progress.h"
#include "synth/block_generator.h"
#include "stderr_logger.h"

namespace kvtier::cli {
namespace {

struct BenchRemoteArgs {
  std::string remote;
  std::string tls;
  std::string layout;
  uint64_t block_bytes = 0;
  uint64_t blocks = 0;
  uint32_t batch = 16;
  uint32_t rounds = 2;
  bool signed_values = false;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* block_bytes_opt = nullptr;
  ConfigFlag config;
};

// A MAC key of 32 random bytes in a temp file (remote_mac_keys reads
// files), removed with the object.
class TempKeyFile {
 public:
  TempKeyFile() {
    char path[] = "/tmp/kvtier-bench-key-XXXXXX";
    const int fd = ::mkstemp(path);
    if (fd < 0) return;
    std::random_device rd;
    unsigned char key[32];
    for (unsigned char& b : key) b = static_cast<unsigned char>(rd());
    const bool ok = ::write(fd, key, sizeof(key)) == static_cast<ssize_t>(sizeof(key));
    ::close(fd);
    path_ = path;
    if (!ok) path_.clear();
  }
  ~TempKeyFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The cores this process may run on (its affinity mask: `taskset` counts),
// which a local server shares.
double UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
    return CPU_COUNT(&set);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

int Run(const BenchRemoteArgs& a, const CommonFlags& flags) {
  auto fail = [&](const Status& s) { return ReportError(flags, s, kExitFailure); };
  Result<ModelLayout> layout =
      BenchLayout(a.layout_opt, a.layout, a.block_bytes_opt, a.block_bytes, uint64_t{511} << 20,
                  "--block-bytes: must be 1..535822336 (Redis strings are at "
                  "most 512 MiB, and the raw loop stores a block whole)");
  if (!layout.ok()) return ReportError(flags, layout.status());
  if (a.blocks == 0 || a.blocks > 1'000'000) {
    return ReportError(flags, Status::InvalidArgument("--blocks: must be 1..1000000"));
  }
  // Every block lives in RAM for the whole run, and one batch of read
  // buffers beside them.
  if (Status s = CheckMemory("--blocks " + std::to_string(a.blocks) + " of " +
                                 std::to_string(layout->BlockBytes()) + " bytes",
                             SatMul(SatAdd(a.blocks, std::min<uint64_t>(a.batch, a.blocks)),
                                    SatAdd(layout->BlockBytes(), uint64_t{64} << 10)));
      !s.ok()) {
    return ReportError(flags, s);
  }
  // A bad --config is bad input, found before any connect.
  if (Status s = a.config.ApplyTo({}); !s.ok()) return ReportError(flags, s);
  Result<remote::RedisUrl> url = remote::ParseRedisUrl(a.remote);
  if (!url.ok()) return ReportError(flags, url.status().WithContext("--remote"));
  if (url->mode != remote::RedisMode::kSingle || url->tls) {
    return ReportError(flags, Status::InvalidArgument(
                                  "--remote: bench remote needs one plaintext server (redis://): "
                                  "the raw loop it compares against uses one socket (--tls "
                                  "rediss://... adds the tier over TLS)"));
  }
  std::optional<remote::RedisUrl> tls_url;
  if (!a.tls.empty()) {
    Result<remote::RedisUrl> parsed = remote::ParseRedisUrl(a.tls);
    if (!parsed.ok()) return ReportError(flags, parsed.status().WithContext("--tls"));
    if (!parsed->tls || parsed->mode != remote::RedisMode::kSingle) {
      return ReportError(flags, Status::InvalidArgument(
                                    "--tls: expected one TLS server (rediss://host:tls-port): "
                                    "its raw loop uses one socket"));
    }
    tls_url = std::move(parsed).value();
  }

  // The blocks, generated once.
  std::vector<BlockKey> keys;
  std::vector<SharedBlock> blocks;
  uint64_t total = 0, max_size = 0;
  for (uint64_t i = 0; i < a.blocks; ++i) {
    keys.push_back(TestBlockKey(i));
    Result<BlockBuffer> b = MakeBlockFile(*layout, keys.back(), keys.back(), keys.back(), 1);
    if (!b.ok()) return fail(b.status());
    total += b->size();
    max_size = std::max<uint64_t>(max_size, b->size());
    blocks.push_back(std::make_shared<const BlockBuffer>(std::move(b).value()));
  }
  const std::string run_id =
      std::to_string(::getpid()) + "." + std::to_string(Clock::now().time_since_epoch().count());

  RawSocket raw;
  // A server that cannot be reached (or refuses the password) at the start
  // is bad input, exit 2, as for replay, synth and demo; what fails once
  // the bench runs is exit 1.
  auto unreachable = [&](const Status& s) {
    return ReportError(flags, s.WithContext("--remote"), kExitUsage);
  };
  if (Status s = raw.Connect(*url); !s.ok()) return unreachable(s);
  std::vector<std::byte> raw_buf(max_size + 2);
  // The server's CPU counts against this machine's cores only when it runs
  // on it.
  const std::string& host = url->nodes[0].host;
  const bool local_server = host == "127.0.0.1" || host == "localhost" || host == "::1";

  RemoteTierOptions o;
  o.url = a.remote;
  o.layout = *layout;
  o.require_server_at_open = true;
  // --config's remote_* options (TLS, timeouts, ...); the bench names its
  // own key prefix per round.
  if (Status s = a.config.ApplyTo({.remote = &o}); !s.ok()) return ReportError(flags, s);
  o.info_log = StderrLog();
  o.queue_max_bytes = std::max<uint64_t>(o.queue_max_bytes, total);
  // Exists() of every key at once measures the round trip, not the request
  // path's budget: give it a whole call's time.
  o.lookup_budget_ms = std::max(o.lookup_budget_ms, o.command_timeout_ms);
  RawSocket raw_tls;
  if (tls_url) {
    const RawTlsFiles files{o.tls_ca_file, o.tls_cert_file, o.tls_key_file, o.tls_server_name};
    if (Status s = raw_tls.Connect(*tls_url, &files); !s.ok()) {
      return ReportError(flags, s.WithContext("--tls"), kExitUsage);
    }
  }
  // What one core hashes: the signed values' limit.
  const double hmac_gbps = a.signed_values ? HmacGBps(blocks[0]->span()) : 0;
  TempKeyFile key_file;
  if (a.signed_values && key_file.path().empty()) {
    return fail(Status::IOError("--signed: cannot write a key file in /tmp", errno));
  }
  uint32_t round_no = 0;
  auto tier_prefix = [&] {
    return "kvtier-bench:" + run_id + ":" + std::to_string(round_no) + ":";
  };
  auto raw_name = [&](size_t i) {
    return "kvtier-bench-raw:" + run_id + ":" + std::to_string(round_no) + ":" + std::to_string(i);
  };
  auto raw_tls_name = [&](size_t i) { return raw_name(i) + ":tls"; };

  // Where hits land, as in the cache: recycled, already faulted-in buffers.
  const ReadBufferAllocator buffers = RecycledReadBuffers(uint64_t{a.batch} * max_size * 2);
  std::unique_ptr<RemoteTier> tier, signed_tier, tls_tier;
  auto open_tier = [&]() -> Status {
    o.key_prefix = tier_prefix();
    KVTIER_ASSIGN_OR_RETURN(tier, RemoteTier::Open(o, Env::Default()));
    if (a.signed_values) {
      RemoteTierOptions so = o;
      so.key_prefix = tier_prefix() + "signed:";
      so.mac_keys = {key_file.path()};
      KVTIER_ASSIGN_OR_RETURN(signed_tier, RemoteTier::Open(so, Env::Default()));
    }
    if (!a.tls.empty()) {
      RemoteTierOptions t = o;
      t.url = a.tls;
      t.key_prefix = o.key_prefix + "tls:";
      Result<std::unique_ptr<RemoteTier>> opened = RemoteTier::Open(t, Env::Default());
      if (!opened.ok()) return opened.status().WithContext("--tls");
      tls_tier = std::move(opened).value();
    }
    return Status::Ok();
  };
  auto raw_set = [&](RawSocket* sock, const auto& name) -> Result<double> {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) {
      KVTIER_RETURN_IF_ERROR(sock->Set(name(i), blocks[i]->span()));
    }
    return Seconds(t0, Clock::now());
  };
  auto raw_get = [&](RawSocket* sock, const auto& name) -> Result<double> {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) {
      KVTIER_ASSIGN_OR_RETURN(size_t n, sock->Get(name(i), raw_buf));
      if (n != blocks[i]->size()) return Status::Internal("raw GET: wrong size");
    }
    return Seconds(t0, Clock::now());
  };
  // Core-seconds (this process, and the server when it shares our cores)
  // that `phase` costs.
  auto with_cpu = [&](double* cpu, const auto& phase) -> Result<double> {
    auto server_cpu = [&]() -> Result<double> {
      return local_server ? raw.ServerCpuSeconds() : Result<double>(0.0);
    };
    const double c0 = ProcessCpuSeconds();
    KVTIER_ASSIGN_OR_RETURN(const double s0, server_cpu());
    KVTIER_ASSIGN_OR_RETURN(const double secs, phase());
    KVTIER_ASSIGN_OR_RETURN(const double s1, server_cpu());
    *cpu = std::min(*cpu, ProcessCpuSeconds() - c0 + (s1 - s0));
    return secs;
  };
  // The server's own core-seconds (INFO cpu on `sock`'s server) for `phase`.
  auto server_cpu = [&](RawSocket* sock, double* cpu, const auto& phase) -> Result<double> {
    KVTIER_ASSIGN_OR_RETURN(const double s0, sock->ServerCpuSeconds());
    KVTIER_ASSIGN_OR_RETURN(const double secs, phase());
    KVTIER_ASSIGN_OR_RETURN(const double s1, sock->ServerCpuSeconds());
    *cpu = std::min(*cpu, s1 - s0);
    return secs;
  };
  auto our_set = [&](RemoteTier* target) -> Result<double> {
    const auto t0 = Clock::now();
    for (size_t i = 0; i < keys.size(); ++i) KVTIER_RETURN_IF_ERROR(target->Put(keys[i], blocks[i]));
    KVTIER_RETURN_IF_ERROR(target->Flush());
    const double secs = Seconds(t0, Clock::now());
    const RemoteTierStats s = target->Stats();
    if (s.stored != keys.size()) {
      return Status::Internal("only " + std::to_string(s.stored) + " blocks stored (drops: " +
                              std::to_string(s.drops_unavailable + s.drops_oom + s.drops_error) +
                              ")");
    }
    return secs;
  };
  auto our_get = [&](RemoteTier* target) -> Result<double> {
    const auto t0 = Clock::now();
    uint64_t hits = 0;
    for (size_t begin = 0; begin < keys.size(); begin += a.batch) {
      std::span<const BlockKey> batch(keys.data() + begin,
                                      std::min<size_t>(a.batch, keys.size() - begin));
      target->LoadBuffers(batch, buffers, [&](size_t, Result<std::optional<BlockBuffer>> r) {
        hits += r.ok() && r->has_value();  // the buffer goes back to the pool here
      });
    }
    const double secs = Seconds(t0, Clock::now());
    if (hits != keys.size()) {
      return Status::Internal("only " + std::to_string(hits) + " of " +
                              std::to_string(keys.size()) + " blocks read back");
    }
    return secs;
  };
  auto cleanup = [&]() -> Status {
    for (size_t i = 0; i < keys.size(); ++i) {
      KVTIER_RETURN_IF_ERROR(raw.Del(raw_name(i)));
      if (tls_url) KVTIER_RETURN_IF_ERROR(raw_tls.Del(raw_tls_name(i)));
      KVTIER_RETURN_IF_ERROR(tier->Erase(keys[i]).status());
      if (signed_tier) KVTIER_RETURN_IF_ERROR(signed_tier->Erase(keys[i]).status());
      if (tls_tier) KVTIER_RETURN_IF_ERROR(tls_tier->Erase(keys[i]).status());
    }
    return Status::Ok();
  };

  struct Best {
    double set = 1e30, get = 1e30, raw_set = 1e30, raw_get = 1e30, exists = 1e30;
    double signed_set = 1e30, signed_get = 1e30;
    double tls_set = 1e30, tls_get = 1e30, raw_tls_set = 1e30, raw_tls_get = 1e30;
    // Core-seconds of the unsigned and the signed set and get.
    double set_cpu = 1e30, get_cpu = 1e30, signed_set_cpu = 1e30, signed_get_cpu = 1e30;
    // The server's core-seconds in the raw loops, plaintext and TLS.
    double raw_set_server = 1e30, raw_get_server = 1e30;
    double raw_tls_set_server = 1e30, raw_tls_get_server = 1e30;
  } best;
  auto keep_best = [](double* slot, const Result<double>& r) -> Status {
    if (!r.ok()) return r.status();
    *slot = std::min(*slot, *r);
    return Status::Ok();
  };
  for (round_no = 0; round_no < a.rounds; ++round_no) {
    Step(flags.json, "bench remote",
         "round " + std::to_string(round_no + 1) + "/" + std::to_string(a.rounds) + ": set and get " +
             std::to_string(keys.size()) + " blocks, raw and through the tier");
    tier.reset();
    signed_tier.reset();
    tls_tier.reset();
    Status s = open_tier();
    if (!s.ok()) return round_no == 0 ? unreachable(s) : fail(s.WithContext("--remote"));
    RemoteTier* const t = tier.get();
    RemoteTier* const st = signed_tier.get();
    // One timed loop: its best time kept in `slot`; `on` false skips it
    // (no signed or TLS tier asked for).
    using Step = std::function<Status()>;
    auto step = [&](bool on, double* slot, const char* name, std::function<Result<double>()> fn) {
      return Step([=, &keep_best]() -> Status {
        return on ? keep_best(slot, fn()).WithContext(name) : Status::Ok();
      });
    };
    // Each set (then get) loop in this order in even rounds and the reverse
    // in odd ones, so that no loop always runs first or last.
    std::vector<Step> sets = {
        step(true, &best.raw_set, "raw set", [&] {
          return server_cpu(&raw, &best.raw_set_server, [&] { return raw_set(&raw, raw_name); });
        }),
        step(true, &best.set, "set",
             [&] { return with_cpu(&best.set_cpu, [&] { return our_set(t); }); }),
        step(st != nullptr, &best.signed_set, "signed set",
             [&] { return with_cpu(&best.signed_set_cpu, [&] { return our_set(st); }); }),
        step(tls_tier != nullptr, &best.tls_set, "tls set",
             [&] { return our_set(tls_tier.get()); }),
        step(tls_url.has_value(), &best.raw_tls_set, "raw tls set", [&] {
          return server_cpu(&raw_tls, &best.raw_tls_set_server,
                            [&] { return raw_set(&raw_tls, raw_tls_name); });
        }),
    };
    std::vector<Step> gets = {
        step(true, &best.raw_get, "raw get", [&] {
          return server_cpu(&raw, &best.raw_get_server, [&] { return raw_get(&raw, raw_name); });
        }),
        step(true, &best.get, "get",
             [&] { return with_cpu(&best.get_cpu, [&] { return our_get(t); }); }),
        step(st != nullptr, &best.signed_get, "signed get",
             [&] { return with_cpu(&best.signed_get_cpu, [&] { return our_get(st); }); }),
        step(tls_tier != nullptr, &best.tls_get, "tls get",
             [&] { return our_get(tls_tier.get()); }),
        step(tls_url.has_value(), &best.raw_tls_get, "raw tls get", [&] {
          return server_cpu(&raw_tls, &best.raw_tls_get_server,
                            [&] { return raw_get(&raw_tls, raw_tls_name); });
        }),
    };
    if (round_no % 2 == 1) {
      std::reverse(sets.begin(), sets.end());
      std::reverse(gets.begin(), gets.end());
    }
    for (const Step& f : sets) {
      if (s.ok()) s = f();
    }
    for (const Step& f : gets) {
      if (s.ok()) s = f();
    }
    for (int i = 0; s.ok() && i < 3; ++i) {
      const auto t0 = Clock::now();
      std::vector<bool> found = tier->Exists(keys);
      const double secs = Seconds(t0, Clock::now());
      if (std::count(found.begin(), found.end(), true) != static_cast<long>(keys.size())) {
        s = Status::Internal("exists: not every block found");
      }
      best.exists = std::min(best.exists, secs / static_cast<double>(keys.size()));
    }
    if (s.ok()) s = cleanup().WithContext("cleanup");
    if (!s.ok()) return fail(s);
  }
  const uint32_t parts = static_cast<uint32_t>((max_size + o.part_bytes - 1) / o.part_bytes);
  (void)tier->Close();
  if (signed_tier) (void)signed_tier->Close();
  if (tls_tier) (void)tls_tier->Close();

  const double gb = static_cast<double>(total) / 1e9;
  const double set = gb / best.set, get = gb / best.get;
  const double raw_set_gbps = gb / best.raw_set, raw_get_gbps = gb / best.raw_get;
  const double exists_us = best.exists * 1e6;
  const double signed_set = gb / best.signed_set, signed_get = gb / best.signed_get;
  const double tls_set = gb / best.tls_set, tls_get = gb / best.tls_get;
  const double raw_tls_set = gb / best.raw_tls_set, raw_tls_get = gb / best.raw_tls_get;
  // What TLS costs the server per byte: with a core of its own as the
  // bottleneck on both sides, TLS / plaintext would be this.
  const double server_tls_set_ratio = best.raw_set_server / best.raw_tls_set_server;
  const double server_tls_get_ratio = best.raw_get_server / best.raw_tls_get_server;
  // The signed values' bound: the hash cannot go faster than every core
  // spending what the unsigned phase cost them (client, and a local
  // server) plus one HMAC pass per byte; nor can the phase beat its
  // unsigned self.
  const double cores = UsableCores();
  const double set_cpu_per_gb = best.set_cpu / gb, get_cpu_per_gb = best.get_cpu / gb;
  // How many cores the signed phases kept busy (client and a local
  // server; `cores` = the machine full).
  const double signed_set_busy = best.signed_set_cpu / best.signed_set;
  const double signed_get_busy = best.signed_get_cpu / best.signed_get;
  auto signed_bound = [&](double cpu_per_gb, double unsigned_gbps) {
    return std::min(unsigned_gbps, cores / (cpu_per_gb + 1 / hmac_gbps));
  };
  const double signed_set_bound = signed_bound(set_cpu_per_gb, set);
  const double signed_get_bound = signed_bound(get_cpu_per_gb, get);
  if (flags.json) {
    nlohmann::json j = {{"set_GBps", set},
                        {"get_GBps", get},
                        {"raw_set_GBps", raw_set_gbps},
                        {"raw_get_GBps", raw_get_gbps},
                        {"exists_us_per_key", exists_us},
                        {"blocks", keys.size()},
                        {"block_bytes", blocks[0]->size()},
                        {"parts", parts},
                        {"set_ratio", set / raw_set_gbps},
                        {"get_ratio", get / raw_get_gbps}};
    if (a.signed_values) {
      j["signed_set_GBps"] = signed_set;
      j["signed_get_GBps"] = signed_get;
      j["signed_set_ratio"] = signed_set / set;
      j["signed_get_ratio"] = signed_get / get;
      j["hmac_GBps"] = hmac_gbps;
      j["cores"] = cores;
      j["set_cpu_s_per_GB"] = set_cpu_per_gb;
      j["get_cpu_s_per_GB"] = get_cpu_per_gb;
      j["signed_set_bound_GBps"] = signed_set_bound;
      j["signed_get_bound_GBps"] = signed_get_bound;
      j["signed_set_bound_ratio"] = signed_set / signed_set_bound;
      j["signed_get_bound_ratio"] = signed_get / signed_get_bound;
      j["signed_set_cores_busy"] = signed_set_busy;
      j["signed_get_cores_busy"] = signed_get_busy;
    }
    if (tls_tier) {
      j["tls_set_GBps"] = tls_set;
      j["tls_get_GBps"] = tls_get;
      j["tls_set_ratio"] = tls_set / set;
      j["tls_get_ratio"] = tls_get / get;
      j["raw_tls_set_GBps"] = raw_tls_set;
      j["raw_tls_get_GBps"] = raw_tls_get;
      j["tls_set_raw_ratio"] = tls_set / raw_tls_set;
      j["tls_get_raw_ratio"] = tls_get / raw_tls_get;
      j["raw_server_set_cpu_s_per_GB"] = best.raw_set_server / gb;
      j["raw_server_get_cpu_s_per_GB"] = best.raw_get_server / gb;
      j["raw_tls_server_set_cpu_s_per_GB"] = best.raw_tls_set_server / gb;
      j["raw_tls_server_get_cpu_s_per_GB"] = best.raw_tls_get_server / gb;
      j["server_tls_set_ratio"] = server_tls_set_ratio;
      j["server_tls_get_ratio"] = server_tls_get_ratio;
    }
    PrintJson(j);
  } else {
    std::cout << keys.size() << " blocks of " << blocks[0]->size() << " bytes (" << parts
              << (parts == 1 ? " part" : " parts") << ") on " << url->Redacted() << "\n";
    std::cout << "set  " << set << " GB/s  (raw " << raw_set_gbps << " GB/s, ratio "
              << set / raw_set_gbps << ")\n";
    std::cout << "get  " << get << " GB/s  (raw " << raw_get_gbps << " GB/s, ratio "
              << get / raw_get_gbps << ")\n";
    if (a.signed_values) {
      std::cout << "signed set  " << signed_set << " GB/s  (unsigned " << set << " GB/s, ratio "
                << signed_set / set << ")\n";
      std::cout << "signed get  " << signed_get << " GB/s  (unsigned " << get << " GB/s, ratio "
                << signed_get / get << ")\n";
      std::cout << "hmac-sha256 " << hmac_gbps << " GB/s a core; unsigned set " << set_cpu_per_gb
                << ", get " << get_cpu_per_gb << " core-s/GB ("
                << (local_server ? "client + server" : "client") << "), " << cores
                << " cores\n";
      std::cout << "signed set bound  " << signed_set_bound << " GB/s  (ratio "
                << signed_set / signed_set_bound << "; " << signed_set_busy << " cores busy)\n";
      std::cout << "signed get bound  " << signed_get_bound << " GB/s  (ratio "
                << signed_get / signed_get_bound << "; " << signed_get_busy << " cores busy)\n";
    }
    std::cout << "exists " << exists_us << " us per key\n";
    if (tls_tier) {
      std::cout << "tls set  " << tls_set << " GB/s  (plaintext " << set << " GB/s, ratio "
                << tls_set / set << ")\n";
      std::cout << "tls get  " << tls_get << " GB/s  (plaintext " << get << " GB/s, ratio "
                << tls_get / get << ")\n";
      std::cout << "tls set  " << tls_set << " GB/s  (raw tls " << raw_tls_set << " GB/s, ratio "
                << tls_set / raw_tls_set << ")\n";
      std::cout << "tls get  " << tls_get << " GB/s  (raw tls " << raw_tls_get << " GB/s, ratio "
                << tls_get / raw_tls_get << ")\n";
      std::cout << "server core-s/GB in the raw loops: set " << best.raw_set_server / gb
                << " plaintext, " << best.raw_tls_set_server / gb << " tls (ratio "
                << server_tls_set_ratio << "); get " << best.raw_get_server / gb << " plaintext, "
                << best.raw_tls_get_server / gb << " tls (ratio " << server_tls_get_ratio
                << ")\n";
    }
  }
  std::cout.flush();
  return kExitOk;
}

std::function<int()> SetupBenchRemote(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<BenchRemoteArgs>();
  a->config.Add(app);
  app->add_option("--remote", a->remote, "The server: redis://[[user]:password@]host:port[/db]")
      ->required();
  a->layout_opt = app->add_option("--layout", a->layout, "Layout preset or .json file");
  a->block_bytes_opt =
      app->add_option("--block-bytes", a->block_bytes, "Blocks of N data bytes instead (3M ok)")
          ->type_name("SIZE");
  app->add_option("--blocks", a->blocks, "Number of blocks")->required();
  app->add_option("--tls", a->tls,
                  "Also the tier over TLS: rediss://host:tls-port of the same server (CA: "
                  "--config's remote_tls_ca_file), and a raw loop over OpenSSL on that port");
  app->add_option("--batch", a->batch, "Keys per GetMany() call (default 16)")
      ->check(CLI::Range(1, 100000));
  app->add_option("--rounds", a->rounds,
                  "Rounds, alternating which side goes first; best of each (default 2)")
      ->check(CLI::Range(1, 100));
  app->add_flag("--signed", a->signed_values,
                "Also set/get through a tier with a MAC key (remote_mac_keys), against unsigned "
                "and against the bound HMAC-SHA256 on this machine's cores sets");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_SUBCOMMAND(bench_remote, "bench", "remote",
                  "Remote tier set/get vs a raw RESP loop on the same Redis server",
                  SetupBenchRemote);
}  // namespace kvtier::cli
