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
  std::vector<CacheFileVerdict> out;
  KVTIER_RETURN_IF_ERROR(
      VerifyEach(opts, [&](CacheFileVerdict v) { out.push_back(std::move(v)); }));
  return out;
}

Status CacheFolder::VerifyEach(const CacheVerifyOptions& opts,
                               const std::function<void(CacheFileVerdict)>& fn) {
  disk::FolderLayout layout(options_.dir);
  KVTIER_ASSIGN_OR_RETURN(std::string integrity, index_->IntegrityCheck());
  if (integrity != "ok") fn({layout.IndexPath(), "index_corrupt", integrity});

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
  // The rows of one key prefix (one blocks/ subfolder) at a time, in
  // prefix order as the walk goes; the rows no file claimed are kept (their
  // keys only) for the missing-file check at the end.
  constexpr int kPrefixes = 256;
  int prefix = -1;
  std::unordered_map<BlockKey, disk::IndexRow, BlockKeyHash> rows;
  std::vector<BlockKey> unclaimed;
  auto advance_to = [&](int next) -> Status {
    while (prefix < next) {
      for (const auto& [key, row] : rows) unclaimed.push_back(key);
      rows.clear();
      if (++prefix >= kPrefixes) break;
      KVTIER_ASSIGN_OR_RETURN(std::vector<disk::IndexRow> got,
                              index_->RowsWithPrefix(static_cast<uint8_t>(prefix)));
      for (disk::IndexRow& r : got) rows.emplace(r.key, std::move(r));
    }
    return Status::Ok();
  };
  std::vector<CacheFileVerdict> foreign;
  Status failed;
  Status walked = ForEachFile([&](CacheFolderScan::Kind kind, const CacheFolderScan::File& f) {
    if (!failed.ok()) return;
    if (kind == CacheFolderScan::Kind::kForeign) {
      foreign.push_back({f.path, "foreign_file", "not a block file of this cache"});
      return;
    }
    if (kind != CacheFolderScan::Kind::kBlock) return;
    const BlockKey& key = *f.key;
    if (Status s = advance_to(key.bytes[0]); !s.ok()) {
      failed = s;
      return;
    }
    CacheFileVerdict v{f.path, "", ""};
    auto row = rows.find(key);
    std::optional<disk::IndexRow> seen;
    if (row != rows.end()) {
      seen = row->second;
      rows.erase(row);
    }
    auto bytes = env_->ReadWholeFile(f.path, kMaxBlockFileBytes);
    if (!bytes.ok()) {
      if (bytes.status().IsNotFound()) return;  // evicted since the walk listed it
      v.reason = "io_error";
      v.message = bytes.status().message();
      fn(std::move(v));
      return;
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
        Result<std::optional<disk::IndexRow>> fresh = index_->Lookup(key);
        if (!fresh.ok()) {
          failed = fresh.status();
          return;
        }
        compare(*fresh, *bytes, &v);
      }
    }
    fn(std::move(v));
  });
  KVTIER_RETURN_IF_ERROR(failed);
  KVTIER_RETURN_IF_ERROR(walked);
  KVTIER_RETURN_IF_ERROR(advance_to(kPrefixes));
  for (CacheFileVerdict& v : foreign) fn(std::move(v));
  std::sort(unclaimed.begin(), unclaimed.end());
  for (const BlockKey& key : unclaimed) {
    // Stored after the walk passed its subfolder (file first, then row), or
    // evicted since its rows were read (then the row is gone too).
    if (env_->Stat(layout.BlockPath(key)).ok()) continue;
    KVTIER_ASSIGN_OR_RETURN(std::optional<disk::IndexRow> fresh, index_->Lookup(key));
    if (!fresh) continue;
    fn({layout.BlockPath(key), "missing_file", "indexed block whose file is gone"});
  }
  return Status::Ok();
}

}  // namespace kvtier
