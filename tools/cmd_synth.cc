// `kvtier synth`: makes the block files of a token sequence (DESIGN.md §6).
//
//   kvtier synth --layout P [--block-tokens B] [--model M]
//                (--tokens 1,2,3 | --tokens-file F | --random N [--seed S])
//                (--out DIR | --cache DIR [--check] | --remote URL [--check])
//
// Keys come from KeyChain (model id M, default "synth"; the layout's
// signature and block size); each full block's content is the deterministic
// generator's (src/synth/block_generator.h), so any reader can check it.
// --out writes DIR/<key hex>.safetensors for every block.
// --random N makes N token ids: id i = SplitMix64 word i of seed S
// (Mix(S + (i + 1) * 0x9e3779b97f4a7c15)) >> 33, i.e. uniform in [0, 2^31).
// Prints {"blocks","present","missing","wrong"}; for --out, present counts
// the files written. Exit 0 iff every block was written, 2 on bad input, 1
// (after the counts, with the first error on stderr) if any write failed.
//
// --cache DIR stores every block into a disk-tier cache folder (created if
// needed) through a DiskTier (tools/cache_synth.cc); --check then loads every
// key back through the tier and counts present / missing / wrong
// (CheckBlockFile) instead of counting what was written.
//
// --remote URL stores every block into Redis through a RemoteTier
// (tools/remote_synth.cc); --check reads them back through it.
#include <algorithm>
#include <charconv>
#include <iostream>
#include <memory>

#include "cache_synth.h"
#include "command.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "progress.h"
#include "remote_synth.h"
#include "synth/block_generator.h"
#include "token_list.h"

namespace kvtier::cli {
namespace {

constexpr uint64_t kMaxTokenFileBytes = uint64_t{64} << 20;
constexpr uint64_t kMaxRandomTokens = uint64_t{1} << 28;

struct SynthArgs {
  ConfigFlag config;
  std::string layout;
  uint32_t block_tokens = 0;
  std::string model = "synth";
  std::string tokens;
  std::string tokens_file;
  uint64_t random = 0;
  uint64_t seed = 0;
  std::string out;
  std::string cache;
  std::string remote;
  bool check = false;
  CLI::Option* tokens_opt = nullptr;
  CLI::Option* tokens_file_opt = nullptr;
  CLI::Option* random_opt = nullptr;
  CLI::Option* seed_opt = nullptr;
  CLI::Option* out_opt = nullptr;
  CLI::Option* cache_opt = nullptr;
  CLI::Option* remote_opt = nullptr;
};

// The counts every target reports.
struct SynthCounts {
  uint64_t blocks = 0;
  uint64_t present = 0;
  uint64_t missing = 0;
  uint64_t wrong = 0;
};

// Where synthesized blocks go. Put() is called once per block, in order.
class BlockTarget {
 public:
  virtual ~BlockTarget() = default;
  virtual Status Put(const BlockKey& key, const BlockBuffer& file) = 0;
};

// --out DIR: one standalone file per block, published atomically.
class FolderTarget : public BlockTarget {
 public:
  explicit FolderTarget(std::string dir) : dir_(std::move(dir)) {}
  Status Put(const BlockKey& key, const BlockBuffer& file) override {
    return Env::Default()->WriteFileAtomic(JoinPath(dir_, key.Hex() + ".safetensors"), file.span(),
                                           WriteFileOptions{});
  }

 private:
  std::string dir_;
};

// --cache DIR: stored through a DiskTier into a cache folder.
class CacheTarget : public BlockTarget {
 public:
  explicit CacheTarget(std::unique_ptr<CacheSynthSink> sink) : sink_(std::move(sink)) {}
  Status Put(const BlockKey& key, const BlockBuffer& file) override {
    return sink_->Put(key, file);
  }
  CacheSynthSink* sink() { return sink_.get(); }

 private:
  std::unique_ptr<CacheSynthSink> sink_;
};

// --remote URL: stored through a RemoteTier into Redis.
class RemoteTarget : public BlockTarget {
 public:
  explicit RemoteTarget(std::unique_ptr<RemoteSynthSink> sink) : sink_(std::move(sink)) {}
  Status Put(const BlockKey& key, const BlockBuffer& file) override {
    return sink_->Put(key, file);
  }
  RemoteSynthSink* sink() { return sink_.get(); }

