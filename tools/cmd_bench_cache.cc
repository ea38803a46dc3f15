// `kvtier bench cache --layout P --blocks M`: the TieredCache speed figures
// of issue 4 (DESIGN.md §6), each against a limit measured in the same run.
//
//   host_hit_GBps        TieredCache::Load of host-resident blocks copied
//                        into caller buffers (batches of up to 64 keys);
//   memcpy_GBps          memcpy of the same blocks into the same buffers;
//   match_ns_per_block_* Match over chains of up to 64 keys with M keys in
//                        the index, one timed call per sample;
//   index_bytes_per_block  RSS growth while M keys enter the index / M.
//
// The host part uses min(M, ~256 MiB of blocks, at least 4) blocks so the
// working set exceeds the CPU caches without needing M blocks of RAM; the
// Match index is filled with the keys of M blocks as disk hints
// (TieredCache::HintDiskKeys, over an empty disk folder), so that a million
// blocks need no million block files.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "bench_util.h"
#include "command.h"
#include "config_flag.h"
#include "kvtier/file_tree.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"
#include "progress.h"
#include "synth/block_generator.h"
#include "stderr_logger.h"

namespace kvtier::cli {
namespace {

constexpr uint64_t kMaxBlocks = 100'000'000;
constexpr uint64_t kHostWorkingSetBytes = uint64_t{256} << 20;
constexpr size_t kMaxChain = 64;
constexpr size_t kMaxBatch = 64;
constexpr double kHostTargetRatio = 0.7;
constexpr double kMatchTargetNs = 1000;
constexpr double kIndexTargetBytes = 200;

struct BenchArgs {
  std::string layout;
  std::string blocks;
  uint32_t block_tokens = 0;
  uint32_t samples = 20000;
  uint64_t round_bytes = uint64_t{1} << 30;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* blocks_opt = nullptr;
  ConfigFlag config;
};

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

size_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  size_t size_pages = 0, resident_pages = 0;
  statm >> size_pages >> resident_pages;
  return resident_pages * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

Result<uint64_t> ParseBlocks(const std::string& text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v == 0 ||
      v > kMaxBlocks) {
    return Status::InvalidArgument("--blocks: expected an integer 1..100000000, got '" +
                                   text.substr(0, 40) + "'");
  }
  return v;
}

// `count` chained keys: chain c holds keys [c*chain, (c+1)*chain).
std::vector<BlockKey> MakeKeys(const KeyChain& kc, uint64_t count, size_t chain) {
  std::vector<BlockKey> keys;
  keys.reserve(count);
  std::vector<uint32_t> tokens(kc.block_tokens());
  BlockKey parent = kc.ns();
  for (uint64_t i = 0; i < count; ++i) {
    if (i % chain == 0) parent = kc.ns();
    for (size_t t = 0; t < tokens.size(); ++t) {
      tokens[t] = static_cast<uint32_t>(i * 31 + t);
    }
    parent = kc.Next(parent, tokens);
    keys.push_back(parent);
  }
  return keys;
}

struct HostFigures {
  double host_hit_gbps = 0;
  double memcpy_gbps = 0;
  uint64_t blocks = 0;
};

Result<HostFigures> BenchHostHits(const ModelLayout& layout, const KeyChain& kc,
                                  uint64_t blocks_arg, uint64_t min_round_bytes,
                                  const ConfigFlag& config) {
  // Block file size: header + data; build one to know it.
  const std::vector<BlockKey> probe = MakeKeys(kc, 1, 1);
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer first, MakeBlockFile(layout, probe[0], kc.ns(), kc.ns()));
  const uint64_t block_bytes = first.size();
  const uint64_t n = std::min<uint64_t>(
      blocks_arg, std::max<uint64_t>(4, kHostWorkingSetBytes / std::max<uint64_t>(block_bytes, 1)));
  const size_t batch = static_cast<size_t>(std::min<uint64_t>(kMaxBatch, n));
  const std::vector<BlockKey> keys = MakeKeys(kc, n, kMaxChain);

