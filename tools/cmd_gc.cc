// `kvtier gc DIR`: removes what a cache folder no longer needs (DESIGN.md §6).
//
//   kvtier gc (DIR | --config F with disk_dir) [--max-bytes N] [--retention-seconds S]
//                 [--drop-other-layouts (--layout P | --signature S)]
//                 [--keep-quarantine] [--dry-run] [--json]
//
// Removes: index rows whose file is gone (missing_file); blocks written
// more than S seconds ago (expired); with --drop-other-layouts, blocks of
// every signature but the given one (other_layout); least-recently-accessed
// blocks of any layout until the blocks take at most N bytes (over_budget);
// quarantined files (unless --keep-quarantine); temp files of writers that
// are gone (dead_temp); foreign entries under blocks/ (foreign); block
// files with no row whose header does not verify (invalid_orphan).
// --dry-run lists them only. Items are printed as they are decided (and
// removed): quarantined files, then blocks/ subfolder by subfolder, then
// over_budget (CacheFolder::Gc); memory does not grow with the folder.
//   --json: {"dry_run", "items": [{"path", "reason", "bytes"}],
//   "totals": {"entries", "bytes", "by_reason": {reason: {"entries", "bytes"}}}
//   (what the plan holds, also on a dry run), "removed", "bytes_freed"}.
//   An error after the walk began (exit 1) ends the same object with
//   "error" and "code" beside what was removed before it: one object still.
#include <iostream>
#include <optional>
#include <string>

#include "command.h"
#include "config_flag.h"
#include "folder_flags.h"
#include "progress.h"

