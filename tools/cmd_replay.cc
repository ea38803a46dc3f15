// `kvtier replay`: replays a Mooncake-format trace through the cache tiers
// (DESIGN.md §6, docs/replay.md). --payload none simulates the tiers over
// block ids at full scale; --payload real runs a real TieredCache with real
// block bytes and verifies every block it loads, optionally with a remote
// tier on Redis below the local ones (--remote URL). --sweep hands over to
// tools/cmd_replay_sweep.cc.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "command.h"
#include "kvtier/env.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/layout.h"
#include "kvtier/remote_tier.h"
#include "replay/real_replayer.h"
#include "replay/simulator.h"
#include "replay/sweep.h"
#include "replay/trace_reader.h"
#include "replay_cli.h"
#include "stderr_logger.h"

namespace kvtier::cli {

Result<uint64_t> ParseReplayCount(std::string_view flag, std::string_view text, uint64_t min) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || p != text.data() + text.size() || v < min) {
    return Status::InvalidArgument(std::string(flag) + ": expected an integer " +
                                   std::to_string(min) + "..18446744073709551615, got '" +
                                   std::string(text.substr(0, 40)) + "'");
  }
  return v;
}

Result<uint64_t> ParseReplayTokens(std::string_view flag, std::string_view text) {
  const std::string f(flag);
  const std::string limit = std::to_string(replay::kMaxReplayTokens);
  const bool digits =
      !text.empty() && text.size() <= 40 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits) {
    return Status::InvalidArgument(f + ": expected an integer 512.." + limit + ", got '" +
                                   std::string(text.substr(0, 40)) + "'");
  }
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc::result_out_of_range || v > replay::kMaxReplayTokens) {
    return Status::InvalidArgument(f + ": " + std::string(text) + " is over the limit of " + limit +
                                   " tokens (2^40)");
  }
  if (v < replay::kTraceBlockTokens) {
    return Status::InvalidArgument(f + ": " + std::to_string(v) +
                                   " is less than one 512-token block");
  }
  return v;
}

Result<uint64_t> ReplayDiskTokens(const ReplayArgs& a, bool real) {
  const bool has_disk_tokens = a.disk_tokens_opt->count() > 0;
  const bool has_disk_dir = !a.disk_dir.empty();
  // The folder of a --config file is named as such: the user typed no flag.
  const std::string from_config =
      has_disk_dir && a.disk_dir_opt->count() == 0 ? " (the folder is --config's disk_dir)" : "";
  uint64_t disk_tokens = 0;
  if (has_disk_tokens) {
    KVTIER_ASSIGN_OR_RETURN(disk_tokens, ParseReplayTokens("--disk-tokens", a.disk_tokens));
  }
  if (real && has_disk_tokens != has_disk_dir) {
    return Status::InvalidArgument(
        "--payload real: give both --disk-dir and --disk-tokens for a disk tier, or neither" +
        from_config);
  }
  if (!real && has_disk_dir) {
    return Status::InvalidArgument(
        (from_config.empty() ? "--disk-dir" : "--config's disk_dir") +
        std::string(" is only used with --payload real (--payload none keeps no files; "
                    "--disk-tokens alone sizes its disk tier)"));
  }
  return disk_tokens;
}

Result<std::vector<uint64_t>> ParseSweepList(std::string_view text) {
  std::vector<uint64_t> sizes;
  size_t start = 0;
  while (true) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = text.substr(start, comma - start);
    if (item.empty()) {
      return Status::InvalidArgument(
          "--sweep: expected token counts separated by commas (N1,N2,...), got '" +
          std::string(text.substr(0, 60)) + "'");
    }
    if (sizes.size() == replay::kMaxSweepPoints) {
      return Status::InvalidArgument("--sweep: at most " + std::to_string(replay::kMaxSweepPoints) +
                                     " RAM sizes");
    }
    KVTIER_ASSIGN_OR_RETURN(uint64_t v, ParseReplayTokens("--sweep", item));
    if (std::find(sizes.begin(), sizes.end(), v) != sizes.end()) {
      return Status::InvalidArgument("--sweep: " + std::to_string(v) + " appears twice");
    }
    sizes.push_back(v);
    if (comma == text.size()) return sizes;
    start = comma + 1;
  }
}

