// CacheFolder::Verify: every block file read whole and decoded with every
// check of docs/block-format.md, the key its name gives and, if asked, a
// signature and a layout; then compared with its index row (size and header
// hash). Foreign entries and rows without a file are reported too.
#include <algorithm>
#include <optional>
#include <span>
#include <unordered_map>

#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/header_hash.h"
#include "kvtier/block_file.h"
#include "kvtier/cache_folder.h"

namespace kvtier {
namespace {

// The 8-byte length, the largest header and the largest block a layout may
// describe (4 GiB).
constexpr uint64_t kMaxBlockFileBytes = 8 + kMaxBlockHeaderBytes + (uint64_t{4} << 30);

std::string ReasonOf(const Status& s) {
  BlockFileError e = BlockFileErrorOf(s);
  return e == BlockFileError::kNone ? "invalid" : std::string(BlockFileErrorName(e));
}

}  // namespace

Result<std::vector<CacheFileVerdict>> CacheFolder::Verify(const CacheVerifyOptions& opts) {
  disk::FolderLayout layout(options_.dir);
  std::vector<CacheFileVerdict> out;
  KVTIER_ASSIGN_OR_RETURN(std::string integrity, index_->IntegrityCheck());
  if (integrity != "ok") out.push_back({layout.IndexPath(), "index_corrupt", integrity});
  std::unordered_map<BlockKey, disk::IndexRow, BlockKeyHash> rows;
  KVTIER_RETURN_IF_ERROR(index_->ForEachRow([&](const disk::IndexRow& r) { rows[r.key] = r; }));
  KVTIER_ASSIGN_OR_RETURN(CacheFolderScan scan, Scan());

  // Other processes may store and evict while this runs, so a row and a file
  // read at different moments can disagree without anything being wrong:
  // each disagreement is checked again against a fresh read of the row.
  auto compare = [](const std::optional<disk::IndexRow>& row, std::span<const std::byte> file,
                    CacheFileVerdict* v) {
    v->reason.clear();
    v->message.clear();
    if (!row) {
      v->reason = "no_index_row";
      v->message = "valid block with no index row (the next reconcile adopts it)";
    } else if (row->size != file.size()) {
      v->reason = "size_mismatch";
      v->message = "index row says " + std::to_string(row->size) + " bytes, file has " +
                   std::to_string(file.size());
    } else if (row->header_hash != 0 && row->header_hash != disk::HeaderHash(file)) {
      v->reason = "header_changed";
      v->message = "the header differs from the one that was stored";
    }
  };
  for (const CacheFolderScan::File& f : scan.blocks) {
    CacheFileVerdict v{f.path, "", ""};
    const BlockKey& key = *f.key;
    auto row = rows.find(key);
    std::optional<disk::IndexRow> seen;
    if (row != rows.end()) {
      seen = row->second;
      rows.erase(row);
    }
    auto bytes = env_->ReadWholeFile(f.path, kMaxBlockFileBytes);
    if (!bytes.ok()) {
      if (bytes.status().IsNotFound()) continue;  // evicted since the scan
      v.reason = "io_error";
      v.message = bytes.status().message();
      out.push_back(std::move(v));
      continue;
    }
    DecodeOptions d;
    d.expected_key = &key;
    d.expected_signature = opts.signature;
    d.expected_layout = opts.layout;
    auto block = DecodeBlock(*bytes, d);
    if (!block.ok()) {
      v.reason = ReasonOf(block.status());
      v.message = block.status().message();
    } else {
      compare(seen, *bytes, &v);
      if (!v.reason.empty()) {
        KVTIER_ASSIGN_OR_RETURN(std::optional<disk::IndexRow> fresh, index_->Lookup(key));
        compare(fresh, *bytes, &v);
      }
    }
    out.push_back(std::move(v));
  }
  for (const CacheFolderScan::File& f : scan.foreign) {
    out.push_back({f.path, "foreign_file", "not a block file of this cache"});
  }
  std::vector<BlockKey> missing;
  for (const auto& [key, row] : rows) missing.push_back(key);
  std::sort(missing.begin(), missing.end());
  for (const BlockKey& key : missing) {
    // Stored after the scan (file first, then row), or evicted since the
    // rows were read (then the row is gone too).
    if (env_->Stat(layout.BlockPath(key)).ok()) continue;
    KVTIER_ASSIGN_OR_RETURN(std::optional<disk::IndexRow> fresh, index_->Lookup(key));
    if (!fresh) continue;
    out.push_back({layout.BlockPath(key), "missing_file", "indexed block whose file is gone"});
  }
  return out;
}

}  // namespace kvtier