namespace kvtier::cli {
namespace {

struct GcArgs {
  std::string dir;
  uint64_t max_bytes = 0;
  int64_t retention_seconds = 0;
  bool drop_other_layouts = false;
  bool keep_quarantine = false;
  bool dry_run = false;
  std::string layout;
  std::string signature;
  CLI::Option* max_bytes_opt = nullptr;
  CLI::Option* retention_opt = nullptr;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* signature_opt = nullptr;
  CLI::Option* dir_opt = nullptr;
  ConfigFlag config;  // disk_dir, disk_max_bytes and disk_retention apply
};

// DIR if given, else the file's disk_dir.
Result<std::string> FolderOf(const GcArgs& a) {
  if (a.dir_opt->count() > 0) return a.dir;
  KVTIER_ASSIGN_OR_RETURN(std::optional<std::string> dir, a.config.String("disk_dir"));
  if (!dir) return Status::InvalidArgument("give the cache folder DIR (or --config with disk_dir)");
  return *std::move(dir);
}

int Run(const GcArgs& a, const CommonFlags& flags) {
  CacheGcRequest req;
  // The folder's configured limits, where the flags do not give them.
  DiskTierOptions configured;
  configured.max_bytes = 0;
  configured.retention_seconds = 0;
  if (Status s = a.config.ApplyTo({.disk = &configured}); !s.ok()) return ReportError(flags, s);
  Result<std::string> dir = FolderOf(a);
  if (!dir.ok()) return ReportError(flags, dir.status());
  if (configured.max_bytes > 0) req.max_bytes = configured.max_bytes;
  if (configured.retention_seconds > 0) req.retention_seconds = configured.retention_seconds;
  if (a.max_bytes_opt->count() > 0) {
    req.max_bytes = a.max_bytes;
  }
  if (a.retention_opt->count() > 0) {
    if (a.retention_seconds <= 0) {
      return ReportError(flags, Status::InvalidArgument("--retention-seconds: must be > 0"));
    }
    req.retention_seconds = a.retention_seconds;
  }
  auto ref = ReferenceSignature(a.layout, a.layout_opt->count() > 0, a.signature,
                                a.signature_opt->count() > 0);
  if (!ref.ok()) return ReportError(flags, ref.status());
  if (a.drop_other_layouts) {
    if (!*ref) {
      return ReportError(
          flags, Status::InvalidArgument("--drop-other-layouts needs --layout or --signature (the "
                                         "layout to keep)"));
    }
    req.keep_signature = **ref;
  } else if (*ref) {
    return ReportError(
        flags, Status::InvalidArgument("--layout/--signature only go with --drop-other-layouts"));
  }
  req.quarantine = !a.keep_quarantine;
  // A dry run only reads, so it works on a folder the user may only read.
  // The walk's subfolders, then the bytes over the budget, on stderr when
  // the items do not go to the terminal.
  UnitProgress progress(ProgressBesideOutput(flags.json));
  auto folder = OpenCacheFolder(
      *dir, a.dry_run ? CacheFolderAccess::kReadOnly : CacheFolderAccess::kReadWrite, &progress);
  if (!folder.ok()) return ReportError(flags, folder.status());
  // Each item is printed as it is decided (and removed): memory does not
  // grow with the folder (CacheFolder::Gc).
  Step(flags.json, "gc", (a.dry_run ? "planning " : "removing from ") + *dir);
  uint64_t entries = 0, planned_bytes = 0;
  nlohmann::json by_reason = nlohmann::json::object();
  auto dump = [](const nlohmann::json& j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  };
  if (flags.json) std::cout << "{\"dry_run\":" << (a.dry_run ? "true" : "false") << ",\"items\":[";
  auto freed = (*folder)->Gc(req, a.dry_run, [&](const CacheGcItem& item) {
    if (flags.json) {
      std::cout << (entries ? "," : "")
                << dump({{"path", item.path}, {"reason", item.reason}, {"bytes", item.bytes}});
      // What the plan holds, removed or (dry run) not: the totals a user
      // would otherwise add up from the items.
      nlohmann::json& r = by_reason[item.reason];
      if (r.is_null()) r = {{"entries", 0}, {"bytes", 0}};
      r["entries"] = r["entries"].get<uint64_t>() + 1;
      r["bytes"] = r["bytes"].get<uint64_t>() + item.bytes;
    } else {
      std::cout << (a.dry_run ? "would remove  " : "removed  ") << item.reason << "  " << item.bytes
                << "  " << item.path << "\n";
    }
    ++entries;
    planned_bytes += item.bytes;
  });
  progress.Finish();
  if (!freed.ok()) {
    // The items so far were printed (and, unless a dry run, removed): the
    // object ends with them and the error (ReportError would print a
    // second object).
    if (flags.json) {
      std::cout << "],\"totals\":"
                << dump({{"entries", entries}, {"bytes", planned_bytes}, {"by_reason", by_reason}})
                << ",\"removed\":" << (a.dry_run ? 0 : entries)
                << ",\"bytes_freed\":" << (a.dry_run ? 0 : planned_bytes)
                << ",\"error\":" << dump(freed.status().message())
                << ",\"code\":" << dump(std::string(StatusCodeName(freed.status().code()))) << "}"
                << std::endl;
    }
    std::cerr << "kvtier: " << freed.status().message() << "\n";
    return kExitFailure;
  }
  if (flags.json) {
    std::cout << "],\"totals\":"
              << dump({{"entries", entries}, {"bytes", planned_bytes}, {"by_reason", by_reason}})
              << ",\"removed\":" << (a.dry_run ? 0 : entries)
              << ",\"bytes_freed\":" << (a.dry_run ? 0 : *freed) << "}\n";
  } else {
    std::cout << entries << " entries, " << (a.dry_run ? planned_bytes : *freed) << " bytes"
              << (a.dry_run ? " (dry run)" : " freed") << "\n";
  }
  std::cout.flush();
  return kExitOk;
}

std::function<int()> SetupGc(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<GcArgs>();
  a->dir_opt =
      app->add_option("dir", a->dir, "Cache folder (default: the --config file's disk_dir)");
  a->config.Add(app);
  a->max_bytes_opt =
      app->add_option("--max-bytes", a->max_bytes,
                      "Evict least-recently-used blocks down to N bytes (512M, 1.5GB, 3MiB)")
          ->type_name("SIZE");
  a->retention_opt = app->add_option("--retention-seconds", a->retention_seconds,
                                     "Remove blocks written more than S seconds ago");
  app->add_flag("--drop-other-layouts", a->drop_other_layouts,
                "Remove blocks of every layout but --layout/--signature");
  a->layout_opt = app->add_option("--layout", a->layout, "The layout to keep");
  a->signature_opt = app->add_option("--signature", a->signature, "The signature to keep");
  app->add_flag("--keep-quarantine", a->keep_quarantine, "Leave quarantined files alone");
  app->add_flag("--dry-run", a->dry_run, "List what would be removed; remove nothing");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(gc, "gc", "Remove expired, over-budget, other-layout and quarantined files",
               SetupGc);
}  // namespace kvtier::cli
