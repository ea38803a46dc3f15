// CacheFolder: opening, listing, scanning and garbage collection
// (include/kvtier/cache_folder.h). Verify is in cache_folder_verify.cc.
#include "kvtier/cache_folder.h"

#include <algorithm>
#include <unordered_set>

#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/folder_lock.h"
#include "disk/full_disk_open.h"
#include "disk/index_file.h"
#include "disk/quarantine.h"
#include "disk/reconcile.h"

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
  // An index.sqlite of any kind: one that is not a regular file is for
  // Open() to name.
  return idx.ok() || (blocks.ok() && blocks->type == FileType::kDirectory);
}

Result<std::unique_ptr<CacheFolder>> CacheFolder::Open(const CacheFolderOptions& options,
                                                       Env* env) {
  if (!IsFolderOrLinkToOne(env, options.dir)) {
    return Status::NotFound(options.dir + " is not a folder");
  }
  const disk::FolderLayout layout(options.dir);
  const std::string path = layout.IndexPath();
  {
    Result<FileInfo> info = env->Stat(path);
    if (!info.ok()) {
      if (!info.status().IsNotFound()) return info.status();
      return Status::NotFound(options.dir + " is not a kvtier cache folder (no index.sqlite)");
    }
  }
  const bool writer = options.access == CacheFolderAccess::kReadWrite;
  const uint64_t wait_us = uint64_t{options.busy_timeout_ms} * 1000;
  std::unique_ptr<disk::FolderLock> lock;
  if (writer) {
    KVTIER_ASSIGN_OR_RETURN(
        disk::FolderLock shared,
        disk::FolderLock::Acquire(env, layout, FileLock::kShared, 0600, wait_us));
    lock = std::make_unique<disk::FolderLock>(std::move(shared));
  }
  disk::IndexOptions o;
  o.create_if_missing = false;
  o.read_only = !writer;
  o.busy_timeout_ms = options.busy_timeout_ms;
  // A symlink, folder or FIFO never reaches SQLite (disk/index_file.h).
  Status files = disk::CheckIndexFiles(env, layout);
  auto index =
      files.ok() ? disk::DiskIndex::Open(path, o) : Result<std::unique_ptr<disk::DiskIndex>>(files);
  if (!index.ok()) index = disk::NameIndexError(layout, index.status());
  if (index.ok() && writer) {
    // gc first checks the pages (PRAGMA quick_check: O(pages), no index
    // cross-check): a damaged page SQLite still opens would otherwise fail
    // every run, and no orphan would ever be adopted.
    Result<std::string> check = (*index)->QuickCheck();
    if (!check.ok() && check.status().IsCorruption()) {
      index = disk::NameIndexError(layout, check.status());
    } else if (check.ok() && *check != "ok") {
      index = Status::Corruption("index " + path +
                                 " fails PRAGMA quick_check: " + check->substr(0, 200));
    }
  }
  if (!index.ok() && index.status().IsCorruption() && writer) {
    // As a DiskTier does: set it aside and start anew, only with the
    // folder to ourselves; ApplyGc adopts the block files into the new one.
    lock->Release();
    auto sole = disk::FolderLock::Acquire(env, layout, FileLock::kExclusive, 0600, 0);
    if (!sole.ok()) {
      return Status::Unavailable(index.status().message() +
                                 "; other processes have the folder open: it is set aside and "
                                 "rebuilt by the first writer after they close it");
    }
    disk::DiskCounters counters;
    disk::Quarantine quarantine(env, &layout, 0700, &counters);
    KVTIER_RETURN_IF_ERROR(disk::SetAsideIndexFiles(env, layout, &quarantine));
    o.create_if_missing = true;
    index = disk::DiskIndex::Open(path, o);
    sole->Release();
    KVTIER_ASSIGN_OR_RETURN(
        disk::FolderLock shared,
        disk::FolderLock::Acquire(env, layout, FileLock::kShared, 0600, wait_us));
    *lock = std::move(shared);
  }
  bool read_only_for_now = false;
  if (!index.ok() && writer && !index.status().IsCorruption() && !index.status().IsNotFound()) {
    // SQLite cannot make its -shm or -wal file on a full disk: read the
    // index for the plan; ApplyGc opens it for writing once it has removed
    // files (it removes before it writes).
    if (disk::NearlyFull(env, options.dir)) {
      disk::IndexOptions ro = o;
      ro.read_only = true;
      auto readable = disk::DiskIndex::Open(path, ro);
      if (readable.ok()) {
        index = std::move(readable);
        read_only_for_now = true;
      }
    }
  }
  if (!index.ok()) {
    if (!index.status().IsNotFound()) return index.status();
    // SQLite says "cannot open" both for a missing file and for one the
    // caller may not read; tell them apart.
    Result<FileInfo> info = env->Stat(path);
    if (info.ok()) {
      return Status::IOError(path + ": exists but cannot be opened (permissions?)", 0);
    }
    if (!info.status().IsNotFound()) return info.status();
    return Status::NotFound(options.dir + " is not a kvtier cache folder (no index.sqlite)");
  }
  std::unique_ptr<CacheFolder> folder(
      new CacheFolder(options, env, std::move(index).value(), std::move(lock)));
  folder->index_read_only_ = read_only_for_now;
  return folder;
}