  CacheOptions o;
  o.layout_signature = layout.Signature();
  o.host.capacity_bytes = n * block_bytes;
  o.load_threads = 0;
  o.info_log = StderrLog();
  o.verify_stores = false;  // the bench's own blocks; skip the header parse
  KVTIER_RETURN_IF_ERROR(config.ApplyTo({.cache = &o}));
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(o, Env::Default()));
  std::vector<SharedBlock> blocks;
  blocks.reserve(n);
  for (uint64_t i = 0; i < n; ++i) {
    const BlockKey& parent = i % kMaxChain == 0 ? kc.ns() : keys[i - 1];
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, MakeBlockFile(layout, keys[i], parent, kc.ns()));
    blocks.push_back(std::make_shared<const BlockBuffer>(std::move(b)));
  }
  KVTIER_RETURN_IF_ERROR(cache->Store(keys, blocks));

  std::vector<std::vector<std::byte>> storage(batch, std::vector<std::byte>(block_bytes));
  std::vector<std::span<std::byte>> dsts;
  for (auto& s : storage) dsts.push_back(s);
  // Enough bytes per round for a stable figure: at least 2 passes over the
  // working set and --round-bytes (1 GiB).
  const uint64_t rounds_bytes = std::max<uint64_t>(2 * n * block_bytes, min_round_bytes);
  const uint64_t batches = std::max<uint64_t>(1, rounds_bytes / (batch * block_bytes));

  auto run_hits = [&]() -> Result<double> {
    uint64_t next = 0;
    const auto t0 = Clock::now();
    for (uint64_t b = 0; b < batches; ++b) {
      const size_t start = static_cast<size_t>(next);
      const size_t count = std::min<size_t>(batch, static_cast<size_t>(n) - start);
      KVTIER_ASSIGN_OR_RETURN(
          LoadFuture f, cache->Load(std::span(keys).subspan(start, count),
                                    std::span<const std::span<std::byte>>(dsts).first(count)));
      KVTIER_ASSIGN_OR_RETURN(std::vector<LoadedBlock> got, f.Get());
      for (const LoadedBlock& g : got) {
        if (g.tier != CacheTier::kHost) {
          return Status::Internal("bench cache: a host-resident block missed the host tier");
        }
      }
      next = start + count == n ? 0 : start + count;
    }
    return Seconds(Clock::now() - t0);
  };
  auto run_memcpy = [&]() {
    uint64_t next = 0;
    const auto t0 = Clock::now();
    for (uint64_t b = 0; b < batches; ++b) {
      const size_t start = static_cast<size_t>(next);
      const size_t count = std::min<size_t>(batch, static_cast<size_t>(n) - start);
      for (size_t j = 0; j < count; ++j) {
        std::memcpy(dsts[j].data(), blocks[start + j]->data(), block_bytes);
      }
      asm volatile("" : : "r"(dsts[0].data()) : "memory");
      next = start + count == n ? 0 : start + count;
    }
    return Seconds(Clock::now() - t0);
  };
  // Interleaved rounds, best of each, so both sides see the same machine.
  double best_hits = 1e300, best_memcpy = 1e300;
  for (int round = 0; round < 3; ++round) {
    KVTIER_ASSIGN_OR_RETURN(double h, run_hits());
    best_hits = std::min(best_hits, h);
    best_memcpy = std::min(best_memcpy, run_memcpy());
  }
  // Bytes moved per round: each batch copies `count` blocks.
  uint64_t bytes = 0;
  {
    uint64_t next = 0;
    for (uint64_t b = 0; b < batches; ++b) {
      const uint64_t count = std::min<uint64_t>(batch, n - next);
      bytes += count * block_bytes;
      next = next + count == n ? 0 : next + count;
    }
  }
  HostFigures f;
  f.host_hit_gbps = static_cast<double>(bytes) / best_hits / 1e9;
  f.memcpy_gbps = static_cast<double>(bytes) / best_memcpy / 1e9;
  f.blocks = n;
  return f;
}

