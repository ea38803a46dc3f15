// Reconciler: brings a cache folder's files and index rows back into
// agreement after crashes, lost indexes, other processes and hand edits.
//
// One pass walks blocks/ one subfolder at a time (memory bounded by one
// subfolder's rows) and
//   - adopts a block file with no row after validating its header (key from
//     the name, any signature: other layouts are indexed, counted, never
//     served); a file whose header is invalid, or whose size disagrees with
//     its row and whose header is invalid, is quarantined;
//   - drops rows whose file is gone (re-checked with a stat, so a file
//     written after the listing is never mistaken for a missing one);
//   - removes temp files of dead writers (pid gone, or older than
//     stale_temp_seconds), never a temp file this process is writing;
//   - quarantines anything else found under blocks/ (foreign files,
//     symlinks, FIFOs, folders, files in the wrong subfolder);
// then expires and evicts until the folder is within its limit, and drops
// quarantined files past their retention. It stops early when `stop` is set.
//
// Thread safety: Run() may run concurrently with everything else, in this
// process and others; each step is idempotent.
#ifndef KVTIER_DISK_RECONCILE_H_
#define KVTIER_DISK_RECONCILE_H_

#include <atomic>
#include <optional>
#include <string>

#include "disk/capacity.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/quarantine.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

// Reads and validates the header of the block file at `path` (named for
// `key`, `size` bytes). The row to adopt, or nullopt if the header is bad.
Result<std::optional<IndexRow>> ReadAdoptableRow(Env* env, DiskIndex* index,
                                                 const std::string& path, const BlockKey& key,
                                                 const FileInfo& info);

class Reconciler {
 public:
  struct Parts {
    const DiskTierOptions* options = nullptr;
    Env* env = nullptr;
    const FolderLayout* layout = nullptr;
    DiskIndex* index = nullptr;
    Quarantine* quarantine = nullptr;
    Capacity* capacity = nullptr;
    DiskCounters* counters = nullptr;
  };
  explicit Reconciler(const Parts& parts) : p_(parts) {}

  Result<ReconcileReport> Run(const std::atomic<bool>& stop);

 private:
  Status Subdir(uint8_t prefix, ReconcileReport* report);
  Status TopLevel(ReconcileReport* report);
  bool TempIsAbandoned(const std::string& path, int pid, const FileInfo& info);

  Parts p_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_RECONCILE_H_
