// CacheSpec: the options the C API and the Python module open a cache with
// (DESIGN.md §8: layout, host_bytes, disk_dir, remote), and the one place
// that turns them into a TieredCache. The C API reads them from JSON, the
// Python module from keyword arguments; both then call OpenCache(). It lives
// in src/bindings/, the one component both bindings may include.
//
// Thread safety: plain values and a free function.
#ifndef KVTIER_BINDINGS_CACHE_SPEC_H_
#define KVTIER_BINDINGS_CACHE_SPEC_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::bindings {

struct CacheSpec {
  // A preset name ("tiny", "qwen2.5-0.5b", "llama3-8b") or a layout JSON
  // path. Required.
  std::string layout;
  // Overrides the layout's tokens per block when > 0. Default 0.
  uint32_t block_tokens = 0;
  // Bytes of RAM for the host tier, > 0. Required.
  uint64_t host_bytes = 0;
  // A disk-tier folder (created if missing), or none for a RAM-only cache.
  std::optional<std::string> disk_dir;
  // A Redis URL for the remote tier, or none.
  std::optional<std::string> remote;
  // The cache's logger (CacheOptions::info_log): set by the binding (the C
  // API's callback, Python's logging), never parsed. Not owned.
  Logger* info_log = nullptr;
};

// Parses the C API's options JSON (one object of the CacheSpec names; null
// for the optional ones). InvalidArgument naming the bad or unknown field.
Result<CacheSpec> ParseCacheSpecJson(std::string_view json_text);

// A cache opened from a spec, with the layout it resolved.
struct OpenedCache {
  ModelLayout layout;
  std::unique_ptr<TieredCache> cache;
};

// Resolves the layout and opens the cache. InvalidArgument for a bad spec
// (naming the field), the tiers' errors otherwise.
Result<OpenedCache> OpenCache(const CacheSpec& spec);
// The same with a layout the caller resolved (spec.layout and
// spec.block_tokens are not used).
Result<OpenedCache> OpenCacheForLayout(ModelLayout layout, const CacheSpec& spec);

}  // namespace kvtier::bindings

#endif  // KVTIER_BINDINGS_CACHE_SPEC_H_