struct MatchFigures {
  double p50 = 0, p99 = 0, bytes_per_block = 0;
  size_t chain = 0;
};

Result<MatchFigures> BenchMatch(const ModelLayout& layout, const KeyChain& kc, uint64_t m,
                                uint32_t samples, const ConfigFlag& config) {
  const size_t chain = static_cast<size_t>(std::min<uint64_t>(kMaxChain, m));
  const uint64_t chains = m / chain;
  const std::vector<BlockKey> keys = MakeKeys(kc, chains * chain, chain);

  std::string tmpl =
      (std::filesystem::temp_directory_path() / "kvtier-bench-cache-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) return Status::IOError("mkdtemp " + tmpl, errno);
  struct RemoveAfter {
    std::string dir;
    ~RemoveAfter() { (void)RemoveTree(Env::Default(), dir); }
  } remove_after{tmpl};
  CacheOptions o;
  o.layout_signature = layout.Signature();
  o.host.capacity_bytes = 1 << 20;
  o.load_threads = 0;
  o.info_log = StderrLog();
  DiskTierOptions d;
  d.dir = JoinPath(tmpl, "cache");
  d.reconcile_on_open = false;
  o.disk = std::move(d);
  KVTIER_RETURN_IF_ERROR(config.ApplyTo({.cache = &o, .disk = &*o.disk}));
  KVTIER_ASSIGN_OR_RETURN(auto cache, TieredCache::Open(o, Env::Default()));
  const size_t before = ResidentBytes();
  // Every block on disk, as another process that stored them would leave it.
  cache->HintDiskKeys(keys);
  const size_t after = ResidentBytes();

  std::vector<double> ns;
  ns.reserve(samples);
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (uint32_t s = 0; s < samples; ++s) {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t c = (rng >> 17) % chains;
    std::span<const BlockKey> ch = std::span(keys).subspan(c * chain, chain);
    const auto t0 = Clock::now();
    MatchResult r = cache->Match(ch);
    const auto t1 = Clock::now();
    if (r.blocks != chain) {
      return Status::Internal("bench cache: an indexed chain matched " + std::to_string(r.blocks) +
                              " of " + std::to_string(chain) + " blocks");
    }
    ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                 static_cast<double>(chain));
  }
  std::sort(ns.begin(), ns.end());
  MatchFigures f;
  f.p50 = ns[ns.size() / 2];
  f.p99 = ns[std::min(ns.size() - 1, ns.size() * 99 / 100)];
  f.bytes_per_block =
      static_cast<double>(after > before ? after - before : 0) / static_cast<double>(keys.size());
  f.chain = chain;
  return f;
}

