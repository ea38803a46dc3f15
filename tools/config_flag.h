// --config FILE.json for the `kvtier` commands that open a cache or a tier
// (DESIGN.md §6): the options of docs/options.md (the same table and parser
// as Python and C), over the options the command builds from its flags,
// except where a flag given on the command line sets the same thing: a
// flag given wins over the file, the file over a flag's default.
//
// Thread safety: parse-time state of one command; use from main's thread.
#ifndef KVTIER_TOOLS_CONFIG_FLAG_H_
#define KVTIER_TOOLS_CONFIG_FLAG_H_

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/disk_tier.h"
#include "kvtier/remote_tier.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cli {

// The options a command opens its tiers with; null for a tier it has not.
struct ConfigTargets {
  CacheOptions* cache = nullptr;  // cache-wide and host_* options
  DiskTierOptions* disk = nullptr;
  RemoteTierOptions* remote = nullptr;
};

// A command-line flag and the option of the file it overrides when given.
struct FlagOverride {
  const char* flag;    // "--threads"
  const char* option;  // "disk_writer_threads"
};

class ConfigFlag {
 public:
  // Adds --config FILE.json to `app`.
  void Add(CLI::App* app);
  bool given() const { return opt_ != nullptr && opt_->count() > 0; }

  // Applies the file's options to `targets` (nothing without --config),
  // skipping each option whose flag in `overrides` was given. Bad or unknown
  // options are InvalidArgument naming them (and the file), and so is
  // read_buffer_prefault_bytes, which no command applies.
  Status ApplyTo(const ConfigTargets& targets,
                 std::initializer_list<FlagOverride> overrides = {}) const;

  // So that no option of the file is dropped silently: InvalidArgument
  // naming the first option (in name order) that `command` cannot
  // apply, i.e. whose name is not in `applied` (an entry ending in '_' is a
  // prefix: "remote_"), with `hint` saying what to use instead.
  Status RefuseOthers(std::string_view command, std::initializer_list<std::string_view> applied,
                      std::string_view hint) const;

  // Sets `*value` to the file's string option `option` (checked like every
  // option) unless `flag` was given on the command line or the file has no
  // such option.
  Status FillString(const char* option, const char* flag, std::string* value) const;

  // The file's value of a string option (layout, disk_dir, remote, ...),
  // if the file names one, checked like every option.
  Result<std::optional<std::string>> String(const char* option) const;

 private:
  CLI::App* app_ = nullptr;
  CLI::Option* opt_ = nullptr;
  std::string path_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_CONFIG_FLAG_H_
