// Opening a cache from options (DESIGN.md §8): the C API reads them from
// JSON, the Python module from keyword arguments, both through the options
// table (bindings/option_table.h), and then call OpenCache(). It lives in
// src/bindings/, the component the bindings and the CLI share.
//
// Thread safety: plain values and free functions.
#ifndef KVTIER_BINDINGS_CACHE_SPEC_H_
#define KVTIER_BINDINGS_CACHE_SPEC_H_

#include <memory>
#include <string_view>

#include "bindings/option_table.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::bindings {

// Parses the C API's options JSON: one object of options (a "config" member
// names a JSON file read first). InvalidArgument naming the bad or unknown
// option, or a repeated one.
Result<CacheSpec> ParseCacheSpecJson(std::string_view json_text);

// A cache opened from a spec, with the layout it resolved.
struct OpenedCache {
  ModelLayout layout;
  std::unique_ptr<TieredCache> cache;
};

// Resolves the layout and opens the cache. InvalidArgument for a bad spec
// (naming the option: `layout` and `host_bytes` are required, disk_* and
// remote_* options need disk_dir / remote, server_http is the daemon's
// only), the tiers' errors otherwise.
Result<OpenedCache> OpenCache(const CacheSpec& spec);
// The same with a layout the caller resolved (spec.layout and
// spec.block_tokens are not used).
Result<OpenedCache> OpenCacheForLayout(ModelLayout layout, const CacheSpec& spec);

// The CacheOptions a spec describes for `layout` (disk and remote tiers
// set when disk_dir / remote are), checked: CacheOptions::Validate()'s
// message is prefixed with the option's name.
Result<CacheOptions> CacheOptionsFor(const ModelLayout& layout, const CacheSpec& spec);

// Prefixes a "CacheOptions.<field>" message with the option that sets the
// field ("disk_max_unlinks_per_store: CacheOptions.disk...").
Status NameOption(const Status& status);

}  // namespace kvtier::bindings

#endif  // KVTIER_BINDINGS_CACHE_SPEC_H_