 private:
  std::unique_ptr<RemoteSynthSink> sink_;
};

uint64_t Mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Result<std::vector<uint32_t>> ReadTokens(const SynthArgs& a) {
  const int sources =
      (a.tokens_opt->count() > 0) + (a.tokens_file_opt->count() > 0) + (a.random_opt->count() > 0);
  if (sources != 1) {
    return Status::InvalidArgument("give exactly one of --tokens, --tokens-file or --random");
  }
  if (a.seed_opt->count() > 0 && a.random_opt->count() == 0) {
    return Status::InvalidArgument("--seed only goes with --random");
  }
  if (a.tokens_opt->count() > 0) {
    Result<std::vector<uint32_t>> t = ParseTokenList(a.tokens);
    if (!t.ok()) return t.status().WithContext("--tokens");
    return t;
  }
  if (a.tokens_file_opt->count() > 0) {
    Result<std::vector<std::byte>> bytes =
        Env::Default()->ReadWholeFile(a.tokens_file, kMaxTokenFileBytes);
    if (!bytes.ok()) return bytes.status().WithContext("--tokens-file");
    std::string text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    Result<std::vector<uint32_t>> t = ParseTokenList(text);
    if (!t.ok()) return t.status().WithContext("--tokens-file " + a.tokens_file);
    return t;
  }
  if (a.random > kMaxRandomTokens) {
    return Status::InvalidArgument("--random: at most " + std::to_string(kMaxRandomTokens) +
                                   " tokens");
  }
  std::vector<uint32_t> tokens(a.random);
  for (uint64_t i = 0; i < a.random; ++i) {
    tokens[i] = static_cast<uint32_t>(Mix(a.seed + (i + 1) * 0x9e3779b97f4a7c15ull) >> 33);
  }
  return tokens;
}

Result<std::unique_ptr<BlockTarget>> MakeTarget(const SynthArgs& a, const ModelLayout& layout) {
  const bool out = a.out_opt->count() > 0, cache = a.cache_opt->count() > 0;
  const bool remote = a.remote_opt->count() > 0;
  if (out + cache + remote != 1) {
    return Status::InvalidArgument("give exactly one of --out DIR, --cache DIR or --remote URL");
  }
  if (a.check && !cache && !remote) {
    return Status::InvalidArgument("--check only goes with --cache or --remote");
  }
  // --layout, --block-tokens and --model name the blocks; the file's
  // options are the tier's, and one this target cannot apply is refused.
  if (remote) {
    KVTIER_RETURN_IF_ERROR(
        a.config.RefuseOthers("synth --remote", {"remote", "remote_"},
                              "it writes through the remote tier alone: remote_* apply"));
  } else if (cache) {
    KVTIER_RETURN_IF_ERROR(a.config.RefuseOthers(
        "synth --cache", {"disk_"}, "it writes through the disk tier alone: disk_* apply"));
  } else {
    KVTIER_RETURN_IF_ERROR(
        a.config.RefuseOthers("synth --out", {}, "it writes plain files and opens no tier"));
  }
  if (remote) {
    auto sink = RemoteSynthSink::Open(a.remote, layout, a.config);
    if (!sink.ok()) return sink.status().WithContext("--remote");
    return std::unique_ptr<BlockTarget>(std::make_unique<RemoteTarget>(std::move(sink).value()));
  }
  if (cache) {
    auto sink = CacheSynthSink::Open(a.cache, layout, a.config);
    if (!sink.ok()) return sink.status().WithContext("--cache");
    return std::unique_ptr<BlockTarget>(std::make_unique<CacheTarget>(std::move(sink).value()));
  }
  Status s = Env::Default()->CreateDirs(a.out, 0755);
  if (!s.ok()) return s.WithContext("--out");
  return std::unique_ptr<BlockTarget>(std::make_unique<FolderTarget>(a.out));
}

int Run(const SynthArgs& a, const CommonFlags& flags) {
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout, a.block_tokens);
  if (!layout.ok()) return ReportError(flags, layout.status().WithContext("--layout"));
  NamespaceOptions ns;
  ns.model_id = a.model;
  ns.layout_signature = layout->Signature();
  ns.block_tokens = layout->block_tokens;
  Result<KeyChain> chain = KeyChain::Create(ns);
  if (!chain.ok()) return ReportError(flags, chain.status());
  Result<std::vector<uint32_t>> tokens = ReadTokens(a);
  if (!tokens.ok()) return ReportError(flags, tokens.status());
  Result<std::unique_ptr<BlockTarget>> target = MakeTarget(a, *layout);
  if (!target.ok()) return ReportError(flags, target.status());

