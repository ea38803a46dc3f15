// CacheFolder: opening, listing, scanning and garbage collection
// (include/kvtier/cache_folder.h). Verify is in cache_folder_verify.cc.
#include "kvtier/cache_folder.h"

#include <algorithm>
#include <tuple>
#include <unordered_set>

#include "core/saturating_time.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/quarantine.h"

namespace kvtier {

namespace {

bool IsFolderOrLinkToOne(Env* env, const std::string& path) {
  Result<FileInfo> info = env->Stat(path);
  if (!info.ok()) return false;
  if (info->type == FileType::kDirectory) return true;
  if (info->type != FileType::kSymlink) return false;
  // Env::Stat does not follow a final symlink; through "link/." it resolves
  // every component.
  Result<FileInfo> target = env->Stat(JoinPath(path, "."));
  return target.ok() && target->type == FileType::kDirectory;
}

}  // namespace

bool CacheFolder::Exists(Env* env, const std::string& dir) {
  if (!IsFolderOrLinkToOne(env, dir)) return false;
  disk::FolderLayout layout(dir);
  auto idx = env->Stat(layout.IndexPath());
  auto blocks = env->Stat(layout.BlocksDir());
  return (idx.ok() && idx->type == FileType::kRegular) ||
         (blocks.ok() && blocks->type == FileType::kDirectory);
}

Result<std::unique_ptr<CacheFolder>> CacheFolder::Open(const CacheFolderOptions& options,
                                                       Env* env) {
  if (!IsFolderOrLinkToOne(env, options.dir)) {
    return Status::NotFound(options.dir + " is not a folder");
  }
  disk::IndexOptions o;
  o.create_if_missing = false;
  o.read_only = options.access == CacheFolderAccess::kReadOnly;
  o.busy_timeout_ms = options.busy_timeout_ms;
  auto index = disk::DiskIndex::Open(disk::FolderLayout(options.dir).IndexPath(), o);
  if (!index.ok()) {
    if (!index.status().IsNotFound()) return index.status();
    // SQLite says "cannot open" both for a missing file and for one the
    // caller may not read; tell them apart.
    const std::string path = disk::FolderLayout(options.dir).IndexPath();
    Result<FileInfo> info = env->Stat(path);
    if (info.ok()) {
      return Status::IOError(path + ": exists but cannot be opened (permissions?)", 0);
    }
    if (!info.status().IsNotFound()) return info.status();
    return Status::NotFound(options.dir + " is not a kvtier cache folder (no index.sqlite)");
  }
  return std::unique_ptr<CacheFolder>(new CacheFolder(options, env, std::move(index).value()));
}

CacheFolder::CacheFolder(const CacheFolderOptions& options, Env* env,
                         std::unique_ptr<disk::DiskIndex> index)
    : options_(options), env_(env), index_(std::move(index)) {}

CacheFolder::~CacheFolder() = default;

Result<std::vector<CacheFolderEntry>> CacheFolder::ListEntries() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<disk::SignatureTotals> sigs, index_->PerSignature());
  std::vector<CacheFolderEntry> out;
  Status s = index_->ForEachRow([&](const disk::IndexRow& r) {
    CacheFolderEntry e;
    e.key = r.key;
    for (const disk::SignatureTotals& t : sigs) {
      if (t.sig_id == r.sig_id) e.signature = t.signature;
    }
    e.bytes = r.size;
    e.created_at_us = r.created_at_us;
    e.last_access_us = r.last_access_us;
    out.push_back(std::move(e));
  });
  KVTIER_RETURN_IF_ERROR(s);
  return out;
}

Result<std::vector<SignatureUsage>> CacheFolder::PerSignature() {
  KVTIER_ASSIGN_OR_RETURN(std::vector<disk::SignatureTotals> sigs, index_->PerSignature());
  std::vector<SignatureUsage> out;
  out.reserve(sigs.size());
  for (disk::SignatureTotals& t : sigs) {
    out.push_back({std::move(t.signature), t.blocks, t.bytes, false});
  }
  return out;
}

Result<CacheFolderScan> CacheFolder::Scan() {
  disk::FolderLayout layout(options_.dir);
  CacheFolderScan scan;
  auto file_of = [&](const std::string& path, const Result<FileInfo>& info) {
    CacheFolderScan::File f;
    f.path = path;
    if (info.ok()) {
      f.bytes = info->type == FileType::kRegular ? info->size : 0;
      f.mtime_unix_s = info->mtime_unix_s;
    }
    return f;
  };
  auto top = env_->ListDir(layout.BlocksDir());
  if (!top.ok() && !top.status().IsNotFound()) return top.status();
  if (top.ok()) {
    std::sort(top->begin(), top->end());
    for (const std::string& sub : *top) {
      const std::string sub_path = JoinPath(layout.BlocksDir(), sub);
      auto info = env_->Stat(sub_path);
      auto prefix_key = BlockKey::FromHex(sub + std::string(62, '0'));
      if (sub.size() != 2 || !prefix_key || disk::HexByte(prefix_key->bytes[0]) != sub ||
          !info.ok() || info->type != FileType::kDirectory) {
        scan.foreign.push_back(file_of(sub_path, info));
        continue;
      }
      KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env_->ListDir(sub_path));
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        const std::string path = JoinPath(sub_path, name);
        auto finfo = env_->Stat(path);
        CacheFolderScan::File f = file_of(path, finfo);
        const bool regular = finfo.ok() && finfo->type == FileType::kRegular;
        disk::ParsedEntry e = disk::ParseBlockDirEntry(name, prefix_key->bytes[0]);
        if (e.kind == disk::EntryKind::kBlock && regular) {
          f.key = e.key;
          scan.blocks.push_back(std::move(f));
        } else if (e.kind == disk::EntryKind::kTemp && regular) {
          f.key = e.key;
          f.pid = e.pid;
          scan.temps.push_back(std::move(f));
        } else {
          scan.foreign.push_back(std::move(f));
        }
      }
    }
  }
  auto q = env_->ListDir(layout.QuarantineDir());
  if (!q.ok() && !q.status().IsNotFound()) return q.status();
  if (q.ok()) {
    std::sort(q->begin(), q->end());
    for (const std::string& name : *q) {
      const std::string path = JoinPath(layout.QuarantineDir(), name);
      scan.quarantine.push_back(file_of(path, env_->Stat(path)));
    }
  }
  return scan;
}