namespace {

using replay::kTraceBlockTokens;
using replay::ReplayCounts;
using replay::TraceRequest;

// What the flags say, checked.
struct ReplayPlan {
  uint64_t ram_blocks = 0;
  uint64_t disk_blocks = 0;  // 0 = no disk tier
  bool real = false;
  HostEvictionPolicy policy = HostEvictionPolicy::kLru;
  uint64_t limit = UINT64_MAX;
  ModelLayout layout;
  std::optional<RemoteTierOptions> remote;
};

Result<ReplayPlan> MakePlan(const ReplayArgs& a) {
  ReplayPlan plan;
  if (a.ram_tokens_opt->count() == 0) {
    return Status::InvalidArgument("give --ram-tokens N (one RAM size) or --sweep N1,N2,...");
  }
  if (a.policy == "all") return Status::InvalidArgument("--policy all needs --sweep");
  if (a.plot_opt->count() > 0) return Status::InvalidArgument("--plot needs --sweep");
  KVTIER_ASSIGN_OR_RETURN(uint64_t ram_tokens, ParseReplayTokens("--ram-tokens", a.ram_tokens));
  plan.ram_blocks = ram_tokens / kTraceBlockTokens;
  if (a.payload.empty() || a.payload == "real") {
    plan.real = true;
  } else if (a.payload != "none") {
    return Status::InvalidArgument("--payload: expected real or none, got '" +
                                   a.payload.substr(0, 40) + "'");
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t disk_tokens, ReplayDiskTokens(a, plan.real));
  plan.disk_blocks = disk_tokens / kTraceBlockTokens;
  KVTIER_ASSIGN_OR_RETURN(plan.policy, ParseHostEvictionPolicy(a.policy));
  if (a.limit_opt->count() > 0) {
    KVTIER_ASSIGN_OR_RETURN(plan.limit, ParseReplayCount("--limit", a.limit, 1));
  }
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout);
  if (!layout.ok()) return layout.status().WithContext("--layout");
  plan.layout = std::move(layout).value();
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> config_remote, a.config.String("remote"));
  const bool has_remote = a.remote_opt->count() > 0 || config_remote.has_value();
  if (a.remote_prefix_opt->count() > 0 && !has_remote) {
    return Status::InvalidArgument("--remote-prefix needs --remote URL");
  }
  if (has_remote) {
    if (!plan.real) {
      return Status::InvalidArgument(
          "--remote needs --payload real (the remote tier stores real blocks)");
    }
    RemoteTierOptions r;
    KVTIER_RETURN_IF_ERROR(
        a.config.ApplyTo({.remote = &r}, {{"--remote-prefix", "remote_prefix"}}));
    r.url = a.remote_opt->count() > 0 ? a.remote : *config_remote;
    r.layout = plan.layout;
    if (a.remote_prefix_opt->count() > 0) r.key_prefix = a.remote_prefix;
    // A replay against a server that is not there would measure nothing:
    // say so at once rather than replay into an open breaker.
    r.require_server_at_open = true;
    Status s = r.Validate();
    if (!s.ok()) return s.WithContext("--remote");
    plan.remote = std::move(r);
  }
  return plan;
}

// Fields both modes print.
nlohmann::json CommonJson(const ReplayPlan& plan, const ReplayCounts& c, double max_ratio,
                          double seconds) {
  return {{"requests", c.requests},
          {"hit_ratio", c.HitRatio()},
          {"hit_ratio_ram", c.HitRatioRam()},
          {"hit_ratio_disk", c.HitRatioDisk()},
          {"hit_ratio_remote", c.HitRatioRemote()},
          {"max_hit_ratio", max_ratio},
          {"payload", plan.real ? "real" : "none"},
          {"policy", std::string(HostEvictionPolicyName(plan.policy))},
          {"ram_blocks", plan.ram_blocks},
          {"disk_blocks", plan.disk_blocks},
          {"remote", plan.remote.has_value()},
          {"input_tokens", c.input_tokens},
          {"hit_tokens", c.hit_tokens},
          {"hit_tokens_ram", c.hit_tokens_ram},
          {"hit_tokens_disk", c.hit_tokens_disk},
          {"hit_tokens_remote", c.hit_tokens_remote},
          {"block_accesses", c.blocks},
          {"ram_hits", c.ram_hits},
          {"disk_hits", c.disk_hits},
          {"remote_hits", c.remote_hits},
          {"inserts", c.inserts},
          {"ram_evictions", c.ram_evictions},
          {"disk_evictions", c.disk_evictions},
          {"ghost_hits", c.ghost_hits},
          {"layout", plan.layout.name},
          {"seconds", seconds}};
}

