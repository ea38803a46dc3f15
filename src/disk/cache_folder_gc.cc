// CacheFolder::Gc: `kvtier gc` in one walk whose memory does not grow with
// the folder (include/kvtier/cache_folder.h): quarantine/, then
// ForEachFile's walk of blocks/ one subfolder at a time, holding that
// subfolder's index rows (RowsWithPrefix, about 1/256 of the index); then
// the budget, the index read oldest access first in bounded batches.
#include <algorithm>
#include <functional>
#include <tuple>
#include <unordered_map>

#include "core/saturating_time.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/quarantine.h"
#include "disk/reconcile.h"
#include "kvtier/cache_folder.h"

namespace kvtier {

namespace {

// Rows deleted (and orphans adopted) per index transaction.
constexpr size_t kRowChunk = 256;

// A valid block file with no row, in a dry run: it is not adopted, so the
// budget pass must see it beside the rows. Orphans are what a writer killed
// between its file and its row leaves: few.
struct DryOrphan {
  int64_t last_access_us = 0;
  BlockKey key;
  uint64_t allocated = 0;
  uint64_t bytes = 0;
  bool operator<(const DryOrphan& o) const {
    return std::tie(last_access_us, key) < std::tie(o.last_access_us, o.key);
  }
};

}  // namespace

Result<uint64_t> CacheFolder::Gc(const CacheGcRequest& req, bool dry_run,
                                 const std::function<void(const CacheGcItem&)>& fn) {
  if (req.retention_seconds && *req.retention_seconds <= 0) {
    return Status::InvalidArgument("CacheGcRequest.retention_seconds: must be > 0");
  }
  if (!dry_run && options_.access != CacheFolderAccess::kReadWrite) {
    return Status::FailedPrecondition("gc: " + options_.dir + " was opened read-only");
  }
  disk::FolderLayout layout(options_.dir);
  // Saturating: a retention longer than the clock can reach keeps all.
  const std::optional<int64_t> cutoff =
      req.retention_seconds ? std::optional<int64_t>(CutoffBefore(
                                  env_->NowUnixMicros(), SecondsToMicros(*req.retention_seconds)))
                            : std::nullopt;
  KVTIER_ASSIGN_OR_RETURN(std::vector<disk::SignatureTotals> sigs, index_->PerSignature());
  auto signature_of = [&](int64_t sig_id) -> const std::string* {
    for (const disk::SignatureTotals& t : sigs) {
      if (t.sig_id == sig_id) return &t.signature;
    }
    return nullptr;
  };
  // Why a block goes before any budget, or nullptr if it stays.
  auto verdict = [&](int64_t created_at_us, const std::string* signature) -> const char* {
    if (cutoff && created_at_us < *cutoff) return "expired";
    if (req.keep_signature && (signature == nullptr || *signature != *req.keep_signature)) {
      return "other_layout";
    }
    return nullptr;
  };

  uint64_t freed = 0;
  Status failed = Status::Ok();
  // The item, removed first unless this is a dry run, then handed to fn.
  auto emit = [&](const CacheGcItem& item) -> Status {
    if (!dry_run) {
      Status s = disk::RemoveTree(env_, item.path);  // gone already: nothing freed
      if (!s.ok() && !s.IsNotFound()) return s.WithContext("gc");
      if (s.ok()) freed += item.bytes;
    }
    fn(item);
    return Status::Ok();
  };
  // Rows of removed blocks, deleted a chunk at a time after their files. On
  // a full disk a commit may find no room for the index's journal: the rows
  // wait for the next chunk's unlinks and commit with it.
  std::vector<BlockKey> doomed_rows;
  auto commit_rows = [&](bool last) -> Status {
    if (dry_run || doomed_rows.empty() || (!last && doomed_rows.size() < kRowChunk)) {
      return Status::Ok();
    }
    KVTIER_RETURN_IF_ERROR(EnsureWritableIndex().WithContext("gc"));
    Status s = index_->Delete(doomed_rows).status();
    if (s.ok()) {
      doomed_rows.clear();
    } else if (last || !s.IsResourceExhausted()) {
      return s.WithContext("gc");
    }
    return Status::Ok();
  };
  // Valid block files with no row that stay: adopted (so the index, and
  // every tier's limit, counts them), or in a dry run remembered for the
  // budget pass.
  std::vector<disk::IndexRow> adopt;
  std::vector<DryOrphan> dry_orphans;
  // Like the rows, a chunk at a time, and only after the walk's unlinks
  // before it (a full disk: the index needs room to grow).
  auto adopt_now = [&](bool last) -> Status {
    if (adopt.empty() || (!last && adopt.size() < kRowChunk)) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(EnsureWritableIndex().WithContext("gc"));
    return AdoptInPlace(&adopt);
  };
  // Allocated bytes of the blocks that stay.
  uint64_t total = 0;

  // The rows of one prefix, while its subfolder is walked; `seen` marks
  // those whose file turned up.
  struct PrefixRows {
    std::unordered_map<BlockKey, std::pair<disk::IndexRow, bool>, BlockKeyHash> rows;
  };
  PrefixRows current;
  int loaded = -1;  // the prefix `current` holds; prefixes below it are done
  // Finishes every prefix below `upto` (rows with no file: missing_file),
  // loading none past it.
  auto finish_below = [&](int upto) -> Status {
    while (loaded < upto) {
      if (loaded >= 0) {
        std::vector<BlockKey> missing;
        for (const auto& [key, row_seen] : current.rows) {
          if (!row_seen.second) missing.push_back(key);
        }
        std::sort(missing.begin(), missing.end());
        for (const BlockKey& k : missing) {
          KVTIER_RETURN_IF_ERROR(emit({layout.BlockPath(k), "missing_file", 0}));
          if (!dry_run) doomed_rows.push_back(k);
        }
        current.rows.clear();
        KVTIER_RETURN_IF_ERROR(commit_rows(false));
        KVTIER_RETURN_IF_ERROR(adopt_now(false));
      }
      ++loaded;
      if (loaded > 255) break;
      KVTIER_ASSIGN_OR_RETURN(std::vector<disk::IndexRow> rows,
                              index_->RowsWithPrefix(static_cast<uint8_t>(loaded)));
      for (disk::IndexRow& r : rows) current.rows.emplace(r.key, std::make_pair(r, false));
    }
    return Status::Ok();
  };

  auto on_block = [&](const CacheFolderScan::File& f) -> Status {
    KVTIER_RETURN_IF_ERROR(finish_below(f.key->bytes[0]));
    auto it = current.rows.find(*f.key);
    if (it != current.rows.end()) {
      it->second.second = true;
      const disk::IndexRow& r = it->second.first;
      if (const char* why = verdict(r.created_at_us, signature_of(r.sig_id))) {
        KVTIER_RETURN_IF_ERROR(emit({f.path, why, r.size}));
        if (!dry_run) doomed_rows.push_back(r.key);
      } else {
        total += f.allocated_bytes;
      }
      return Status::Ok();
    }
    // No row: a writer killed between its file and its row.
    auto info = env_->Stat(f.path);
    if (!info.ok()) return Status::Ok();  // gone meanwhile
    KVTIER_ASSIGN_OR_RETURN(std::optional<disk::BlockFileHeader> h,
                            disk::ReadBlockFileHeader(env_, f.path, *f.key, *info));
    if (!h) return emit({f.path, "invalid_orphan", f.bytes});
    if (const char* why = verdict(h->row.created_at_us, &h->signature)) {
      return emit({f.path, why, h->row.size});
    }
    total += info->allocated_bytes;
    if (dry_run) {
      dry_orphans.push_back({h->row.last_access_us, *f.key, info->allocated_bytes, h->row.size});
      return Status::Ok();
    }
    KVTIER_ASSIGN_OR_RETURN(std::optional<disk::IndexRow> row,
                            disk::ReadAdoptableRow(env_, index_.get(), f.path, *f.key, *info));
    if (row) adopt.push_back(*row);
    return adopt_now(false);
  };

  // Quarantined files first: they free space without writing the index.
  if (req.quarantine) {
    auto names = env_->ListDir(layout.QuarantineDir());
    if (!names.ok() && !names.status().IsNotFound()) return names.status();
    if (names.ok()) {
      std::sort(names->begin(), names->end());
      for (const std::string& name : *names) {
        const std::string path = JoinPath(layout.QuarantineDir(), name);
        auto info = env_->Stat(path);
        const uint64_t bytes = info.ok() && info->type == FileType::kRegular ? info->size : 0;
        KVTIER_RETURN_IF_ERROR(emit({path, "quarantined", bytes}));
      }
    }
  }
  using Kind = CacheFolderScan::Kind;
  Status walk = ForEachFile([&](Kind kind, const CacheFolderScan::File& f) {
    if (!failed.ok()) return;
    switch (kind) {
      case Kind::kBlock:
        failed = on_block(f);
        break;
      case Kind::kTemp:
        if (req.dead_temps && !env_->ProcessAlive(f.pid)) {
          failed = emit({f.path, "dead_temp", f.bytes});
        }
        break;
      case Kind::kForeign:
        failed = emit({f.path, "foreign", f.bytes});
        break;
      case Kind::kQuarantine:
        break;  // above
    }
  });
  KVTIER_RETURN_IF_ERROR(walk);
  KVTIER_RETURN_IF_ERROR(failed);
  KVTIER_RETURN_IF_ERROR(finish_below(256));
  KVTIER_RETURN_IF_ERROR(commit_rows(true));
  KVTIER_RETURN_IF_ERROR(adopt_now(true));

  if (!req.max_bytes || total <= *req.max_bytes) return dry_run ? 0 : freed;
  const uint64_t budget = *req.max_bytes;
  const uint64_t over = total - budget;
  // The budget: least recently accessed first, every signature, until the
  // blocks that stay take at most `budget` bytes.
  auto evict = [&](const BlockKey& key, uint64_t bytes, uint64_t allocated) -> Status {
    KVTIER_RETURN_IF_ERROR(emit({layout.BlockPath(key), "over_budget", bytes}));
    total -= std::min(total, allocated);
    if (options_.progress) {
      const uint64_t left = total > budget ? total - budget : 0;  // never above `over`
      options_.progress("bytes over the budget", over - left, over);
    }
    return Status::Ok();
  };
  if (dry_run) {
    // The index oldest first, the orphans merged in; rows removed above are
    // passed over as the walk decided them (their files may still be there).
    std::sort(dry_orphans.begin(), dry_orphans.end());
    size_t next_orphan = 0;
    auto orphans_before = [&](const DryOrphan* bound) -> Status {
      while (total > budget && next_orphan < dry_orphans.size() &&
             (bound == nullptr || dry_orphans[next_orphan] < *bound)) {
        const DryOrphan& o = dry_orphans[next_orphan++];
        KVTIER_RETURN_IF_ERROR(evict(o.key, o.bytes, o.allocated));
      }
      return Status::Ok();
    };
    Status by_access = index_->ForEachRowByAccess([&](const disk::IndexRow& r) {
      if (!failed.ok() || total <= budget) return;
      const DryOrphan bound{r.last_access_us, r.key, 0, 0};
      failed = orphans_before(&bound);
      if (!failed.ok() || total <= budget) return;
      if (verdict(r.created_at_us, signature_of(r.sig_id)) != nullptr) return;
      auto info = env_->Stat(layout.BlockPath(r.key));
      if (!info.ok() || info->type != FileType::kRegular) return;  // missing_file above
      failed = evict(r.key, r.size, info->allocated_bytes);
    });
    KVTIER_RETURN_IF_ERROR(by_access);
    KVTIER_RETURN_IF_ERROR(failed);
    KVTIER_RETURN_IF_ERROR(orphans_before(nullptr));
    return 0;
  }
  // Applying: what stays is all in the index now. Oldest rows a chunk at a
  // time: their files, then their rows.
  while (total > budget) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<disk::IndexRow> oldest, index_->LruRows(kRowChunk));
    if (oldest.empty()) break;
    for (const disk::IndexRow& r : oldest) {
      if (total <= budget) break;
      doomed_rows.push_back(r.key);
      auto info = env_->Stat(layout.BlockPath(r.key));
      if (!info.ok() || info->type != FileType::kRegular) continue;  // gone meanwhile
      KVTIER_RETURN_IF_ERROR(evict(r.key, r.size, info->allocated_bytes));
    }
    // Every chunk commits: LruRows must not hand the same rows back.
    KVTIER_RETURN_IF_ERROR(commit_rows(true));
  }
  return freed;
}

}  // namespace kvtier
