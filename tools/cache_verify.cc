// `kvtier verify DIR` over a cache folder: every block file is read whole and
// decoded with every check of docs/block-format.md plus the key its name
// gives and, if asked, a layout; then compared with its index row (size and
// header hash). Foreign entries and rows without a file are reported too.
#include <algorithm>
#include <unordered_map>

#include "cache_folder.h"
#include "disk/folder_layout.h"
#include "disk/header_hash.h"
#include "kvtier/env.h"

namespace kvtier::cli {
namespace {

constexpr uint64_t kMaxBlockFileBytes = 8 + kMaxBlockHeaderBytes + (uint64_t{4} << 30);

std::string ReasonOf(const Status& s) {
  BlockFileError e = BlockFileErrorOf(s);
  return e == BlockFileError::kNone ? "invalid" : std::string(BlockFileErrorName(e));
}

}  // namespace

Result<std::vector<CacheFileVerdict>> VerifyCacheFolder(const std::string& dir,
                                                        const CacheVerifyOptions& opts) {
  Env* env = Env::Default();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<disk::DiskIndex> index, OpenCacheIndex(dir));
  KVTIER_ASSIGN_OR_RETURN(FolderScan scan, ScanCacheFolder(dir));
  std::vector<CacheFileVerdict> out;
  KVTIER_ASSIGN_OR_RETURN(std::string integrity, index->IntegrityCheck());
  if (integrity != "ok") {
    out.push_back({disk::FolderLayout(dir).IndexPath(), "index_corrupt", integrity});
  }
  std::unordered_map<BlockKey, disk::IndexRow, BlockKeyHash> rows;
  KVTIER_RETURN_IF_ERROR(index->ForEachRow([&](const disk::IndexRow& r) { rows[r.key] = r; }));

  for (const FolderScan::File& f : scan.blocks) {
    CacheFileVerdict v{f.path, "", ""};
    const BlockKey& key = *f.key;
    auto bytes = env->ReadWholeFile(f.path, kMaxBlockFileBytes);
    if (!bytes.ok()) {
      v.reason = bytes.status().IsNotFound() ? "not_found" : "io_error";
      v.message = bytes.status().message();
      out.push_back(std::move(v));
      continue;
    }
    DecodeOptions d;
    d.expected_key = &key;
    d.expected_signature = opts.signature;
    d.expected_layout = opts.layout;
    auto block = DecodeBlock(*bytes, d);
    auto row = rows.find(key);
    if (!block.ok()) {
      v.reason = ReasonOf(block.status());
      v.message = block.status().message();
    } else if (row == rows.end()) {
      v.reason = "no_index_row";
      v.message = "valid block with no index row (the next reconcile adopts it)";
    } else if (row->second.size != bytes->size()) {
      v.reason = "size_mismatch";
      v.message = "index row says " + std::to_string(row->second.size) + " bytes, file has " +
                  std::to_string(bytes->size());
    } else if (row->second.header_hash != 0 &&
               row->second.header_hash != disk::HeaderHash(*bytes)) {
      v.reason = "header_changed";
      v.message = "the header differs from the one that was stored";
    }
    if (row != rows.end()) rows.erase(row);
    out.push_back(std::move(v));
  }
  for (const FolderScan::File& f : scan.foreign) {
    out.push_back({f.path, "foreign_file", "not a block file of this cache"});
  }
  std::vector<BlockKey> missing;
  for (const auto& [key, row] : rows) missing.push_back(key);
  std::sort(missing.begin(), missing.end());
  for (const BlockKey& key : missing) {
    out.push_back({disk::FolderLayout(dir).BlockPath(key), "missing_file",
                   "indexed block whose file is gone"});
  }
  return out;
}

}  // namespace kvtier::cli
