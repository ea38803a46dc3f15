// `kvtier bench folder` (issue 32 item 4): how a cache folder of many
// blocks behaves at the size it has.
//
//   kvtier bench folder --dir D [--layout P] [--blocks N] [--chain C]
//                       [--drop-caches] [--json]
//
// Fills D up to N blocks of layout P (default tiny: 16-token blocks of 4
// KiB), the blocks of one key chain; blocks an earlier run wrote there are
// kept, so one folder grows from run to run (200,000, then 1,000,000 ...).
// Then, each from a closed folder (with --drop-caches, a cold page cache):
//   open_s            DiskTier::Open's return (its reconcile in background);
//   first_hit_s       from the start of that Open to a Load of the middle
//                     block served;
//   reconcile_s       from that Open to the end of the background reconcile;
//   match_cold_us     TieredCache::Match of the chain's first C blocks in a
//                     cache just opened over D (its index empty: the keys
//                     are asked of the disk tier), microseconds per block;
//   match_us          the median of 5 more Matches of those blocks
//                     (answered from the index it learned), per block;
//   peak_rss_bytes    the process's peak resident memory (getrusage), the
//                     fill included.
// The fill's time and what it wrote are reported apart (fill_s, written).
//   --json: {"blocks","written","fill_s","open_s","first_hit_s",
//   "reconcile_s","match_blocks","match_cold_us","match_us",
//   "index_bytes","peak_rss_bytes","layout","drop_caches"}
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.h"
#include "command.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/file_tree.h"
#include "kvtier/layout.h"
#include "kvtier/tiered_cache.h"
#include "progress.h"
#include "repeat_stats.h"
#include "synth/block_generator.h"

namespace kvtier::cli {
namespace {

struct FolderArgs {
  std::string dir;
  std::string layout = "tiny";
  uint64_t blocks = 200'000;
  uint32_t chain = 4096;
  bool drop_caches = false;
};

// Keys asked of the folder at once while it is filled.
constexpr size_t kFillBatch = 4096;
// Matches timed after the first (cold) one.
constexpr int kMatchRepeats = 5;

uint64_t PeakRssBytes() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;  // KiB on Linux
}

struct Figures {
  uint64_t written = 0;
  double fill_s = 0, open_s = 0, first_hit_s = 0, reconcile_s = 0;
  double match_cold_us = 0, match_us = 0;
  uint64_t index_bytes = 0;
};

DiskTierOptions FolderOptions(const FolderArgs& a, const ModelLayout& layout) {
  DiskTierOptions o;
  o.dir = a.dir;
  o.layout_signature = layout.Signature();
  o.max_bytes = 0;  // bounded by free disk only: nothing is evicted
  return o;
}

// Writes the chain's blocks the folder does not hold yet.
Status Fill(const FolderArgs& a, const ModelLayout& layout, const KeyChain& chain,
            const std::vector<BlockKey>& keys, bool json, Figures* fig) {
  DiskTierOptions o = FolderOptions(a, layout);
  o.reconcile_on_open = false;  // a reconcile would compete with the writes
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier, DiskTier::Open(o, Env::Default()));
  ProgressBar bar("blocks", json);
  const Clock::time_point t0 = Clock::now();
  for (size_t begin = 0; begin < keys.size(); begin += kFillBatch) {
    const std::span<const BlockKey> batch =
        std::span<const BlockKey>(keys).subspan(begin, std::min(kFillBatch, keys.size() - begin));
    const std::vector<bool> held = tier->ContainsMany(batch);
    for (size_t j = 0; j < batch.size(); ++j) {
      if (held[j]) continue;
      const size_t i = begin + j;
      const BlockKey& parent = i == 0 ? chain.ns() : keys[i - 1];
      KVTIER_ASSIGN_OR_RETURN(BlockBuffer b,
                              MakeBlockFile(layout, keys[i], parent, chain.ns(), 1'700'000'000));
      KVTIER_RETURN_IF_ERROR(tier->Store(keys[i], std::make_shared<const BlockBuffer>(std::move(b))));
      ++fig->written;
    }
    // Written before the next batch is made: the fill's memory stays one
    // batch of blocks, whatever --blocks says.
    KVTIER_RETURN_IF_ERROR(tier->Flush());
    bar.Update(begin + batch.size(), keys.size());
  }
  const DiskTierStats st = tier->Stats();
  if (st.saves_persisted != fig->written) {
    return Status::Internal("the tier persisted " + std::to_string(st.saves_persisted) + " of " +
                            std::to_string(fig->written) + " new blocks");
  }
  KVTIER_RETURN_IF_ERROR(tier->Close());
  KVTIER_RETURN_IF_ERROR(Env::Default()->SyncFileSystem(a.dir));
  fig->fill_s = Seconds(t0, Clock::now());
  return Status::Ok();
}

// Open, first hit and the reconcile of a closed folder.
Status TimeOpen(const FolderArgs& a, const ModelLayout& layout, const std::vector<BlockKey>& keys,
                Figures* fig) {
  if (a.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
  const BlockKey& probe = keys[keys.size() / 2];
  const Clock::time_point t0 = Clock::now();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskTier> tier,
                          DiskTier::Open(FolderOptions(a, layout), Env::Default()));
  fig->open_s = Seconds(t0, Clock::now());
  const std::optional<uint64_t> size_of = tier->SizeOf(probe);
  if (!size_of.has_value()) return Status::Internal("the middle block is not in the index");
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, BlockBuffer::Allocate(*size_of));
  KVTIER_ASSIGN_OR_RETURN(std::optional<size_t> got, tier->Load(probe, buf.mutable_span()));
  fig->first_hit_s = Seconds(t0, Clock::now());
  if (!got.has_value()) return Status::Internal("the first load after open missed");
  tier->WaitForBackgroundReconcile();
  fig->reconcile_s = Seconds(t0, Clock::now());
  return tier->Close();
}

// Match of the chain's first blocks in a cache just opened over the folder.
Status TimeMatch(const FolderArgs& a, const ModelLayout& layout,
                 std::span<const BlockKey> chain, Figures* fig) {
  if (a.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
  CacheOptions co;
  co.layout_signature = layout.Signature();
  DiskTierOptions d = FolderOptions(a, layout);
  d.reconcile_on_open = false;  // timed: Match alone
  co.disk = std::move(d);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredCache> cache,
                          TieredCache::Open(std::move(co), Env::Default()));
  auto per_block_us = [&]() -> Result<double> {
    const Clock::time_point t0 = Clock::now();
    const MatchResult m = cache->Match(chain);
    const double us = Seconds(t0, Clock::now()) * 1e6 / static_cast<double>(chain.size());
    if (m.blocks != chain.size()) {
      return Status::Internal("Match found " + std::to_string(m.blocks) + " of " +
                              std::to_string(chain.size()) + " blocks");
    }
    return us;
  };
  KVTIER_ASSIGN_OR_RETURN(fig->match_cold_us, per_block_us());
  std::vector<double> warm;
  for (int r = 0; r < kMatchRepeats; ++r) {
    KVTIER_ASSIGN_OR_RETURN(double us, per_block_us());
    warm.push_back(us);
  }
  fig->match_us = Median(warm);
  return cache->Close();
}

int Run(const FolderArgs& a, const CommonFlags& flags) {
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, 0);
  if (!layout.ok()) return ReportError(flags, layout.status());
  // The chain's keys and tokens are held whole (36 bytes and block_tokens
  // tokens per block), and each block file once while it is written.
  const uint64_t per_block = SatAdd(sizeof(BlockKey) + 64, SatMul(layout->block_tokens, 4));
  if (Status s = CheckMemory("--blocks " + std::to_string(a.blocks), SatMul(a.blocks, per_block));
      !s.ok()) {
    return ReportError(flags, s);
  }
  NamespaceOptions ns;
  ns.model_id = "kvtier-bench-folder";
  ns.layout_signature = layout->Signature();
  ns.block_tokens = layout->block_tokens;
  Result<KeyChain> chain = KeyChain::Create(ns);
  if (!chain.ok()) return ReportError(flags, chain.status());
  std::vector<uint32_t> tokens(a.blocks * layout->block_tokens);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint32_t>(i * 2654435761u);
  const std::vector<BlockKey> keys = chain->KeysFor(tokens);
  tokens = {};
  const size_t match_blocks = std::min<size_t>(a.chain, keys.size());

