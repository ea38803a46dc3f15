// kvtier demo: the reference engine serving a scripted session through the
// pool and the tiers, with a restart in the middle; with --remote URL also a
// second host that shares only Redis (src/engine/demo.h). --model hybrid
// serves a model mixing full attention, sliding-window attention and gated
// linear attention; --kv-bits 8 stores K/V 8-bit quantized.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>

#include "bench_util.h"
#include "command.h"
#include "config_flag.h"
#include "engine/demo.h"
#include "kvtier/layout.h"
#include "stderr_logger.h"

namespace kvtier::cli {
namespace {

struct DemoArgs {
  std::string dir = "kvtier-demo";
  bool keep = false;
  bool quiet = false;
  bool quick = false;
  std::string kv_dtype = "F16";
  std::string model = "default";
  uint32_t kv_bits = 0;
  uint32_t block_tokens = 16;
  uint32_t conversations = 4;
  uint32_t decode_tokens = 8;
  uint64_t seed = 1;
  uint32_t pool_blocks = 0;
  std::string remote;
  std::string remote_prefix;
  ConfigFlag config;
};

void PrintProgress(const engine::DemoEvent& e, std::ostream& os) {
  using Kind = engine::DemoEvent::Kind;
  if (e.kind != Kind::kRequest) {
    const bool section = e.kind == Kind::kRestart || e.kind == Kind::kSecondHost;
    os << (section ? "\n== " : "== ") << e.message << "\n";
    if (section) os << "\n";
    return;
  }
  const engine::DemoRequest& r = *e.request;
  const std::string logits =
      (r.logits_mismatched == 0 ? std::string("identical") : "DIFFER: " + r.mismatch) +
      (r.host == 2 ? " (vs the first host's)" : "");
  const std::string from_redis =
      r.remote_blocks == 0 ? "" : " (" + std::to_string(r.remote_blocks) + " blocks from Redis)";
  char line[640];
  std::snprintf(line, sizeof(line),
                "[%2u/%u] %sconversation %u turn %u: %zu tokens, %zu reused from %s%s, %zu "
                "computed; prefill %.1f ms, first token %.1f ms (recompute %.1f ms); logits %s\n",
                r.index + 1, e.total_requests, r.host == 2 ? "host 2 " : "", r.conversation + 1,
                r.turn + 1, r.prompt_tokens, r.reused_tokens, r.source.c_str(), from_redis.c_str(),
                r.computed_tokens, r.prefill_ms, r.ttft_ms, r.recompute_ttft_ms, logits.c_str());
  os << line << std::flush;
}

std::function<int()> SetupDemo(CLI::App* app, const CommonFlags* flags) {
  auto args = std::make_shared<DemoArgs>();
  app->add_option("--dir", args->dir, "Demo folder (cleared first unless --keep)")
      ->capture_default_str();
  app->add_flag("--keep", args->keep, "Keep what an earlier run left in the folder");
  app->add_flag("--quiet", args->quiet, "No progress lines");
  app->add_flag("--quick", args->quick,
                "A much smaller model and script (smoke tests; seconds even in debug builds)");
  app->add_option("--model", args->model,
                  "default: every layer full attention; hybrid: attention, sliding-window "
                  "attention and gated linear attention (a recurrent state) interleaved")
      ->check(CLI::IsMember({"default", "hybrid"}))
      ->capture_default_str();
  app->add_option("--kv-bits", args->kv_bits,
                  "0: K/V stored as --kv-dtype; 8: 8-bit affine-quantized K/V (U8 data, F16 "
                  "scales and biases per group of 32 elements, or of head_dim if smaller)")
      ->check(CLI::IsMember({0, 8}))
      ->capture_default_str();
  app->add_option("--kv-dtype", args->kv_dtype, "K/V dtype in the pool and the tiers")
      ->check(CLI::IsMember({"F16", "BF16", "F32"}))
      ->capture_default_str();
  CLI::Option* app_block_tokens =
      app->add_option("--block-tokens", args->block_tokens, "Tokens per block")
          ->check(CLI::Range(1, 4096))
          ->capture_default_str();
  CLI::Option* app_conversations =
      app->add_option("--conversations", args->conversations, "Conversations")
          ->check(CLI::Range(1, 64))
          ->capture_default_str();
  CLI::Option* app_decode_tokens =
      app->add_option("--decode-tokens", args->decode_tokens, "Tokens generated per turn")
          ->check(CLI::Range(0, 256))
          ->capture_default_str();
  app->add_option("--seed", args->seed, "Seed of the model's weights")->capture_default_str();
  // Bounded before anything is allocated: 65536 slots are 2 GiB of K/V at
  // the default model, far more than the script can use.
  app->add_option("--pool-blocks", args->pool_blocks,
                  "Slots of the serving pool, at most 65536 (0: the longest conversation and a "
                  "few more)")
      ->check(CLI::Range(uint32_t{0}, uint32_t{65536}))
      ->capture_default_str();
  CLI::Option* app_remote = app->add_option(
      "--remote", args->remote,
      "Redis for a remote tier under both hosts' caches, and then a second host with an empty "
      "RAM tier and an empty folder that serves every conversation again from Redis: "
      "redis://[[user]:password@]host:port[/db] or redis-cluster://host:port[,host:port...]");
  CLI::Option* app_remote_prefix =
      app->add_option("--remote-prefix", args->remote_prefix,
                      "Key prefix on the Redis server (default kvtier:v1:)");
  // host_bytes, remote and remote_* of the file apply.
  args->config.Add(app);
  return [args, flags, app_block_tokens, app_conversations, app_decode_tokens, app_remote,
          app_remote_prefix] {
    engine::DemoOptions o =
        args->quick ? engine::QuickDemoOptions(args->dir) : engine::DemoOptions{};
    o.dir = args->dir;
    o.start = args->keep ? engine::DemoStart::kKeep : engine::DemoStart::kClean;
    // Explicit flags override the configuration's defaults.
    if (!app_block_tokens->empty()) o.block_tokens = args->block_tokens;
    if (!app_conversations->empty()) o.conversations = args->conversations;
    if (!app_decode_tokens->empty()) o.decode_tokens = args->decode_tokens;
    o.model.seed = args->seed;
    o.info_log = StderrLog();
    o.pool_blocks = args->pool_blocks;
    o.model.kv_dtype = *DTypeFromName(args->kv_dtype);
    if (args->model == "hybrid") engine::UseHybridModel(&o);
    o.model.kv_bits = args->kv_bits;
    o.model.kv_group = std::min<uint32_t>(32, o.model.head_dim);
    // The serving pool's slots are allocated when it opens: refused here if
    // this machine cannot hold them, before the folder is touched.
    if (o.pool_blocks != 0) {
      const uint64_t block_bytes = o.model.KvLayout(o.block_tokens).BlockBytes();
      if (Status s = CheckMemory("--pool-blocks " + std::to_string(o.pool_blocks) + " of " +
                                     std::to_string(block_bytes) + " bytes",
                                 SatMul(o.pool_blocks, block_bytes));
          !s.ok()) {
        return ReportError(*flags, s);
      }
    }
    CacheOptions host;
    host.host.capacity_bytes = o.host_bytes;
    RemoteTierOptions r;
    if (Status s = args->config.ApplyTo({.cache = &host, .remote = &r},
                                        {{"--remote-prefix", "remote_prefix"}});
        !s.ok()) {
      return ReportError(*flags, s);
    }
    o.host_bytes = host.host.capacity_bytes;
    Result<std::optional<std::string>> config_remote = args->config.String("remote");
    if (!config_remote.ok()) return ReportError(*flags, config_remote.status());
    const bool has_remote = !app_remote->empty() || config_remote->has_value();
    if (!app_remote_prefix->empty() && !has_remote) {
      return ReportError(*flags, Status::InvalidArgument("--remote-prefix needs --remote URL"));
    }
    if (has_remote) {
      r.url = !app_remote->empty() ? args->remote : **config_remote;
      if (!app_remote_prefix->empty()) r.key_prefix = args->remote_prefix;
      o.remote = std::move(r);
    }
    // With --json, stdout carries only the JSON object; progress goes to stderr.
    std::ostream& os = flags->json ? std::cerr : std::cout;
    std::function<void(const engine::DemoEvent&)> progress;
    if (!args->quiet) progress = [&os](const engine::DemoEvent& e) { PrintProgress(e, os); };
    Result<engine::DemoReport> rep = engine::RunDemo(o, progress);
    if (!rep.ok()) {
      // Bad options, a folder that is not the demo's or a Redis server that is not
      // there are bad input.
      const bool input = rep.status().IsInvalidArgument() ||
                         rep.status().code() == StatusCode::kFailedPrecondition ||
                         rep.status().IsUnavailable();  // no Redis server answers
      return ReportError(*flags, rep.status(), input ? kExitUsage : kExitFailure);
    }
    if (flags->json) {
      std::cout << rep->ToJson() << "\n";
    } else {
      std::cout << "\n" << engine::FormatDemoTable(*rep);
      std::printf("ran in %.1f s; the cache folder is %s\n", rep->wall_s, rep->cache_dir.c_str());
    }
    if (!rep->bit_exact) {
      std::cerr << "kvtier: logits with the cache differ from logits without it in "
                << rep->mismatched_requests << " request(s)\n";
      return kExitFailure;
    }
    if (o.turns_after_restart > 0 && rep->disk_blocks_after_restart == 0) {
      std::cerr << "kvtier: the disk tier served no block after the restart\n";
      return kExitFailure;
    }
    if (rep->remote && rep->second_host_remote_blocks == 0) {
      std::cerr << "kvtier: the second host found no block in Redis\n";
      return kExitFailure;
    }
    return kExitOk;
  };
}

}  // namespace
KVTIER_COMMAND(demo, "demo",
               "Serve a scripted chat session on a small reference engine through the pool and "
               "the tiers, with a restart; check cached logits are bit-exact",
               SetupDemo);
}  // namespace kvtier::cli
