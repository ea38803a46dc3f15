// Helpers of the `kvtier` commands that work on cache folders (ls, stats,
// gc, verify DIR, synth --cache): the flags they share, and storing and
// checking synthesized blocks through a DiskTier. Reading a folder's index
// and files is the library's CacheFolder (include/kvtier/cache_folder.h).
// Implemented in tools/cache_folder.cc and tools/cache_synth.cc.
//
// Thread safety: plain functions; each call opens what it needs.
#ifndef KVTIER_TOOLS_CACHE_FOLDER_H_
#define KVTIER_TOOLS_CACHE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/cache_folder.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::cli {

// The signature named by --layout P (a preset or .json) or --signature S,
// if either was given; InvalidArgument if both were.
Result<std::optional<std::string>> ReferenceSignature(const std::string& layout, bool has_layout,
                                                      const std::string& signature,
                                                      bool has_signature);

// Parses a byte count: an integer with an optional K, M, G or T suffix
// (powers of 1024).
Result<uint64_t> ParseByteCount(const std::string& text);

// Opens the cache folder `dir` through the public CacheFolder API
// (include/kvtier/cache_folder.h); read-only unless `access` says otherwise.
Result<std::unique_ptr<CacheFolder>> OpenCacheFolder(
    const std::string& dir, CacheFolderAccess access = CacheFolderAccess::kReadOnly);

// `kvtier synth --cache DIR [--check]`: stores blocks through a DiskTier.
class CacheSynthSink {
 public:
  static Result<std::unique_ptr<CacheSynthSink>> Open(const std::string& dir,
                                                      const ModelLayout& layout);
  ~CacheSynthSink();
  Status Put(const BlockKey& key, const BlockBuffer& file);
  // Waits until everything is written. OK only if every block was persisted
  // (or was already there); else the error, with `*failed` set to the
  // number of failed writes (DiskTierStats::errors).
  Status Finish(uint64_t* failed);
  struct CheckCounts {
    uint64_t present = 0, missing = 0, wrong = 0;
  };
  // Loads every key back through the tier and checks its content.
  CheckCounts Check(const std::vector<BlockKey>& keys);

 private:
  CacheSynthSink(std::unique_ptr<DiskTier> tier, const ModelLayout& layout)
      : tier_(std::move(tier)), layout_(layout) {}
  std::unique_ptr<DiskTier> tier_;
  ModelLayout layout_;
};

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_CACHE_FOLDER_H_