// The remote tier's outcome: the few counters a reader of a replay needs,
// then all of them.
void AddRemoteJson(const RemoteTierStats& r, nlohmann::json* j) {
  (*j)["remote_stored"] = r.stored;
  (*j)["remote_skipped_existing"] = r.skipped_existing;
  (*j)["remote_dropped"] =
      r.drops_queue_full + r.drops_unavailable + r.drops_oom + r.drops_error + r.drops_closed;
  (*j)["remote_bad_values"] = r.bad_values;
  (*j)["remote_stats"] = nlohmann::json::parse(r.ToJson(), nullptr, /*allow_exceptions=*/false);
}

void PrintText(const nlohmann::json& j) {
  std::ostringstream out;
  out << "requests        " << j["requests"] << " (" << j["input_tokens"] << " input tokens)\n";
  const bool remote = j["remote"].get<bool>();
  out << "payload         " << j["payload"].get<std::string>() << ", policy "
      << j["policy"].get<std::string>() << ", RAM " << j["ram_blocks"] << " blocks, disk "
      << j["disk_blocks"] << " blocks" << (remote ? ", remote tier" : "") << "\n";
  char line[160];
  std::snprintf(line, sizeof(line), "hit_ratio       %.5f (RAM %.5f, disk %.5f, remote %.5f)\n",
                j["hit_ratio"].get<double>(), j["hit_ratio_ram"].get<double>(),
                j["hit_ratio_disk"].get<double>(), j["hit_ratio_remote"].get<double>());
  out << line;
  std::snprintf(line, sizeof(line), "max_hit_ratio   %.5f (unbounded capacity)\n",
                j["max_hit_ratio"].get<double>());
  out << line;
  if (j.contains("belady_hit_ratio")) {
    std::snprintf(line, sizeof(line), "belady          %.5f (Belady's MIN at the RAM capacity)\n",
                  j["belady_hit_ratio"].get<double>());
    out << line;
  }
  out << "blocks          " << j["ram_hits"] << " RAM hits, " << j["disk_hits"] << " disk hits, "
      << j["remote_hits"] << " remote hits, " << j["inserts"] << " inserts, " << j["ram_evictions"]
      << " RAM evictions, " << j["disk_evictions"] << " disk evictions\n";
  if (j["payload"] == "real") {
    std::snprintf(line, sizeof(line),
                  "loads           %.3f GB/s (%llu bytes), %llu verified, %llu wrong\n",
                  j["load_GBps"].get<double>(),
                  static_cast<unsigned long long>(j["bytes_loaded"].get<uint64_t>()),
                  static_cast<unsigned long long>(j["verified"].get<uint64_t>()),
                  static_cast<unsigned long long>(j["wrong"].get<uint64_t>()));
    out << line;
  }
  if (remote) {
    out << "remote          " << j["remote_stored"] << " blocks stored, "
        << j["remote_skipped_existing"] << " already there, " << j["remote_dropped"]
        << " copies dropped, " << j["remote_bad_values"] << " bad values\n";
  }
  std::snprintf(line, sizeof(line), "time            %.2f s\n", j["seconds"].get<double>());
  out << line;
  std::cout << out.str();
}

// The --config file's layout, host_policy and disk_dir where their flags
// were not given (remote and remote_* apply in MakePlan); every other option
// is refused: replay sizes its tiers in tokens, and opens them itself.
Status ApplyReplayConfig(ReplayArgs* a) {
  // A bad or unknown option in --config is an error in both modes, even
  // where the sweep (a simulation, no tier opened) has no use for it.
  KVTIER_RETURN_IF_ERROR(a->config.ApplyTo({}));
  KVTIER_RETURN_IF_ERROR(a->config.RefuseOthers(
      "replay", {"layout", "host_policy", "disk_dir", "remote", "remote_"},
      "replay sizes its tiers with --ram-tokens and --disk-tokens; it applies layout, "
      "host_policy, disk_dir, remote and remote_*"));
  KVTIER_RETURN_IF_ERROR(a->config.FillString("layout", "--layout", &a->layout));
  KVTIER_RETURN_IF_ERROR(a->config.FillString("host_policy", "--policy", &a->policy));
  return a->config.FillString("disk_dir", "--disk-dir", &a->disk_dir);
}