Status CacheFolder::EnsureWritableIndex() {
  if (!index_read_only_) return Status::Ok();
  disk::IndexOptions o;
  o.create_if_missing = false;
  o.busy_timeout_ms = options_.busy_timeout_ms;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<disk::DiskIndex> writable,
                          disk::DiskIndex::Open(disk::FolderLayout(options_.dir).IndexPath(), o));
  index_ = std::move(writable);
  index_read_only_ = false;
  return Status::Ok();
}

CacheFolder::CacheFolder(const CacheFolderOptions& options, Env* env,
                         std::unique_ptr<disk::DiskIndex> index,
                         std::unique_ptr<disk::FolderLock> lock)
    : options_(options), env_(env), index_(std::move(index)), lock_(std::move(lock)) {}

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

Status CacheFolder::ForEachEntryByAccess(const std::function<void(const CacheFolderEntry&)>& fn) {
  KVTIER_ASSIGN_OR_RETURN(std::vector<disk::SignatureTotals> sigs, index_->PerSignature());
  CacheFolderEntry e;
  return index_->ForEachRowByAccess([&](const disk::IndexRow& r) {
    e.key = r.key;
    e.signature.clear();
    for (const disk::SignatureTotals& t : sigs) {
      if (t.sig_id == r.sig_id) e.signature = t.signature;
    }
    e.bytes = r.size;
    e.created_at_us = r.created_at_us;
    e.last_access_us = r.last_access_us;
    fn(e);
  });
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
  CacheFolderScan scan;
  using Kind = CacheFolderScan::Kind;
  KVTIER_RETURN_IF_ERROR(ForEachFile([&](Kind kind, const CacheFolderScan::File& f) {
    switch (kind) {
      case Kind::kBlock:
        scan.blocks.push_back(f);
        break;
      case Kind::kTemp:
        scan.temps.push_back(f);
        break;
      case Kind::kForeign:
        scan.foreign.push_back(f);
        break;
      case Kind::kQuarantine:
        scan.quarantine.push_back(f);
        break;
    }
  }));
  return scan;
}

Status CacheFolder::ForEachFile(
    const std::function<void(CacheFolderScan::Kind, const CacheFolderScan::File&)>& fn) {
  using Kind = CacheFolderScan::Kind;
  disk::FolderLayout layout(options_.dir);
  auto file_of = [&](const std::string& path, const Result<FileInfo>& info) {
    CacheFolderScan::File f;
    f.path = path;
    if (info.ok()) {
      f.bytes = info->type == FileType::kRegular ? info->size : 0;
      f.allocated_bytes = info->type == FileType::kRegular ? info->allocated_bytes : 0;
      f.mtime_unix_s = info->mtime_unix_s;
    }
    return f;
  };
  auto top = env_->ListDir(layout.BlocksDir());
  if (!top.ok() && !top.status().IsNotFound()) return top.status();
  if (top.ok()) {
    std::sort(top->begin(), top->end());
    uint64_t done = 0;
    auto finished = [&] {
      if (options_.progress) options_.progress("subfolders", ++done, top->size());
    };
    for (const std::string& sub : *top) {
      const std::string sub_path = JoinPath(layout.BlocksDir(), sub);
      auto info = env_->Stat(sub_path);
      auto prefix_key = BlockKey::FromHex(sub + std::string(62, '0'));
      if (sub.size() != 2 || !prefix_key || disk::HexByte(prefix_key->bytes[0]) != sub ||
          !info.ok() || info->type != FileType::kDirectory) {
        fn(Kind::kForeign, file_of(sub_path, info));
        finished();
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
          fn(Kind::kBlock, f);
        } else if (e.kind == disk::EntryKind::kTemp && regular) {
          f.key = e.key;
          f.pid = e.pid;
          fn(Kind::kTemp, f);
        } else {
          fn(Kind::kForeign, f);
        }
      }
      finished();
    }
  }
  auto q = env_->ListDir(layout.QuarantineDir());
  if (!q.ok() && !q.status().IsNotFound()) return q.status();
  if (q.ok()) {
    std::sort(q->begin(), q->end());
    for (const std::string& name : *q) {
      const std::string path = JoinPath(layout.QuarantineDir(), name);
      fn(Kind::kQuarantine, file_of(path, env_->Stat(path)));
    }
  }
  return Status::Ok();
}

