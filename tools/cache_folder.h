// What the `kvtier` commands do with a disk-tier cache folder (ls, stats,
// gc, verify DIR, synth --cache): read its index, scan its files, plan and
// apply garbage collection, verify every block, and store/check synthesized
// blocks through a DiskTier. Implemented in tools/cache_*.cc.
//
// These read the index (<dir>/index.sqlite) directly and scan the folder;
// they never create a cache folder where there is none.
//
// Thread safety: plain functions; each call opens what it needs.
#ifndef KVTIER_TOOLS_CACHE_FOLDER_H_
#define KVTIER_TOOLS_CACHE_FOLDER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "disk/disk_index.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
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

// True if `dir` is a folder holding index.sqlite or blocks/.
bool IsCacheFolder(const std::string& dir);

// Opens the index of an existing cache folder. NotFound (naming the folder)
// if it is not one.
Result<std::unique_ptr<disk::DiskIndex>> OpenCacheIndex(const std::string& dir);

// An index row with its signature spelled out.
struct CacheEntry {
  BlockKey key;
  std::string signature;
  uint64_t bytes = 0;
  int64_t created_at_us = 0;
  int64_t last_access_us = 0;
};
Result<std::vector<CacheEntry>> ListCacheEntries(const std::string& dir);

// Files found under blocks/ and quarantine/.
struct FolderScan {
  struct File {
    std::string path;
    uint64_t bytes = 0;
    int64_t mtime_unix_s = 0;
    std::optional<BlockKey> key;  // block and temp files
    int pid = 0;                  // temp files: the writer
  };
  std::vector<File> blocks;      // <64 hex>.safetensors in the right subfolder
  std::vector<File> temps;       // temp files of writers
  std::vector<File> foreign;     // anything else under blocks/
  std::vector<File> quarantine;  // everything in quarantine/
};
Result<FolderScan> ScanCacheFolder(const std::string& dir);

// `kvtier gc`: what to remove.
struct GcRequest {
  std::optional<uint64_t> max_bytes;          // evict LRU (all layouts) down to this
  std::optional<int64_t> retention_seconds;   // remove blocks written longer ago
  std::optional<std::string> keep_signature;  // remove blocks of every other signature
  bool quarantine = true;                     // remove quarantined files
  bool dead_temps = true;                     // remove temp files of dead writers
};
struct GcItem {
  std::string path;
  // missing_file (a row whose file is gone), expired, other_layout,
  // over_budget, quarantined, dead_temp, foreign
  std::string reason;
  uint64_t bytes = 0;
};
Result<std::vector<GcItem>> PlanGc(const std::string& dir, const GcRequest& req);
// Removes the planned items (blocks: file then row). Returns the bytes freed
// and stops at the first error.
Result<uint64_t> ApplyGc(const std::string& dir, const std::vector<GcItem>& plan);

// `kvtier verify DIR`: one verdict per block file, foreign entry and row
// without a file; reason empty = valid.
struct CacheFileVerdict {
  std::string path;
  std::string reason;
  std::string message;
};
struct CacheVerifyOptions {
  const std::string* signature = nullptr;  // blocks must have it
  const ModelLayout* layout = nullptr;     // ... and exactly these tensors
};
Result<std::vector<CacheFileVerdict>> VerifyCacheFolder(const std::string& dir,
                                                        const CacheVerifyOptions& opts);

// `kvtier synth --cache DIR [--check]`: stores blocks through a DiskTier.
class CacheSynthSink {
 public:
  static Result<std::unique_ptr<CacheSynthSink>> Open(const std::string& dir,
                                                      const ModelLayout& layout);
  ~CacheSynthSink();
  Status Put(const BlockKey& key, const BlockBuffer& file);
  // Waits until everything is written; OK only if every block was persisted
  // (or was already there).
  Status Finish();
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
