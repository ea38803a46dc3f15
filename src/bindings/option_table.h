// The options table: every option a user sets on a cache (DESIGN.md §8),
// one row each with its name (`<tier>_<field>`), type, unit, default and
// meaning, and how it sets its field. The Python keywords, the C
// options_json, JSON config files, the CLI's --config and the SGLang
// backend's extra config all go through ApplyOption(); docs/options.md is
// OptionsMarkdown()'s output (a test compares them).
//
// Values are JSON (nlohmann): the C API and config files are JSON already,
// the Python module converts its keywords. Sizes are integers (bytes) or
// strings with a unit (B, KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB binary;
// fractions allowed: "1.5GB"); durations are integers (milliseconds) or
// strings with ms, s, min or h. A value past what the field holds is
// refused, never wrapped.
//
// Thread safety: the table is immutable; the functions are reentrant.
#ifndef KVTIER_BINDINGS_OPTION_TABLE_H_
#define KVTIER_BINDINGS_OPTION_TABLE_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/remote_tier.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::bindings {

// Everything the options name, before a cache is opened. Each tier's
// options start at their library defaults; disk and remote are used only
// when disk_dir / remote is set.
struct CacheSpec {
  // A preset name or a layout JSON path ("layout"). Empty: not given.
  std::string layout;
  // Overrides the layout's tokens per block when > 0 ("block_tokens").
  uint32_t block_tokens = 0;
  // Host tier and cache-wide options (host_bytes lands in
  // cache.host.capacity_bytes). cache.disk / cache.remote stay empty here.
  // cache.info_log (the logger) is set by the binding (the C API's
  // callback, Python's logging), never parsed; not owned.
  CacheOptions cache;
  // Bytes of read buffers faulted in at open ("read_buffer_prefault_bytes"),
  // at most cache.read_buffer_pool_bytes; 0 = none.
  uint64_t read_buffer_prefault_bytes = 0;
  // The disk-tier folder ("disk_dir"), or none for no disk tier.
  std::optional<std::string> disk_dir;
  DiskTierOptions disk;
  // The Redis URL ("remote"), or none for no remote tier.
  std::optional<std::string> remote;
  RemoteTierOptions remote_tier;
  // The `kvtier serve` socket ("server", unix:PATH), or none.
  std::optional<std::string> server;
  // The daemon's own options (ServerOptions beyond CacheOptions; `kvtier
  // serve` only, refused by a client).
  uint64_t server_namespace_quota_bytes = 0;  // "server_namespace_quota"
  std::string server_socket_group;            // "server_socket_group"
  // The daemon's HTTP address ("server_http"), or none. Only `kvtier
  // serve` takes it (ServerOptions::http); OpenCache refuses it.
  std::optional<std::string> server_http;
  // The key namespace: model_id, salt, adapter_id, extra (key_*). The
  // layout signature and block_tokens come from the layout.
  NamespaceOptions key;
  // The names set so far (a caller's flag wins over a config file's value
  // only where it was given; see Has()).
  std::set<std::string> given;

  bool Has(std::string_view name) const { return given.count(std::string(name)) > 0; }
};

// One row of the table, as kvtier.options() and docs/options.md show it.
struct OptionInfo {
  std::string name;
  std::string type;           // "size", "duration", "integer", "bool", ...
  std::string default_value;  // as a user would write it
  std::string doc;            // meaning and unit
  std::string field;          // the C++ field it sets, e.g. "DiskTierOptions::max_bytes"
};

// Every option, in table order (grouped by tier).
const std::vector<OptionInfo>& Options();

// Sets option `name` from `value` in `spec` and records it in spec->given.
// InvalidArgument naming the option for a bad value, and naming the closest
// known option for an unknown name. ("config" is not an option here: see
// ApplyOptions.)
Status ApplyOption(std::string_view name, const nlohmann::json& value, CacheSpec* spec);

// Applies every member of a JSON object. A "config" member (a path) is read
// first as a JSON object of options (no nested "config"); the other members
// then override it. InvalidArgument for anything that is not an object.
Status ApplyOptions(const nlohmann::json& object, CacheSpec* spec);

// Reads a JSON config file (one object of options) into `spec`.
Status ApplyConfigFile(const std::string& path, CacheSpec* spec);
// The object of a JSON config file, checked to be one (no nested "config").
Result<nlohmann::json> ReadConfigFile(const std::string& path);
// How deep option JSON may nest (core's kMaxUserJsonDepth, which the
// bindings' users cannot include): Python's option lists too.
inline constexpr int kMaxOptionJsonDepth = 32;

// Parses option JSON (a config file's text, the C API's options_json) with
// internal::CheckUserJson's limits first: InvalidArgument "<what>: ..." for
// text that is not JSON, nests deeper than kMaxUserJsonDepth or repeats a
// key ("option 'x' given twice" at the top level). Any JSON value.
Result<nlohmann::json> ParseOptionsText(std::string_view text, const std::string& what);

// The known option closest to `name` by edit distance.
std::string ClosestOption(std::string_view name);

// docs/options.md, generated from the table.
std::string OptionsMarkdown();

// Unit parsers shared with the CLI's flags. `what` names the option in
// messages. ParseSize: bytes; ParseDuration: microseconds. The JSON forms
// take an integer or a string with a unit; the *Text forms (CLI flags) also
// take a bare number (bytes / milliseconds) and, for sizes, K, M, G, T
// (powers of 1024, as `kvtier gc --max-bytes 512M` always did).
Result<uint64_t> ParseSize(std::string_view what, const nlohmann::json& value);
Result<uint64_t> ParseSizeText(std::string_view what, std::string_view text);
Result<uint64_t> ParseDuration(std::string_view what, const nlohmann::json& value);
Result<uint64_t> ParseDurationText(std::string_view what, std::string_view text);

}  // namespace kvtier::bindings

#endif  // KVTIER_BINDINGS_OPTION_TABLE_H_