int RunReplay(const ReplayArgs& args, const CommonFlags& flags) {
  ReplayArgs a = args;
  if (Status s = ApplyReplayConfig(&a); !s.ok()) return ReportError(flags, s);
  if (a.sweep_opt->count() > 0) {
    if (a.remote_opt->count() > 0 || a.remote_prefix_opt->count() > 0) {
      return ReportError(
          flags,
          Status::InvalidArgument(
              "--remote and --remote-prefix need one RAM size (--ram-tokens), not --sweep: a "
              "sweep simulates block ids and stores no blocks"));
    }
    if (a.ram_tokens_opt->count() > 0) {
      return ReportError(
          flags, Status::InvalidArgument("give --ram-tokens (one RAM size) or --sweep, not both"));
    }
    return RunReplaySweep(a, flags);
  }
  Result<ReplayPlan> plan = MakePlan(a);
  if (!plan.ok()) return ReportError(flags, plan.status());
  replay::TraceReadOptions topts;
  topts.max_requests = plan->limit;
  Result<std::vector<TraceRequest>> trace = replay::ReadTrace(Env::Default(), a.trace, topts);
  if (!trace.ok()) return ReportError(flags, trace.status());

  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&start] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  ReplayCounts totals;
  for (const TraceRequest& r : *trace) totals.input_tokens += r.input_length;
  const uint64_t max_hit_tokens = replay::MaxHitTokens(*trace);
  const double max_ratio = totals.Ratio(max_hit_tokens);
  const uint64_t block_bytes = plan->layout.BlockBytes();
  // No tier is given more blocks than the trace has: one that holds them all
  // never evicts, so the result is the same, and memory follows the trace
  // rather than a huge --ram-tokens.
  const uint64_t distinct = std::max<uint64_t>(1, replay::DistinctBlocks(*trace));
  const uint64_t ram_blocks = std::min(plan->ram_blocks, distinct);
  const uint64_t disk_blocks = std::min(plan->disk_blocks, distinct);
  ProgressBar progress("requests", flags.json);
  nlohmann::json j;
  int exit_code = kExitOk;
  if (!plan->real) {
    replay::SimOptions sopts;
    sopts.ram_blocks = ram_blocks;
    sopts.disk_blocks = disk_blocks;
    sopts.policy = plan->policy;
    replay::TierSimulator sim(sopts);
    for (size_t i = 0; i < trace->size(); ++i) {
      sim.Replay((*trace)[i]);
      progress.Update(i + 1, trace->size());
    }
    progress.Finish();
    const ReplayCounts& c = sim.counts();
    const uint64_t belady = replay::BeladyHitTokens(*trace, ram_blocks);
    j = CommonJson(*plan, c, max_ratio, elapsed());
    j["belady_hit_ratio"] = c.Ratio(belady);
    j["belady_hit_tokens"] = belady;
    // No bytes move: the byte counts are what the layout's blocks would
    // move, and there is no load speed to report.
    j["load_GBps"] = nullptr;
    j["block_bytes"] = block_bytes;
    j["bytes_loaded"] = (c.ram_hits + c.disk_hits) * block_bytes;
    j["bytes_stored"] = c.inserts * block_bytes;
    j["bytes_to_disk"] = plan->disk_blocks == 0 ? 0 : c.ram_evictions * block_bytes;
    j["bytes_from_disk"] = c.disk_hits * block_bytes;
  } else {
    replay::RealReplayOptions ropts;
    ropts.ram_blocks = ram_blocks;
    ropts.disk_blocks = disk_blocks;
    ropts.disk_dir = a.disk_dir;
    ropts.policy = plan->policy;
    ropts.layout = plan->layout;
    ropts.remote = plan->remote;
    ropts.info_log = StderrLog();
    ropts.created_at = Env::Default()->NowUnixMicros() / 1'000'000;
    Result<std::unique_ptr<replay::RealReplayer>> rr =
        replay::RealReplayer::Create(Env::Default(), ropts);
    if (!rr.ok()) return ReportError(flags, rr.status());
    for (size_t i = 0; i < trace->size(); ++i) {
      Status s = (*rr)->Replay((*trace)[i]);
      if (!s.ok()) {
        progress.Finish();
        return ReportError(flags, s.WithContext("request " + std::to_string(i + 1)), kExitFailure);
      }
      progress.Update(i + 1, trace->size());
    }
    Status s = (*rr)->Finish();
    progress.Finish();
    if (!s.ok()) return ReportError(flags, s, kExitFailure);
    const replay::RealReplayStats& st = (*rr)->stats();
    j = CommonJson(*plan, st.counts, max_ratio, elapsed());
    j["load_GBps"] = st.LoadGBps();
    j["block_bytes"] = block_bytes;
    j["block_file_bytes"] = st.block_file_bytes;
    j["bytes_loaded"] = st.bytes_loaded;
    j["prefix_bytes_loaded"] = st.prefix_bytes_loaded;
    j["bytes_stored"] = st.bytes_stored;
    j["bytes_to_disk"] = st.bytes_to_disk;
    j["bytes_from_disk"] = st.bytes_from_disk;
    j["bytes_from_remote"] = st.bytes_from_remote;
    if (st.remote.has_value()) AddRemoteJson(*st.remote, &j);
    j["load_seconds"] = st.load_seconds;
    j["verified"] = st.verified;
    j["wrong"] = st.wrong;
    if (st.wrong > 0) exit_code = kExitFailure;
  }
  j["max_hit_tokens"] = max_hit_tokens;
  if (flags.json) {
    PrintJson(j);
  } else {
    PrintText(j);
  }
  if (exit_code != kExitOk) {
    std::cerr << "kvtier: replay loaded " << j["wrong"] << " wrong block(s)\n";
  }
  std::cout.flush();
  return std::cout.good() ? exit_code : kExitFailure;
}