Result<std::vector<CacheGcItem>> CacheFolder::PlanGc(const CacheGcRequest& req) {
  if (req.retention_seconds && *req.retention_seconds <= 0) {
    return Status::InvalidArgument("CacheGcRequest.retention_seconds: must be > 0");
  }
  disk::FolderLayout layout(options_.dir);
  KVTIER_ASSIGN_OR_RETURN(std::vector<CacheFolderEntry> entries, ListEntries());
  KVTIER_ASSIGN_OR_RETURN(CacheFolderScan scan, Scan());
  std::vector<CacheGcItem> plan;
  std::unordered_set<BlockKey, BlockKeyHash> gone;
  uint64_t total = 0;
  for (const CacheFolderEntry& e : entries) total += e.bytes;
  std::unordered_set<BlockKey, BlockKeyHash> on_disk;
  for (const auto& f : scan.blocks) on_disk.insert(*f.key);
  auto remove = [&](const CacheFolderEntry& e, const char* reason) {
    if (!gone.insert(e.key).second) return;
    const bool has_file = on_disk.count(e.key) > 0;
    plan.push_back(
        {layout.BlockPath(e.key), has_file ? reason : "missing_file", has_file ? e.bytes : 0});
    total -= std::min(total, e.bytes);
  };
  for (const CacheFolderEntry& e : entries) {
    if (on_disk.count(e.key) == 0) remove(e, "missing_file");
  }
  if (req.retention_seconds) {
    // Saturating: a retention longer than the clock can reach keeps all.
    const int64_t cutoff =
        CutoffBefore(env_->NowUnixMicros(), SecondsToMicros(*req.retention_seconds));
    for (const CacheFolderEntry& e : entries) {
      if (e.created_at_us < cutoff) remove(e, "expired");
    }
  }
  if (req.keep_signature) {
    for (const CacheFolderEntry& e : entries) {
      if (e.signature != *req.keep_signature) remove(e, "other_layout");
    }
  }
  if (req.max_bytes) {
    std::vector<const CacheFolderEntry*> lru;
    for (const CacheFolderEntry& e : entries) lru.push_back(&e);
    std::sort(lru.begin(), lru.end(), [](const CacheFolderEntry* a, const CacheFolderEntry* b) {
      return std::tie(a->last_access_us, a->key) < std::tie(b->last_access_us, b->key);
    });
    for (const CacheFolderEntry* e : lru) {
      if (total <= *req.max_bytes) break;
      remove(*e, "over_budget");
    }
  }
  if (req.quarantine) {
    for (const auto& f : scan.quarantine) plan.push_back({f.path, "quarantined", f.bytes});
  }
  if (req.dead_temps) {
    for (const auto& f : scan.temps) {
      if (!env_->ProcessAlive(f.pid)) plan.push_back({f.path, "dead_temp", f.bytes});
    }
  }
  for (const auto& f : scan.foreign) plan.push_back({f.path, "foreign", f.bytes});
  return plan;
}

Result<uint64_t> CacheFolder::ApplyGc(const std::vector<CacheGcItem>& plan) {
  if (options_.access != CacheFolderAccess::kReadWrite) {
    return Status::FailedPrecondition("gc: " + options_.dir + " was opened read-only");
  }
  uint64_t freed = 0;
  for (const CacheGcItem& item : plan) {
    auto info = env_->Stat(item.path);
    Status s = Status::Ok();
    if (info.ok() && info->type == FileType::kDirectory) {
      s = disk::RemoveTree(env_, item.path);
    } else if (info.ok()) {
      s = env_->RemoveFile(item.path);
    }
    if (!s.ok() && !s.IsNotFound()) return s.WithContext("gc");
    if (item.reason == "over_budget" || item.reason == "expired" || item.reason == "other_layout" ||
        item.reason == "missing_file") {
      // The row goes after the file: a crash between leaves a row without a
      // file (a miss), never an orphan file.
      std::string name = item.path.substr(item.path.rfind('/') + 1);
      auto key = BlockKey::FromHex(name.substr(0, 64));
      if (key) KVTIER_RETURN_IF_ERROR(index_->Delete(std::span<const BlockKey>(&*key, 1)).status());
    }
    if (s.ok()) freed += item.bytes;
  }
  return freed;
}

}  // namespace kvtier
