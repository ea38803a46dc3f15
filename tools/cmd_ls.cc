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
//   seconds).
#include <algorithm>
#include <ctime>
#include <iostream>
#include <tuple>

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

int Run(const LsArgs& a, const CommonFlags& flags) {
  auto ref = ReferenceSignature(a.layout, a.layout_opt->count() > 0, a.signature,
                                a.signature_opt->count() > 0);
  if (!ref.ok()) return ReportError(flags, ref.status());
  auto folder = OpenCacheFolder(a.dir);
  if (!folder.ok()) return ReportError(flags, folder.status());
  auto entries = (*folder)->ListEntries();
  if (!entries.ok()) return ReportError(flags, entries.status(), kExitFailure);
  std::sort(entries->begin(), entries->end(), [](const auto& x, const auto& y) {
    return std::tie(x.last_access_us, x.key) < std::tie(y.last_access_us, y.key);
  });
  uint64_t bytes = 0;
  for (const CacheFolderEntry& e : *entries) bytes += e.bytes;
  if (flags.json) {
    nlohmann::json list = nlohmann::json::array();
    for (const CacheFolderEntry& e : *entries) {
      nlohmann::json j = {{"key", e.key.Hex()},
                          {"signature", e.signature},
                          {"bytes", e.bytes},
                          {"created_at", static_cast<double>(e.created_at_us) / 1e6},
                          {"last_access", static_cast<double>(e.last_access_us) / 1e6}};
      if (*ref) j["compatible"] = e.signature == **ref;
      list.push_back(std::move(j));
    }
    PrintJson({{"dir", a.dir}, {"count", entries->size()}, {"bytes", bytes}, {"entries", list}});
  } else {
    if (!a.no_header) {
      std::cout << "key  bytes  created  last_access  " << (*ref ? "layout  " : "")
                << "signature\n";
    }
    for (const CacheFolderEntry& e : *entries) {
      std::cout << e.key.Hex() << "  " << e.bytes << "  " << Utc(e.created_at_us) << "  "
                << Utc(e.last_access_us) << "  ";
      if (*ref) std::cout << (e.signature == **ref ? "compatible  " : "other-layout  ");
      std::cout << e.signature << "\n";
    }
    std::cout << entries->size() << " blocks, " << bytes << " bytes\n";
  }
  std::cout.flush();
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
