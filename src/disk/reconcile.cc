#include "disk/reconcile.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/saturating_time.h"
#include "disk/header_hash.h"
#include "kvtier/block_file.h"

namespace kvtier::disk {

Result<std::optional<BlockFileHeader>> ReadBlockFileHeader(Env* env, const std::string& path,
                                                           const BlockKey& key,
                                                           const FileInfo& info) {
  std::optional<BlockFileHeader> none;
  if (info.type != FileType::kRegular || info.size < 8) return none;
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  auto file = env->OpenForRead(path, ro);
  if (!file.ok()) {
    if (file.status().IsNotFound()) return none;
    return file.status();
  }
  std::byte len_bytes[8];
  KVTIER_ASSIGN_OR_RETURN(size_t n, (*file)->ReadAt(0, len_bytes));
  if (n != 8) return none;
  const uint64_t size = (*file)->size();
  auto need = BlockHeaderPrefixBytes(len_bytes, size);
  if (!need.ok()) return none;
  std::vector<std::byte> prefix(*need);
  KVTIER_ASSIGN_OR_RETURN(n, (*file)->ReadAt(0, prefix));
  if (n != prefix.size()) return none;
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.verify_checksum = false;
  auto decoded = DecodeBlockHeader(prefix, size, opts);
  if (!decoded.ok()) return none;
  BlockFileHeader h;
  h.signature = decoded->meta.layout_signature;
  IndexRow& row = h.row;
  row.key = key;
  row.size = size;
  // A header may claim any created_at: clamp it to [0, now] so a hostile
  // or skewed file is neither expired at once by a huge retention nor kept
  // past it by a date in the future.
  const int64_t now_us = env->NowUnixMicros();
  row.created_at_us = std::clamp<int64_t>(SecondsToMicros(decoded->meta.created_at), 0, now_us);
  row.last_access_us = std::clamp<int64_t>(SecondsToMicros(info.mtime_unix_s), 0, now_us);
  row.header_hash = HeaderHash(prefix);
  h.meta_checked = decoded->meta.meta_checksum.has_value();
  return std::optional<BlockFileHeader>(std::move(h));
}

Result<std::optional<IndexRow>> ReadAdoptableRow(Env* env, DiskIndex* index,
                                                 const std::string& path, const BlockKey& key,
                                                 const FileInfo& info, bool* meta_checked) {
  KVTIER_ASSIGN_OR_RETURN(std::optional<BlockFileHeader> h,
                          ReadBlockFileHeader(env, path, key, info));
  if (!h) return std::optional<IndexRow>();
  KVTIER_ASSIGN_OR_RETURN(h->row.sig_id, index->SignatureId(h->signature));
  if (meta_checked != nullptr) *meta_checked = h->meta_checked;
  return std::optional<IndexRow>(h->row);
}

bool FileMatchesRow(Env* env, const FolderLayout& layout, const IndexRow& row) {
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  auto file = env->OpenForRead(layout.BlockPath(row.key), ro);
  if (!file.ok() || (*file)->size() != row.size) return false;
  if (row.header_hash == 0) return true;
  // One read holds the header of most blocks (this runs for every row a
  // commit writes, inside its transaction); a longer header takes a second.
  std::byte first[4096];
  const size_t want = static_cast<size_t>(std::min<uint64_t>(row.size, sizeof(first)));
  auto n = (*file)->ReadAt(0, std::span<std::byte>(first, want));
  if (!n.ok() || *n != want) return false;
  auto need = BlockHeaderPrefixBytes(std::span<const std::byte>(first, want), row.size);
  if (!need.ok()) return false;
  if (*need <= want) {
    return HeaderHash(std::span<const std::byte>(first, static_cast<size_t>(*need))) ==
           row.header_hash;
  }
  std::vector<std::byte> prefix(*need);
  n = (*file)->ReadAt(0, prefix);
  return n.ok() && *n == prefix.size() && HeaderHash(prefix) == row.header_hash;
}

Result<std::optional<IndexRow>> ReadRowOfAnotherFile(Env* env, DiskIndex* index,
                                                     const FolderLayout& layout,
                                                     const IndexRow& row) {
  std::optional<IndexRow> none;
  const std::string path = layout.BlockPath(row.key);
  auto info = env->Stat(path);
  if (!info.ok()) {
    if (info.status().IsNotFound()) return none;
    return info.status();
  }
  bool meta_checked = false;
  KVTIER_ASSIGN_OR_RETURN(std::optional<IndexRow> other,
                          ReadAdoptableRow(env, index, path, row.key, *info, &meta_checked));
  if (!other || !meta_checked || other->header_hash == row.header_hash) return none;
  return other;
}

bool TempFileIsAbandoned(Env* env, const std::string& path, const FileInfo& info,
                         int64_t stale_temp_seconds) {
  if (LiveTempFiles::Contains(path)) return false;  // a writer of this process
  // Its writer holds an exclusive lock on it until the file is renamed or
  // removed; a lock works across processes and pid namespaces, where the
  // pid in the name means nothing.
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  ro.lock = FileLock::kShared;
  auto probe = env->OpenForRead(path, ro);
  if (probe.ok()) return true;                             // nobody writes it
  if (probe.status().IsUnavailable()) return false;        // its writer is alive
  if (probe.status().sys_errno() != ENOLCK) return false;  // gone, unreadable: leave it
  // No advisory locks on this file system: only age tells.
  const int64_t age_s = SaturatingSub(env->NowUnixMicros() / kMicrosPerSecond, info.mtime_unix_s);
  return age_s > stale_temp_seconds;
}

Status Reconciler::Subdir(uint8_t prefix, ReconcileReport* report, uint64_t* listed) {
  Env* env = p_.env;
  const std::string dir = p_.layout->Subdir(prefix);
  std::vector<std::string> names;
  {
    auto listed = env->ListDir(dir);
    if (listed.ok()) {
      names = std::move(listed).value();
    } else if (!listed.status().IsNotFound()) {
      return listed.status();
    }
  }
  if (listed != nullptr) *listed += names.size();
  KVTIER_ASSIGN_OR_RETURN(std::vector<IndexRow> rows, p_.index->RowsWithPrefix(prefix));
  std::unordered_map<BlockKey, const IndexRow*, BlockKeyHash> by_key;
  for (const IndexRow& r : rows) by_key.emplace(r.key, &r);

  std::unordered_set<BlockKey, BlockKeyHash> present;
  std::vector<IndexRow> adopt;
  for (const std::string& name : names) {
    const std::string path = JoinPath(dir, name);
    ParsedEntry e = ParseBlockDirEntry(name, prefix);
    auto info = env->Stat(path);
    if (!info.ok()) continue;  // gone meanwhile
    switch (e.kind) {
      case EntryKind::kTemp:
        if (info->type == FileType::kRegular &&
            TempFileIsAbandoned(env, path, *info, p_.options->stale_temp_seconds)) {
          Status s = env->RemoveFile(path);
          if (s.ok()) {
            ++report->temps_removed;
            DiskCounters::Add(p_.counters->reconcile_temps_removed);
          }
        } else if (info->type != FileType::kRegular) {
          if (p_.quarantine->Move(path, name).ok()) ++report->quarantined;
        }
        break;
      case EntryKind::kForeign:
        if (p_.quarantine->Move(path, name).ok()) ++report->quarantined;
        break;
      case EntryKind::kBlock: {
        if (info->type != FileType::kRegular) {
          if (p_.quarantine->Move(path, name).ok()) ++report->quarantined;
          break;
        }
        ++report->files_seen;
        if (!p_.capacity->alloc_unit_known()) p_.capacity->NoteAllocation(*info);
        auto it = by_key.find(e.key);
        if (it != by_key.end() && it->second->size == info->size) {
          present.insert(e.key);
          break;
        }
        KVTIER_ASSIGN_OR_RETURN(std::optional<IndexRow> row,
                                ReadAdoptableRow(env, p_.index, path, e.key, *info));
        if (row) {
          present.insert(e.key);
          adopt.push_back(*row);
        } else if (env->Stat(path).ok()) {
          if (p_.quarantine->Move(path, name).ok()) ++report->quarantined;
        }
        break;
      }
    }
  }

  std::vector<BlockKey> drop;
  for (const IndexRow& r : rows) {
    if (present.count(r.key) > 0) continue;
    // Written after the listing, or never there? Look again.
    auto info = env->Stat(p_.layout->BlockPath(r.key));
    if (info.ok()) continue;
    if (info.status().IsNotFound()) drop.push_back(r.key);
  }
  if (!adopt.empty()) {
    // Only a file still in place: one read above may have been evicted and
    // replaced by another process's since, whose row must stay.
    KVTIER_ASSIGN_OR_RETURN(std::vector<bool> written,
                            p_.index->UpsertIf(adopt, [this](const IndexRow& r) {
                              return FileMatchesRow(p_.env, *p_.layout, r);
                            }));
    const uint64_t adopted =
        static_cast<uint64_t>(std::count(written.begin(), written.end(), true));
    report->adopted += adopted;
    DiskCounters::Add(p_.counters->reconcile_adopted, adopted);
  }
  if (!drop.empty()) {
    KVTIER_ASSIGN_OR_RETURN(uint64_t dropped, p_.index->Delete(drop));
    report->rows_dropped += dropped;
    DiskCounters::Add(p_.counters->reconcile_rows_dropped, dropped);
  }
  return Status::Ok();
}

Status Reconciler::TopLevel(ReconcileReport* report) {
  auto names = p_.env->ListDir(p_.layout->BlocksDir());
  if (!names.ok()) return names.status().IsNotFound() ? Status::Ok() : names.status();
  for (const std::string& name : *names) {
    const std::string path = JoinPath(p_.layout->BlocksDir(), name);
    bool is_subdir = false;
    if (name.size() == 2) {
      auto key = BlockKey::FromHex(name + std::string(62, '0'));
      auto info = p_.env->Stat(path);
      is_subdir =
          key && name == HexByte(key->bytes[0]) && info.ok() && info->type == FileType::kDirectory;
    }
    if (!is_subdir && p_.quarantine->Move(path, name).ok()) ++report->quarantined;
  }
  return Status::Ok();
}

Result<ReconcileReport> Reconciler::RunBounded(uint8_t first, uint64_t max_entries) {
  ReconcileReport report;
  uint64_t listed = 0;
  for (int i = 0; i < 256 && listed < max_entries; ++i) {
    KVTIER_RETURN_IF_ERROR(Subdir(static_cast<uint8_t>(first + i), &report, &listed));
  }
  return report;
}

Result<ReconcileReport> Reconciler::Run(const std::atomic<bool>& stop) {
  ReconcileReport report;
  KVTIER_RETURN_IF_ERROR(TopLevel(&report));
  for (int prefix = 0; prefix < 256; ++prefix) {
    if (stop.load(std::memory_order_relaxed)) return report;
    KVTIER_RETURN_IF_ERROR(Subdir(static_cast<uint8_t>(prefix), &report));
  }
  KVTIER_ASSIGN_OR_RETURN(EvictOutcome out, p_.capacity->EnforceLimit());
  report.evicted += out.evicted;
  report.expired += out.expired;
  if (p_.options->quarantine_retention_seconds > 0) {
    const int64_t cutoff = CutoffBefore(p_.env->NowUnixMicros() / kMicrosPerSecond,
                                        p_.options->quarantine_retention_seconds);
    report.quarantine_removed += p_.quarantine->RemoveOlderThan(cutoff);
  }
  DiskCounters::Add(p_.counters->reconcile_passes);
  return report;
}

}  // namespace kvtier::disk