int Run(const BenchArgs& a, const CommonFlags& flags) {
  if (a.layout_opt->count() == 0) {
    return ReportError(flags, Status::InvalidArgument("--layout is required"));
  }
  if (a.blocks_opt->count() == 0) {
    return ReportError(flags, Status::InvalidArgument("--blocks is required"));
  }
  Result<uint64_t> m = ParseBlocks(a.blocks);
  if (!m.ok()) return ReportError(flags, m.status());
  if (a.samples == 0) {
    return ReportError(flags, Status::InvalidArgument("--samples must be > 0"));
  }
  if (Status s = a.config.ApplyTo({}); !s.ok()) return ReportError(flags, s);
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, a.block_tokens);
  if (!layout.ok()) return ReportError(flags, layout.status().WithContext("--layout"));
  NamespaceOptions ns;
  ns.model_id = "kvtier-bench-cache";
  ns.layout_signature = layout->Signature();
  ns.block_tokens = layout->block_tokens;
  Result<KeyChain> kc = KeyChain::Create(ns);
  if (!kc.ok()) return ReportError(flags, kc.status());

  {
    // Up front, before anything is allocated: the Match index (its keys and
    // up to twice the target bytes per block) and the host part's blocks
    // with one batch of destination buffers.
    const uint64_t block_bytes = SatAdd(layout->BlockBytes(), uint64_t{64} << 10);
    const uint64_t host_blocks = std::min<uint64_t>(
        *m, std::max<uint64_t>(4, kHostWorkingSetBytes / std::max<uint64_t>(block_bytes, 1)));
    const uint64_t needed =
        SatAdd(SatMul(*m, sizeof(BlockKey) + 2 * static_cast<uint64_t>(kIndexTargetBytes)),
               SatMul(host_blocks + std::min<uint64_t>(kMaxBatch, host_blocks), block_bytes));
    if (Status s = CheckMemory("--blocks " + std::to_string(*m) + " of " + layout->name, needed);
        !s.ok()) {
      return ReportError(flags, s);
    }
  }
  // Match first: its RSS reading must not see the host part's blocks being
  // freed.
  Step(flags.json, "bench cache", "Match over " + std::to_string(*m) + " indexed blocks");
  Result<MatchFigures> match = BenchMatch(*layout, *kc, *m, a.samples, a.config);
  if (!match.ok()) return ReportError(flags, match.status(), kExitFailure);
  Step(flags.json, "bench cache", "host hits against memcpy");
  Result<HostFigures> host = BenchHostHits(*layout, *kc, *m, a.round_bytes, a.config);
  if (!host.ok()) return ReportError(flags, host.status(), kExitFailure);

  const double ratio = host->memcpy_gbps > 0 ? host->host_hit_gbps / host->memcpy_gbps : 0;
  const bool targets_met = ratio >= kHostTargetRatio && match->p50 <= kMatchTargetNs &&
                           match->bytes_per_block <= kIndexTargetBytes;
  if (flags.json) {
    PrintJson({{"host_hit_GBps", host->host_hit_gbps},
               {"memcpy_GBps", host->memcpy_gbps},
               {"match_ns_per_block_p50", match->p50},
               {"match_ns_per_block_p99", match->p99},
               {"index_bytes_per_block", match->bytes_per_block},
               {"host_hit_vs_memcpy", ratio},
               {"blocks", *m},
               {"host_blocks", host->blocks},
               {"chain_blocks", match->chain},
               {"targets_met", targets_met}});
  } else {
    std::cout << "layout " << layout->name << ", " << *m << " indexed blocks, " << host->blocks
              << " host blocks, chains of " << match->chain << "\n"
              << "host hit     " << host->host_hit_gbps << " GB/s\n"
              << "memcpy       " << host->memcpy_gbps << " GB/s\n"
              << "ratio        " << ratio << " (target >= " << kHostTargetRatio << ")\n"
              << "match p50    " << match->p50 << " ns/block (target <= " << kMatchTargetNs << ")\n"
              << "match p99    " << match->p99 << " ns/block\n"
              << "index        " << match->bytes_per_block
              << " bytes/block (target <= " << kIndexTargetBytes << ")\n"
              << (targets_met ? "targets met\n" : "targets NOT met\n");
  }
  return kExitOk;
}

std::function<int()> SetupBenchCache(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<BenchArgs>();
  a->layout_opt = app->add_option("--layout", a->layout, "Layout preset or .json file");
  a->config.Add(app);
  a->blocks_opt = app->add_option("--blocks", a->blocks, "Blocks in the Match index (M)");
  app->add_option("--block-tokens", a->block_tokens, "Override the layout's block_tokens")
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  app->add_option("--samples", a->samples, "Timed Match calls (default 20000)");
  app->add_option("--round-bytes", a->round_bytes,
                  "Least bytes copied per timed host-hit round, 1..64 GiB (default 1 GiB)")
      ->type_name("SIZE")
      ->check(CLI::Range(uint64_t{1}, uint64_t{64} << 30));
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_SUBCOMMAND(bench_cache, "bench", "cache",
                  "Host-hit copy vs memcpy, Match ns/block, index bytes/block", SetupBenchCache);
}  // namespace kvtier::cli
