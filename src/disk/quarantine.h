// Quarantine: moves rejected files out of blocks/ into <dir>/quarantine/
// under a unique name that records when, so they are never served again but
// stay available for inspection until quarantine_retention_seconds pass (or
// `kvtier gc` removes them).
//
// Thread safety: safe from any thread (no state besides the Env).
#ifndef KVTIER_DISK_QUARANTINE_H_
#define KVTIER_DISK_QUARANTINE_H_

#include <string>
#include <string_view>

#include "disk/counters.h"
#include "disk/folder_layout.h"
#include "kvtier/env.h"

namespace kvtier::disk {

class Quarantine {
 public:
  // REQUIRES: every pointer outlives this object.
  Quarantine(Env* env, const FolderLayout* layout, uint32_t dir_permissions, DiskCounters* counters)
      : env_(env), layout_(layout), dir_permissions_(dir_permissions), counters_(counters) {}

  // Moves `path` (named `name` in its folder) to quarantine/. If it cannot
  // be moved it is removed. OK if the file is already gone.
  Status Move(const std::string& path, std::string_view name);

  // Removes quarantined files recorded before `cutoff_unix_s`; returns how
  // many.
  uint64_t RemoveOlderThan(int64_t cutoff_unix_s);

  // Files in quarantine/ now.
  uint64_t Count();

 private:
  Env* const env_;
  const FolderLayout* const layout_;
  const uint32_t dir_permissions_;
  DiskCounters* const counters_;
};

// Removes a file or, for a folder, its content and itself (bounded depth).
Status RemoveTree(Env* env, const std::string& path, int depth = 4);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_QUARANTINE_H_
