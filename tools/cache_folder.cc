// Reading cache folders for the CLI: index, scan, garbage collection.
#include <algorithm>
#include <charconv>
#include <tuple>
#include <unordered_set>

#include "cache_folder.h"
#include "disk/folder_layout.h"
#include "disk/quarantine.h"
#include "kvtier/env.h"

namespace kvtier::cli {

Result<std::optional<std::string>> ReferenceSignature(const std::string& layout, bool has_layout,
                                                      const std::string& signature,
                                                      bool has_signature) {
  if (has_layout && has_signature) {
    return Status::InvalidArgument("give at most one of --layout or --signature");
  }
  if (has_signature) {
    if (signature.empty()) return Status::InvalidArgument("--signature: empty");
    return std::optional<std::string>(signature);
  }
  if (has_layout) {
    auto l = ModelLayout::Resolve(Env::Default(), layout);
    if (!l.ok()) return l.status().WithContext("--layout");
    return std::optional<std::string>(l->Signature());
  }
  return std::optional<std::string>();
}

Result<uint64_t> ParseByteCount(const std::string& text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  std::string_view rest(p, text.data() + text.size() - p);
  int shift = 0;
  if (rest == "K" || rest == "KiB") shift = 10;
  else if (rest == "M" || rest == "MiB") shift = 20;
  else if (rest == "G" || rest == "GiB") shift = 30;
  else if (rest == "T" || rest == "TiB") shift = 40;
  else if (!rest.empty()) ec = std::errc::invalid_argument;
  if (text.empty() || ec != std::errc() || p == text.data() || (shift > 0 && (v >> (64 - shift)) != 0)) {
    return Status::InvalidArgument("expected a byte count like 1073741824 or 512M, got '" +
                                   text.substr(0, 40) + "'");
  }
  return v << shift;
}

bool IsCacheFolder(const std::string& dir) {
  Env* env = Env::Default();
  disk::FolderLayout layout(dir);
  auto idx = env->Stat(layout.IndexPath());
  auto blocks = env->Stat(layout.BlocksDir());
  return (idx.ok() && idx->type == FileType::kRegular) ||
         (blocks.ok() && blocks->type == FileType::kDirectory);
}

Result<std::unique_ptr<disk::DiskIndex>> OpenCacheIndex(const std::string& dir) {
  auto info = Env::Default()->Stat(dir);
  if (!info.ok() || info->type != FileType::kDirectory) {
    return Status::NotFound(dir + " is not a folder");
  }
  disk::IndexOptions o;
  o.create_if_missing = false;
  auto index = disk::DiskIndex::Open(disk::FolderLayout(dir).IndexPath(), o);
  if (!index.ok() && index.status().IsNotFound()) {
    return Status::NotFound(dir + " is not a kvtier cache folder (no index.sqlite)");
  }
  return index;
}

Result<std::vector<CacheEntry>> ListCacheEntries(const std::string& dir) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<disk::DiskIndex> index, OpenCacheIndex(dir));
  KVTIER_ASSIGN_OR_RETURN(std::vector<disk::SignatureTotals> sigs, index->PerSignature());
  std::vector<CacheEntry> out;
  std::vector<std::pair<int64_t, std::string>> names;
  for (const auto& s : sigs) names.emplace_back(s.sig_id, s.signature);
  Status s = index->ForEachRow([&](const disk::IndexRow& r) {
    CacheEntry e;
    e.key = r.key;
    for (const auto& [id, text] : names) {
      if (id == r.sig_id) e.signature = text;
    }
    e.bytes = r.size;
    e.created_at_us = r.created_at_us;
    e.last_access_us = r.last_access_us;
    out.push_back(std::move(e));
  });
  KVTIER_RETURN_IF_ERROR(s);
  return out;
}

