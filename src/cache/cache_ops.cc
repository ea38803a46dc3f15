// CacheCore's key operations across the tiers: Contains, Erase, Clear. The
// tiers never call each other; these compose them (DESIGN.md §2) and keep
// the Match index in step (the host tier's key listener clears host bits;
// disk bits are cleared here).
#include <string>
#include <unordered_set>
#include <vector>

#include "cache/cache_core.h"

namespace kvtier::cache_internal {
namespace {

void KeepFirst(Status* first, const Status& s, const std::string& context) {
  if (!s.ok() && first->ok()) *first = s.WithContext(context);
}

}  // namespace

CacheTier CacheCore::Contains(const BlockKey& key) {
  GateScope gate(gate_);
  if (!gate.entered()) return CacheTier::kNone;
  if (host_->Contains(key)) return CacheTier::kHost;
  if (disk_ != nullptr && disk_->Contains(key)) return CacheTier::kDisk;
  if (remote_ != nullptr) {
    const std::vector<bool> found = remote_->Exists(std::span<const BlockKey>(&key, 1));
    if (!found.empty() && found[0]) return CacheTier::kRemote;
  }
  return CacheTier::kNone;
}

bool CacheCore::EraseEverywhere(const BlockKey& key, Status* first) {
  // Host first: a dirty entry must not be written down by an eviction
  // after its disk copy is gone.
  bool erased = host_->Erase(key);
  if (disk_ != nullptr) {
    Result<bool> d = disk_->Erase(key);
    if (d.ok()) {
      erased |= *d;
    } else {
      KeepFirst(first, d.status(), "disk tier");
    }
    index_.MarkAbsent(key, IndexTier::kDisk);
  }
  if (remote_ != nullptr) {
    Result<bool> r = remote_->Erase(key);
    if (r.ok()) {
      erased |= *r;
    } else {
      KeepFirst(first, r.status(), "remote tier");
    }
  }
  return erased;
}

Result<bool> CacheCore::Erase(const BlockKey& key) {
  GateScope gate(gate_);
  if (!gate.entered()) return Status::FailedPrecondition("TieredCache::Erase: the cache is closed");
  Status first;
  const bool erased = EraseEverywhere(key, &first);
  if (!first.ok()) return first.WithContext("TieredCache::Erase: " + key.Hex().substr(0, 16));
  return erased;
}

Result<uint64_t> CacheCore::Clear() {
  GateScope gate(gate_);
  if (!gate.entered()) return Status::FailedPrecondition("TieredCache::Clear: the cache is closed");
  Status first;
  std::unordered_set<BlockKey, BlockKeyHash> seen;
  std::vector<BlockKey> keys = host_->Keys();
  seen.insert(keys.begin(), keys.end());
  if (disk_ != nullptr) {
    // Pending writes land first: a write still queued would publish its
    // file after the erase. ForEachKey lists this signature's rows only, so
    // other layouts in a shared folder are kept.
    KVTIER_RETURN_IF_ERROR(disk_->Flush().WithContext("TieredCache::Clear: disk flush"));
    std::vector<BlockKey> on_disk;
    KVTIER_RETURN_IF_ERROR(
        disk_->ForEachKey([&](const BlockKey& key, uint64_t) { on_disk.push_back(key); })
            .WithContext("TieredCache::Clear: listing the disk tier"));
    for (const BlockKey& key : on_disk) {
      if (seen.insert(key).second) keys.push_back(key);
    }
  }
  if (remote_ != nullptr) {
    // Queued puts land first, for the same reason.
    (void)remote_->Flush();
  }
  uint64_t erased = 0;
  for (const BlockKey& key : keys) erased += EraseEverywhere(key, &first) ? 1 : 0;
  if (remote_ != nullptr) {
    // The blocks of this layout that only Redis holds (stored by other
    // hosts, or evicted from here long ago): the tier lists them itself,
    // by their headers' layout signature, keeping other layouts' values.
    Result<uint64_t> rest = remote_->EraseLayout();
    if (rest.ok()) {
      erased += *rest;
    } else {
      KeepFirst(&first, rest.status(), "remote tier");
    }
  }
  if (!first.ok()) return first.WithContext("TieredCache::Clear");
  return erased;
}

}  // namespace kvtier::cache_internal