  Figures fig;
  Step(flags.json, "bench folder", "filling " + a.dir + " to " + std::to_string(a.blocks) + " blocks");
  Status s = Fill(a, *layout, *chain, keys, flags.json, &fig);
  if (s.ok()) {
    Step(flags.json, "bench folder", "open, first hit, reconcile");
    s = TimeOpen(a, *layout, keys, &fig);
  }
  if (s.ok()) {
    Step(flags.json, "bench folder", "match");
    s = TimeMatch(a, *layout, std::span<const BlockKey>(keys).first(match_blocks), &fig);
  }
  if (!s.ok()) return ReportError(flags, s, kExitFailure);
  Result<FileInfo> index = Env::Default()->Stat(JoinPath(a.dir, "index.sqlite"));
  fig.index_bytes = index.ok() ? index->size : 0;
  const uint64_t rss = PeakRssBytes();
  if (flags.json) {
    PrintJson({{"blocks", keys.size()},
               {"written", fig.written},
               {"fill_s", fig.fill_s},
               {"open_s", fig.open_s},
               {"first_hit_s", fig.first_hit_s},
               {"reconcile_s", fig.reconcile_s},
               {"match_blocks", match_blocks},
               {"match_cold_us", fig.match_cold_us},
               {"match_us", fig.match_us},
               {"index_bytes", fig.index_bytes},
               {"peak_rss_bytes", rss},
               {"layout", layout->name},
               {"drop_caches", a.drop_caches}});
  } else {
    std::printf("%zu blocks of %s in %s (%llu written now in %.1f s)\n", keys.size(),
                layout->name.c_str(), a.dir.c_str(), static_cast<unsigned long long>(fig.written),
                fig.fill_s);
    std::printf("open %.3f s   first hit %.3f s   reconcile done %.1f s\n", fig.open_s,
                fig.first_hit_s, fig.reconcile_s);
    std::printf("match of %zu blocks: %.3f us/block just opened, %.3f us/block after\n",
                match_blocks, fig.match_cold_us, fig.match_us);
    std::printf("index %llu bytes   peak RSS %llu bytes\n",
                static_cast<unsigned long long>(fig.index_bytes),
                static_cast<unsigned long long>(rss));
  }
  return kExitOk;
}

std::function<int()> SetupBenchFolder(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<FolderArgs>();
  app->add_option("--dir", a->dir, "Cache folder to fill and measure (kept; grows run to run)")
      ->required();
  app->add_option("--layout", a->layout, "Layout preset or FILE.json")->capture_default_str();
  app->add_option("--blocks", a->blocks, "Blocks the folder holds after the fill")
      ->check(CLI::Range(uint64_t{1}, uint64_t{100'000'000}))
      ->capture_default_str();
  app->add_option("--chain", a->chain, "Blocks each timed Match asks for")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_flag("--drop-caches", a->drop_caches,
                "Drop the OS page cache before the open and the match (root)");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_SUBCOMMAND(bench_folder, "bench", "folder",
                  "A cache folder of many blocks: open, first hit, reconcile, match per block",
                  SetupBenchFolder);
}  // namespace kvtier::cli