Result<FolderScan> ScanCacheFolder(const std::string& dir) {
  Env* env = Env::Default();
  disk::FolderLayout layout(dir);
  FolderScan scan;
  auto file_of = [&](const std::string& path) {
    FolderScan::File f;
    f.path = path;
    auto info = env->Stat(path);
    if (info.ok()) {
      f.bytes = info->type == FileType::kRegular ? info->size : 0;
      f.mtime_unix_s = info->mtime_unix_s;
    }
    return f;
  };
  auto top = env->ListDir(layout.BlocksDir());
  if (!top.ok() && !top.status().IsNotFound()) return top.status();
  if (top.ok()) {
    std::sort(top->begin(), top->end());
    for (const std::string& sub : *top) {
      const std::string sub_path = JoinPath(layout.BlocksDir(), sub);
      auto info = env->Stat(sub_path);
      auto prefix_key = BlockKey::FromHex(sub + std::string(62, '0'));
      if (sub.size() != 2 || !prefix_key || disk::HexByte(prefix_key->bytes[0]) != sub ||
          !info.ok() || info->type != FileType::kDirectory) {
        scan.foreign.push_back(file_of(sub_path));
        continue;
      }
      KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(sub_path));
      std::sort(names.begin(), names.end());
      for (const std::string& name : names) {
        const std::string path = JoinPath(sub_path, name);
        disk::ParsedEntry e = disk::ParseBlockDirEntry(name, prefix_key->bytes[0]);
        FolderScan::File f = file_of(path);
        auto finfo = env->Stat(path);
        bool regular = finfo.ok() && finfo->type == FileType::kRegular;
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
  auto q = env->ListDir(layout.QuarantineDir());
  if (q.ok()) {
    std::sort(q->begin(), q->end());
    for (const std::string& name : *q) {
      scan.quarantine.push_back(file_of(JoinPath(layout.QuarantineDir(), name)));
    }
  }
  return scan;
}

Result<std::vector<GcItem>> PlanGc(const std::string& dir, const GcRequest& req) {
  Env* env = Env::Default();
  disk::FolderLayout layout(dir);
  KVTIER_ASSIGN_OR_RETURN(std::vector<CacheEntry> entries, ListCacheEntries(dir));
  KVTIER_ASSIGN_OR_RETURN(FolderScan scan, ScanCacheFolder(dir));
  std::vector<GcItem> plan;
  std::unordered_set<BlockKey, BlockKeyHash> gone;
  const int64_t now_us = env->NowUnixMicros();
  uint64_t total = 0;
  for (const CacheEntry& e : entries) total += e.bytes;
  std::unordered_set<BlockKey, BlockKeyHash> on_disk;
  for (const auto& f : scan.blocks) on_disk.insert(*f.key);
  auto remove = [&](const CacheEntry& e, const char* reason) {
    if (!gone.insert(e.key).second) return;
    const bool has_file = on_disk.count(e.key) > 0;
    plan.push_back({layout.BlockPath(e.key), has_file ? reason : "missing_file",
                    has_file ? e.bytes : 0});
    total -= std::min(total, e.bytes);
  };
  for (const CacheEntry& e : entries) {
    if (on_disk.count(e.key) == 0) remove(e, "missing_file");
  }
  if (req.retention_seconds) {
    for (const CacheEntry& e : entries) {
      if (e.created_at_us < now_us - *req.retention_seconds * 1'000'000) remove(e, "expired");
    }
  }
  if (req.keep_signature) {
    for (const CacheEntry& e : entries) {
      if (e.signature != *req.keep_signature) remove(e, "other_layout");
    }
  }
  if (req.max_bytes) {
    std::vector<const CacheEntry*> lru;
    for (const CacheEntry& e : entries) lru.push_back(&e);
    std::sort(lru.begin(), lru.end(), [](const CacheEntry* a, const CacheEntry* b) {
      return std::tie(a->last_access_us, a->key) < std::tie(b->last_access_us, b->key);
    });
    for (const CacheEntry* e : lru) {
      if (total <= *req.max_bytes) break;
      remove(*e, "over_budget");
    }
  }
  if (req.quarantine) {
    for (const auto& f : scan.quarantine) plan.push_back({f.path, "quarantined", f.bytes});
  }
  if (req.dead_temps) {
    for (const auto& f : scan.temps) {
      if (!env->ProcessAlive(f.pid)) plan.push_back({f.path, "dead_temp", f.bytes});
    }
  }
  for (const auto& f : scan.foreign) plan.push_back({f.path, "foreign", f.bytes});
  return plan;
}

Result<uint64_t> ApplyGc(const std::string& dir, const std::vector<GcItem>& plan) {
  Env* env = Env::Default();
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<disk::DiskIndex> index, OpenCacheIndex(dir));
  uint64_t freed = 0;
  for (const GcItem& item : plan) {
    auto info = env->Stat(item.path);
    Status s = Status::Ok();
    if (info.ok() && info->type == FileType::kDirectory) {
      s = disk::RemoveTree(env, item.path);
    } else if (info.ok()) {
      s = env->RemoveFile(item.path);
    }
    if (!s.ok() && !s.IsNotFound()) return s.WithContext("gc");
    if (item.reason == "over_budget" || item.reason == "expired" ||
        item.reason == "other_layout" || item.reason == "missing_file") {
      // The row goes after the file: a crash between leaves a row without a
      // file (a miss), never an orphan file.
      std::string name = item.path.substr(item.path.rfind('/') + 1);
      auto key = BlockKey::FromHex(name.substr(0, 64));
      if (key) KVTIER_RETURN_IF_ERROR(index->Delete(std::span<const BlockKey>(&*key, 1)).status());
    }
    if (s.ok()) freed += item.bytes;
  }
  return freed;
}

}  // namespace kvtier::cli