std::function<int()> SetupReplay(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<ReplayArgs>();
  app->add_option("trace", a->trace, "Mooncake-format trace (.jsonl)")->required();
  a->config.Add(app);
  a->ram_tokens_opt =
      app->add_option("--ram-tokens", a->ram_tokens,
                      "Host (RAM) tier capacity in tokens (floor(N/512) blocks; at most 2^40)");
  a->sweep_opt = app->add_option("--sweep", a->sweep,
                                 "Replay once per RAM size N1,N2,... (tokens; instead of "
                                 "--ram-tokens; --payload none by default)");
  a->remote_opt = app->add_option(
      "--remote", a->remote,
      "Remote tier below the local ones: redis://[[user]:password@]host:port[/db] or "
      "redis-cluster://host:port[,host:port...] (--payload real; its capacity is the server's)");
  a->remote_prefix_opt = app->add_option(
      "--remote-prefix", a->remote_prefix,
      "Key prefix on the server (default kvtier:v1:): replays that share a prefix share blocks");
  a->disk_tokens_opt =
      app->add_option("--disk-tokens", a->disk_tokens,
                      "Disk tier capacity in tokens (floor(M/512) blocks; at most 2^40)");
  a->disk_dir_opt =
      app->add_option("--disk-dir", a->disk_dir,
                      "Disk tier folder (--payload real; with --sweep, one subfolder per point)");
  app->add_option("--layout", a->layout,
                  "Layout preset or .json file of the block bytes (--payload real; default tiny)");
  app->add_option("--payload", a->payload,
                  "real: real blocks through a TieredCache, verified on every load; "
                  "none: metadata-only simulation (default real, none with --sweep)");
  app->add_option("--policy", a->policy,
                  "Host tier eviction policy: lru or reuse (default lru); all (--sweep): both");
  a->plot_opt = app->add_option("--plot", a->plot,
                                "--sweep: draw hit ratio against RAM tokens into FILE.svg");
  a->limit_opt = app->add_option("--limit", a->limit, "Replay only the first R requests");
  return [a, flags] { return RunReplay(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(replay, "replay", "Replay a Mooncake trace through the cache tiers", SetupReplay);
}  // namespace kvtier::cli
