// `kvtier stats DIR`: counts and bytes of a cache folder (DESIGN.md §6).
//
//   kvtier stats DIR [--layout P | --signature S] [--json | --prometheus]
//
// Blocks and bytes in the index, per layout signature; with --layout or
// --signature, how many are compatible with it and how many are not;
// quarantined files, temp files and foreign entries found in the folder.
// Opens the index read-only: a folder the user may only read works.
//   --json: {"dir", "entries", "bytes", "allocated_bytes" (of the block files,
//   as the file system allocates them), "per_signature": [{"signature",
//   "blocks", "bytes"[, "compatible"]}], ["compatible": {"entries","bytes"},
//   "incompatible": {"entries","bytes"},] "quarantined": {"files","bytes"},
//   "temp_files", "foreign_files"}
//   --prometheus: the same as Prometheus gauges (kvtier_disk_*); without
//   --layout/--signature, per signature only (no compatible_* gauges, no
//   `compatible` label).
#include <iostream>

#include "command.h"
#include "folder_flags.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

struct StatsArgs {
  std::string dir;
  std::string layout;
  std::string signature;
  bool prometheus = false;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* signature_opt = nullptr;
};

int Run(const StatsArgs& a, const CommonFlags& flags) {
  if (a.prometheus && flags.json) {
    return ReportError(flags,
                       Status::InvalidArgument("give at most one of --json or --prometheus"));
  }
  auto ref = ReferenceSignature(a.layout, a.layout_opt->count() > 0, a.signature,
                                a.signature_opt->count() > 0);
  if (!ref.ok()) return ReportError(flags, ref.status());
  UnitProgress progress(ProgressOnTerminal(flags.json));  // the walk, on stderr
  auto folder = OpenCacheFolder(a.dir, CacheFolderAccess::kReadOnly, &progress);
  if (!folder.ok()) return ReportError(flags, folder.status());
  auto per = (*folder)->PerSignature();
  if (!per.ok()) return ReportError(flags, per.status(), kExitFailure);
  // Counted file by file: memory stays flat however many files there are.
  uint64_t allocated = 0, q_files = 0, q_bytes = 0, temps = 0, foreign = 0;
  using Kind = CacheFolderScan::Kind;
  Status scanned = (*folder)->ForEachFile([&](Kind kind, const CacheFolderScan::File& f) {
    switch (kind) {
      case Kind::kBlock:
        allocated += f.allocated_bytes;
        break;
      case Kind::kTemp:
        ++temps;
        break;
      case Kind::kForeign:
        ++foreign;
        break;
      case Kind::kQuarantine:
        ++q_files;
        q_bytes += f.bytes;
        break;
    }
  });
  progress.Finish();
  if (!scanned.ok()) return ReportError(flags, scanned, kExitFailure);

  DiskTierStats s;
  uint64_t other_entries = 0, other_bytes = 0;
  for (SignatureUsage& u : *per) {
    u.compatible = *ref && u.signature == **ref;
    s.entries += u.blocks;
    s.bytes += u.bytes;
    if (u.compatible) {
      s.compatible_entries += u.blocks;
      s.compatible_bytes += u.bytes;
    } else {
      other_entries += u.blocks;
      other_bytes += u.bytes;
    }
    s.per_signature.push_back(std::move(u));
  }
  // What the block files take from the disk, as the file system allocates
  // it (the unit every limit counts in).
  s.allocated_bytes = allocated;
  s.quarantine_files = q_files;

  if (a.prometheus) {
    // Without --layout/--signature there is nothing to judge blocks against:
    // per signature only, not "every block incompatible".
    std::cout << s.ToPrometheus(
        "kvtier_disk", *ref ? DiskStatsScope::kFolderOnly : DiskStatsScope::kFolderUnjudged);
    // The folder's files outside the index, as DiskTierStats has no field
    // for them: each family with its HELP and TYPE, as PrometheusFamily
    // (src/core/stats_render.h) writes them.
    std::cout << "# HELP kvtier_disk_quarantine_bytes bytes of the files in quarantine/\n"
                 "# TYPE kvtier_disk_quarantine_bytes gauge\n"
              << "kvtier_disk_quarantine_bytes " << q_bytes << "\n"
              << "# HELP kvtier_disk_temp_files writers' temp files under blocks/ (writes in "
                 "progress, or left by dead writers)\n"
                 "# TYPE kvtier_disk_temp_files gauge\n"
              << "kvtier_disk_temp_files " << temps << "\n"
              << "# HELP kvtier_disk_foreign_files entries under blocks/ that are neither block "
                 "files nor temp files\n"
                 "# TYPE kvtier_disk_foreign_files gauge\n"
              << "kvtier_disk_foreign_files " << foreign << "\n";
  } else if (flags.json) {
    nlohmann::json sigs = nlohmann::json::array();
    for (const SignatureUsage& u : s.per_signature) {
      nlohmann::json j = {{"signature", u.signature}, {"blocks", u.blocks}, {"bytes", u.bytes}};
      if (*ref) j["compatible"] = u.compatible;
      sigs.push_back(std::move(j));
    }
    nlohmann::json out = {{"dir", a.dir},
                          {"entries", s.entries},
                          {"bytes", s.bytes},
                          {"allocated_bytes", s.allocated_bytes},
                          {"per_signature", sigs},
                          {"quarantined", {{"files", s.quarantine_files}, {"bytes", q_bytes}}},
                          {"temp_files", temps},
                          {"foreign_files", foreign}};
    if (*ref) {
      out["compatible"] = {{"entries", s.compatible_entries}, {"bytes", s.compatible_bytes}};
      out["incompatible"] = {{"entries", other_entries}, {"bytes", other_bytes}};
    }
    PrintJson(out);
  } else {
    std::cout << a.dir << ": " << s.entries << " blocks, " << s.bytes << " bytes ("
              << s.allocated_bytes << " allocated)\n";
    for (const SignatureUsage& u : s.per_signature) {
      std::cout << "  " << u.blocks << " blocks, " << u.bytes << " bytes";
      if (*ref) std::cout << (u.compatible ? " (compatible)" : " (other layout)");
      std::cout << "  " << u.signature << "\n";
    }
    if (*ref) {
      std::cout << "compatible " << s.compatible_entries << " blocks, " << s.compatible_bytes
                << " bytes; incompatible " << other_entries << " blocks, " << other_bytes
                << " bytes\n";
    }
    std::cout << "quarantined " << s.quarantine_files << " files, " << q_bytes << " bytes; temp "
              << temps << " files; foreign " << foreign << "\n";
  }
  std::cout.flush();
  return kExitOk;
}

std::function<int()> SetupStats(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<StatsArgs>();
  app->add_option("dir", a->dir, "Cache folder")->required();
  a->layout_opt =
      app->add_option("--layout", a->layout, "Count blocks compatible with this layout");
  a->signature_opt =
      app->add_option("--signature", a->signature, "Count blocks compatible with this signature");
  app->add_flag("--prometheus", a->prometheus, "Print Prometheus text exposition");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(stats, "stats", "Counts and bytes of a cache folder per layout", SetupStats);
}  // namespace kvtier::cli