Result<std::vector<CacheGcItem>> CacheFolder::PlanGc(const CacheGcRequest& req) {
  std::vector<CacheGcItem> plan;
  KVTIER_RETURN_IF_ERROR(
      Gc(req, /*dry_run=*/true, [&](const CacheGcItem& item) { plan.push_back(item); }).status());
  return plan;
}

namespace {

bool HasRow(const CacheGcItem& item) {
  return item.reason == "over_budget" || item.reason == "expired" ||
         item.reason == "other_layout" || item.reason == "missing_file";
}

std::optional<BlockKey> KeyOfPath(const std::string& path) {
  std::string name = path.substr(path.rfind('/') + 1);
  return BlockKey::FromHex(name.substr(0, 64));
}

}  // namespace

Result<uint64_t> CacheFolder::ApplyGc(const std::vector<CacheGcItem>& plan) {
  if (options_.access != CacheFolderAccess::kReadWrite) {
    return Status::FailedPrecondition("gc: " + options_.dir + " was opened read-only");
  }
  uint64_t freed = 0;
  auto remove = [&](const CacheGcItem& item) -> Status {
    Status s = disk::RemoveTree(env_, item.path);  // gone already: nothing freed
    if (!s.ok() && !s.IsNotFound()) return s.WithContext("gc");
    if (s.ok()) freed += item.bytes;
    return Status::Ok();
  };
  // Whatever has no row first: it frees space without writing the index.
  for (const CacheGcItem& item : plan) {
    if (!HasRow(item)) KVTIER_RETURN_IF_ERROR(remove(item));
  }
  // Then blocks, a chunk at a time: files first, then their rows in one
  // transaction. On a full disk a commit may find no room for the index's
  // journal: the rows wait for the next chunk's unlinks and commit with it.
  constexpr size_t kChunk = 256;
  std::vector<BlockKey> rows;
  Status commit = Status::Ok();
  size_t in_chunk = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const CacheGcItem& item = plan[i];
    if (!HasRow(item)) continue;
    KVTIER_RETURN_IF_ERROR(remove(item));
    if (auto key = KeyOfPath(item.path)) rows.push_back(*key);
    if (++in_chunk < kChunk) continue;
    in_chunk = 0;
    KVTIER_RETURN_IF_ERROR(EnsureWritableIndex().WithContext("gc"));
    commit = index_->Delete(rows).status();
    if (commit.ok()) {
      rows.clear();
    } else if (!commit.IsResourceExhausted()) {
      return commit.WithContext("gc");
    }
  }
  KVTIER_RETURN_IF_ERROR(EnsureWritableIndex().WithContext("gc"));
  if (!rows.empty()) KVTIER_RETURN_IF_ERROR(index_->Delete(rows).status().WithContext("gc"));
  // Last, the block files with no row that stay: adopted, so the index
  // (and every tier's limit) counts them.
  KVTIER_ASSIGN_OR_RETURN(CacheFolderScan scan, Scan());
  KVTIER_RETURN_IF_ERROR(AdoptOrphans(scan, plan));
  return freed;
}

Status CacheFolder::AdoptInPlace(std::vector<disk::IndexRow>* rows) {
  disk::FolderLayout layout(options_.dir);
  Status s =
      index_
          ->UpsertIf(*rows,
                     [&](const disk::IndexRow& r) { return disk::FileMatchesRow(env_, layout, r); })
          .status();
  rows->clear();
  return s.WithContext("gc: adopt");
}

Status CacheFolder::AdoptOrphans(const CacheFolderScan& scan,
                                 const std::vector<CacheGcItem>& plan) {
  disk::FolderLayout layout(options_.dir);
  std::unordered_set<std::string> planned;
  for (const CacheGcItem& item : plan) planned.insert(item.path);
  std::vector<disk::IndexRow> adopt;
  auto flush = [&]() -> Status {
    if (adopt.empty()) return Status::Ok();
    return AdoptInPlace(&adopt);
  };
  for (uint32_t prefix = 0; prefix < 256; ++prefix) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<disk::IndexRow> rows,
                            index_->RowsWithPrefix(static_cast<uint8_t>(prefix)));
    std::unordered_set<BlockKey, BlockKeyHash> indexed;
    for (const disk::IndexRow& r : rows) indexed.insert(r.key);
    for (const auto& f : scan.blocks) {
      if (f.key->bytes[0] != prefix || indexed.count(*f.key) > 0 || planned.count(f.path) > 0) {
        continue;
      }
      auto info = env_->Stat(f.path);
      if (!info.ok()) continue;
      KVTIER_ASSIGN_OR_RETURN(std::optional<disk::IndexRow> row,
                              disk::ReadAdoptableRow(env_, index_.get(), f.path, *f.key, *info));
      if (row) adopt.push_back(*row);
      if (adopt.size() >= 256) KVTIER_RETURN_IF_ERROR(flush());
    }
  }
  return flush();
}

}  // namespace kvtier
