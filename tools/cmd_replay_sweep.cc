// `kvtier replay TRACE --sweep N1,N2,...`: the trace replayed once per RAM
// size and policy, the points in parallel (src/replay/sweep.h), printed as a
// table or one JSON object (DESIGN.md §6), and with --plot drawn as an SVG
// (src/replay/sweep_plot.h). docs/replay.md describes it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <thread>

#include "command.h"
#include "kvtier/env.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/layout.h"
#include "replay/sweep.h"
#include "replay/sweep_plot.h"
#include "replay/trace_reader.h"
#include "replay_cli.h"

namespace kvtier::cli {
namespace {

using replay::SweepResult;
using replay::SweepRow;

// What the flags say, checked.
struct SweepPlan {
  replay::SweepOptions options;
  uint64_t limit = UINT64_MAX;
  std::string plot;  // empty: no picture
};

Result<SweepPlan> MakeSweepPlan(const ReplayArgs& a) {
  SweepPlan plan;
  replay::SweepOptions& o = plan.options;
  KVTIER_ASSIGN_OR_RETURN(o.ram_tokens, ParseSweepList(a.sweep));
  bool real = false;
  if (a.payload == "real") {
    real = true;
  } else if (!a.payload.empty() && a.payload != "none") {
    return Status::InvalidArgument("--payload: expected real or none, got '" +
                                   a.payload.substr(0, 40) + "'");
  }
  if (a.policy == "all") {
    o.policies = {HostEvictionPolicy::kLru, HostEvictionPolicy::kReuse};
  } else {
    Result<HostEvictionPolicy> p = ParseHostEvictionPolicy(a.policy);
    if (!p.ok()) {
      return Status::InvalidArgument("--policy: expected lru, reuse or all, got '" +
                                     a.policy.substr(0, 40) + "'");
    }
    o.policies = {*p};
  }
  KVTIER_ASSIGN_OR_RETURN(o.disk_tokens, ReplayDiskTokens(a, real));
  if (a.limit_opt->count() > 0) {
    KVTIER_ASSIGN_OR_RETURN(plan.limit, ParseReplayCount("--limit", a.limit, 1));
  }
  if (real) {
    Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), a.layout);
    if (!layout.ok()) return layout.status().WithContext("--layout");
    o.real_layout = std::move(layout).value();
    o.disk_dir = a.disk_dir;
  }
  if (a.plot_opt->count() > 0) {
    if (a.plot.empty()) return Status::InvalidArgument("--plot: expected a file name");
    const size_t slash = a.plot.rfind('/');
    const std::string folder = slash == std::string::npos ? "." : a.plot.substr(0, slash + 1);
    Result<FileInfo> info = Env::Default()->Stat(folder);
    if (!info.ok() || info->type != FileType::kDirectory) {
      return Status::InvalidArgument("--plot: folder '" + folder.substr(0, 200) +
                                     "' does not exist");
    }
    plan.plot = a.plot;
  }
  o.threads = std::clamp<uint32_t>(std::thread::hardware_concurrency(), 1, 64);
  return plan;
}

nlohmann::json RowJson(const SweepRow& r, bool real) {
  nlohmann::json j = {{"policy", std::string(HostEvictionPolicyName(r.policy))},
                      {"ram_tokens", r.ram_tokens},
                      {"disk_tokens", r.disk_tokens},
                      {"hit_ratio", r.counts.HitRatio()},
                      {"hit_ratio_ram", r.counts.HitRatioRam()},
                      {"hit_ratio_disk", r.counts.HitRatioDisk()},
                      {"belady_hit_ratio", r.BeladyHitRatio()},
                      {"ram_blocks", r.ram_blocks},
                      {"disk_blocks", r.disk_blocks},
                      {"hit_tokens", r.counts.hit_tokens},
                      {"hit_tokens_ram", r.counts.hit_tokens_ram},
                      {"hit_tokens_disk", r.counts.hit_tokens_disk},
                      {"belady_hit_tokens", r.belady_hit_tokens}};
  if (real) {
    j["verified"] = r.verified;
    j["wrong"] = r.wrong;
  }
  return j;
}

