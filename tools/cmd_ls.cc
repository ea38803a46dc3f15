// `kvtier ls DIR`: the blocks a cache folder's index holds (DESIGN.md §6).
//
//   kvtier ls DIR [--layout P | --signature S] [--no-header] [--json]
//
// A header line naming the columns (--no-header leaves it out, for scripts
// that read the text; DESIGN.md §6 pins only --json), then one line per
// block, oldest access first: key, bytes, written and last accessed (UTC),
// layout signature; with --layout/--signature also whether the block is
// compatible with it ("layout" column), then a total line. Reads only the index, opened read-only
// (a folder the user may only read works).
//   --json: {"dir", "count", "bytes", "entries": [{"key", "signature",
//   "bytes", "created_at", "last_access"[, "compatible"]}]} (times in unix
//   seconds; "error" and "code" too if the index failed part way).
// Both stream: memory stays flat however many blocks the folder holds.
#include <ctime>
#include <iostream>
#include <optional>

#include "command.h"
#include "folder_flags.h"

namespace kvtier::cli {
namespace {

struct LsArgs {
  std::string dir;
  std::string layout;
  std::string signature;
  CLI::Option* layout_opt = nullptr;
  CLI::Option* signature_opt = nullptr;
  bool no_header = false;
};

std::string Utc(int64_t unix_us) {
  std::time_t t = static_cast<std::time_t>(unix_us / 1'000'000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

nlohmann::json EntryJson(const CacheFolderEntry& e, const std::optional<std::string>& ref) {
  nlohmann::json j = {{"key", e.key.Hex()},
                      {"signature", e.signature},
                      {"bytes", e.bytes},
                      {"created_at", static_cast<double>(e.created_at_us) / 1e6},
                      {"last_access", static_cast<double>(e.last_access_us) / 1e6}};
  if (ref) j["compatible"] = e.signature == *ref;
  return j;
}

// Streams the listing: one entry in memory at a time, whatever the folder
// holds. --json prints what PrintJson would print for the whole object
// (keys sorted, compact), its totals from the index's per-signature counts.
int Run(const LsArgs& a, const CommonFlags& flags) {
  auto ref = ReferenceSignature(a.layout, a.layout_opt->count() > 0, a.signature,
                                a.signature_opt->count() > 0);
  if (!ref.ok()) return ReportError(flags, ref.status());
  auto folder = OpenCacheFolder(a.dir);
  if (!folder.ok()) return ReportError(flags, folder.status());
  uint64_t count = 0;
  uint64_t bytes = 0;
  Status listed;
  if (flags.json) {
    auto usage = (*folder)->PerSignature();
    if (!usage.ok()) return ReportError(flags, usage.status(), kExitFailure);
    uint64_t total_count = 0;
    uint64_t total_bytes = 0;
    for (const SignatureUsage& u : *usage) {
      total_count += u.blocks;
      total_bytes += u.bytes;
    }
    auto dump = [](const nlohmann::json& j) {
      return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    };
    std::cout << "{\"bytes\":" << total_bytes << ",\"count\":" << total_count
              << ",\"dir\":" << dump(a.dir) << ",\"entries\":[";
    listed = (*folder)->ForEachEntryByAccess([&](const CacheFolderEntry& e) {
      std::cout << (count++ ? "," : "") << dump(EntryJson(e, *ref));
    });
    std::cout << "]";
    if (!listed.ok()) {  // part of the list is out: the error ends the one object
      std::cout << ",\"code\":" << dump(std::string(StatusCodeName(listed.code())))
                << ",\"error\":" << dump(listed.message());
    }
    std::cout << "}\n";
  } else {
    if (!a.no_header) {
      std::cout << "key  bytes  created  last_access  " << (*ref ? "layout  " : "")
                << "signature\n";
    }
    listed = (*folder)->ForEachEntryByAccess([&](const CacheFolderEntry& e) {
      ++count;
      bytes += e.bytes;
      std::cout << e.key.Hex() << "  " << e.bytes << "  " << Utc(e.created_at_us) << "  "
                << Utc(e.last_access_us) << "  ";
      if (*ref) std::cout << (e.signature == **ref ? "compatible  " : "other-layout  ");
      std::cout << e.signature << "\n";
    });
    if (listed.ok()) std::cout << count << " blocks, " << bytes << " bytes\n";
  }
  std::cout.flush();
  if (!listed.ok()) {
    std::cerr << "kvtier: " << listed.message() << "\n";
    return kExitFailure;
  }
  return kExitOk;
}

std::function<int()> SetupLs(CLI::App* app, const CommonFlags* flags) {
  auto a = std::make_shared<LsArgs>();
  app->add_option("dir", a->dir, "Cache folder")->required();
  a->layout_opt = app->add_option("--layout", a->layout, "Mark blocks compatible with this layout");
  a->signature_opt =
      app->add_option("--signature", a->signature, "Mark blocks compatible with this signature");
  app->add_flag("--no-header", a->no_header,
                "Leave out the column header line (plain text output only)");
  return [a, flags] { return Run(*a, *flags); };
}

}  // namespace
KVTIER_COMMAND(ls, "ls", "List the blocks of a cache folder", SetupLs);
}  // namespace kvtier::cli