  const std::vector<BlockKey> keys = chain->KeysFor(*tokens);
  const int64_t now = Env::Default()->NowUnixMicros() / 1000000;
  SynthCounts counts;
  counts.blocks = keys.size();
  // A block that cannot be written (a full disk) is counted missing and the
  // rest are still tried: the counts are printed in every case (DESIGN.md
  // §6), with the first error on stderr and exit 1.
  Status first_error = Status::Ok();
  ProgressBar progress("blocks", flags.json);
  for (size_t i = 0; i < keys.size(); ++i) {
    const BlockKey& parent = i == 0 ? chain->ns() : keys[i - 1];
    Result<BlockBuffer> file = MakeBlockFile(*layout, keys[i], parent, chain->ns(), now);
    Status s = file.ok() ? (*target)->Put(keys[i], *file) : file.status();
    if (s.ok()) {
      ++counts.present;
    } else if (first_error.ok()) {
      first_error = s;
    }
    progress.Update(i + 1, keys.size());
  }
  progress.Finish();
  if (a.check) Step(flags.json, "synth", "checking " + std::to_string(keys.size()) + " blocks");
  if (auto* cache = dynamic_cast<CacheTarget*>(target->get())) {
    uint64_t failed = 0;
    Status s = cache->sink()->Finish(&failed);
    counts.present -= std::min(counts.present, failed);
    // The tier's summary names every cause, the inline writes' included.
    if (!s.ok() && (first_error.ok() || failed > 0)) first_error = s;
    if (a.check) {
      CacheSynthSink::CheckCounts c = cache->sink()->Check(keys);
      counts.present = c.present;
      counts.wrong = c.wrong;
    }
  }
  if (auto* remote = dynamic_cast<RemoteTarget*>(target->get())) {
    Status s = remote->sink()->Finish();
    if (!s.ok() && first_error.ok()) first_error = s;
    if (a.check) {
      RemoteSynthSink::CheckCounts c = remote->sink()->Check(keys);
      counts.present = c.present;
      counts.wrong = c.wrong;
    }
  }
  counts.missing = counts.blocks - counts.present - counts.wrong;

  if (flags.json) {
    PrintJson({{"blocks", counts.blocks},
               {"present", counts.present},
               {"missing", counts.missing},
               {"wrong", counts.wrong}});
  } else {
    std::cout << "blocks " << counts.blocks << ", present " << counts.present << ", missing "
              << counts.missing << ", wrong " << counts.wrong << "\n";
  }
  std::cout.flush();
  if (!first_error.ok()) std::cerr << "kvtier: " << first_error.message() << "\n";
  return first_error.ok() && counts.present == counts.blocks && counts.wrong == 0 ? kExitOk
                                                                                  : kExitFailure;
}

std::function<int()> SetupSynth(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<SynthArgs>();
  app->add_option("--layout", a->layout, "Layout preset or .json file")->required();
  a->config.Add(app);  // disk_* (--cache) or remote_* (--remote) apply; others are refused
  app->add_option("--block-tokens", a->block_tokens, "Tokens per block (default: the layout's)")
      ->check(CLI::Range(uint32_t{1}, UINT32_MAX));
  app->add_option("--model", a->model, "Model id for the keys (default \"synth\")");
  a->tokens_opt = app->add_option("--tokens", a->tokens, "Token ids: 1,2,3");
  a->tokens_file_opt = app->add_option("--tokens-file", a->tokens_file,
                                       "File of token ids separated by commas or whitespace");
  a->random_opt = app->add_option("--random", a->random, "Make N pseudo-random token ids");
  a->seed_opt = app->add_option("--seed", a->seed, "Seed for --random (default 0)");
  a->out_opt = app->add_option("--out", a->out, "Write DIR/<key hex>.safetensors per block");
  a->cache_opt = app->add_option("--cache", a->cache, "Store the blocks into a cache folder");
  a->remote_opt = app->add_option("--remote", a->remote,
                                  "Store the blocks into Redis: redis://host:port or "
                                  "redis-cluster://host:port,...");
  app->add_flag("--check", a->check,
                "With --cache or --remote: load every block back and check it");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(synth, "synth", "Write the generated block files of a token sequence", SetupSynth);
}  // namespace kvtier::cli