void PrintTable(const SweepResult& res, const nlohmann::json& j, bool real) {
  std::ostringstream out;
  char line[200];
  std::snprintf(
      line, sizeof(line), "requests        %llu (%llu input tokens), payload %s, %s\n",
      static_cast<unsigned long long>(res.requests),
      static_cast<unsigned long long>(res.input_tokens), real ? "real" : "none",
      res.rows.front().disk_tokens == 0
          ? "no disk tier"
          : ("disk tier " + std::to_string(res.rows.front().disk_tokens) + " tokens").c_str());
  out << line;
  std::snprintf(line, sizeof(line), "max_hit_ratio   %.5f (unbounded capacity)\n",
                res.MaxHitRatio());
  out << line;
  std::snprintf(line, sizeof(line), "%-7s %13s %13s %9s %9s %9s %9s%s\n", "policy", "ram_tokens",
                "disk_tokens", "hit_ratio", "ram", "disk", "belady",
                real ? "  verified  wrong" : "");
  out << line;
  for (const SweepRow& r : res.rows) {
    std::snprintf(line, sizeof(line), "%-7s %13llu %13llu %9.5f %9.5f %9.5f %9.5f",
                  std::string(HostEvictionPolicyName(r.policy)).c_str(),
                  static_cast<unsigned long long>(r.ram_tokens),
                  static_cast<unsigned long long>(r.disk_tokens), r.counts.HitRatio(),
                  r.counts.HitRatioRam(), r.counts.HitRatioDisk(), r.BeladyHitRatio());
    out << line;
    if (real) {
      std::snprintf(line, sizeof(line), " %9llu %6llu", static_cast<unsigned long long>(r.verified),
                    static_cast<unsigned long long>(r.wrong));
      out << line;
    }
    out << "\n";
  }
  if (!j["plot"].is_null()) out << "plot            " << j["plot"].get<std::string>() << "\n";
  std::snprintf(line, sizeof(line), "time            %.2f s (%u threads)\n",
                j["seconds"].get<double>(), j["threads"].get<unsigned>());
  out << line;
  std::cout << out.str();
}

std::string Basename(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

int RunReplaySweep(const ReplayArgs& a, const CommonFlags& flags) {
  Result<SweepPlan> plan = MakeSweepPlan(a);
  if (!plan.ok()) return ReportError(flags, plan.status());
  replay::TraceReadOptions topts;
  topts.max_requests = plan->limit;
  Result<std::vector<replay::TraceRequest>> trace =
      replay::ReadTrace(Env::Default(), a.trace, topts);
  if (!trace.ok()) return ReportError(flags, trace.status());

  const auto start = std::chrono::steady_clock::now();
  ProgressBar progress("requests, all points", flags.json);
  plan->options.on_progress = [&progress](uint64_t done, uint64_t total) {
    progress.Update(done, total);
  };
  Result<SweepResult> res = replay::RunSweep(Env::Default(), *trace, plan->options);
  progress.Finish();
  if (!res.ok()) {
    return ReportError(
        flags, res.status(),
        res.status().code() == StatusCode::kInvalidArgument ? kExitUsage : kExitFailure);
  }
  const bool real = plan->options.real_layout.has_value();
  uint64_t wrong = 0;
  nlohmann::json rows = nlohmann::json::array();
  for (const SweepRow& r : res->rows) {
    rows.push_back(RowJson(r, real));
    wrong += r.wrong;
  }
  nlohmann::json j = {
      {"max_hit_ratio", res->MaxHitRatio()},
      {"rows", rows},
      {"requests", res->requests},
      {"input_tokens", res->input_tokens},
      {"max_hit_tokens", res->max_hit_tokens},
      {"payload", real ? "real" : "none"},
      {"layout", real ? nlohmann::json(plan->options.real_layout->name) : nlohmann::json(nullptr)},
      {"threads", plan->options.threads},
      {"plot", plan->plot.empty() ? nlohmann::json(nullptr) : nlohmann::json(plan->plot)},
      {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()}};

  if (!plan->plot.empty()) {
    replay::SweepPlotOptions po;
    po.title = "kvtier replay: hit ratio against RAM tier size";
    po.subtitle =
        Basename(a.trace) + ": " + std::to_string(res->requests) + " requests, " +
        (res->rows.front().disk_tokens == 0
             ? std::string("no disk tier")
             : "disk tier of " + std::to_string(res->rows.front().disk_tokens) + " tokens") +
        ", payload " + (real ? "real" : "none");
    const std::string svg = replay::SweepPlotSvg(*res, po);
    WriteFileOptions wo;
    wo.permissions = 0644;
    Status s = Env::Default()->WriteFileAtomic(
        plan->plot, std::as_bytes(std::span(svg.data(), svg.size())), wo);
    if (!s.ok()) return ReportError(flags, s.WithContext("--plot"), kExitFailure);
  }
  if (flags.json) {
    PrintJson(j);
  } else {
    PrintTable(*res, j, real);
  }
  if (wrong > 0) std::cerr << "kvtier: replay loaded " << wrong << " wrong block(s)\n";
  std::cout.flush();
  if (!std::cout.good()) return kExitFailure;
  return wrong > 0 ? kExitFailure : kExitOk;
}

}  // namespace kvtier::cli
