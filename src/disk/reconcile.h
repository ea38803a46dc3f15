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
//   - removes temp files no writer holds any more: a writer keeps an
//     exclusive advisory lock on its temp file while it is open, which any
//     process sees, in any pid namespace (on a file system without advisory
//     locks: temp files older than stale_temp_seconds);
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

// What the header of a block file with no row says, for its row.
struct BlockFileHeader {
  std::string signature;  // its layout signature
  IndexRow row;           // sig_id left 0
  bool meta_checked = false;  // the header carried a meta_checksum (then verified)
};

// Reads and validates the header of the block file at `path` (named for
// `key`, `info` from a Stat) without touching any index; nullopt if it is
// not a valid block file header for `key`.
Result<std::optional<BlockFileHeader>> ReadBlockFileHeader(Env* env, const std::string& path,
                                                           const BlockKey& key,
                                                           const FileInfo& info);

// Reads and validates the header of the block file at `path` (named for
// `key`, `size` bytes). The row to adopt, or nullopt if the header is bad.
// `meta_checked`, if set, says whether the header carried a meta_checksum
// (then verified: every metadata value is as its writer wrote it).
Result<std::optional<IndexRow>> ReadAdoptableRow(Env* env, DiskIndex* index,
                                                 const std::string& path, const BlockKey& key,
                                                 const FileInfo& info,
                                                 bool* meta_checked = nullptr);

// True if the file at `row.key`'s block path is the one `row` describes:
// its size and header hash (any header if the row recorded none). Used
// inside the index's write transaction before a row commits
// (DiskIndex::UpsertIf).
bool FileMatchesRow(Env* env, const FolderLayout& layout, const IndexRow& row);

// The row of the block file now at `row.key`'s path if it is a valid block
// file of that key other than the one `row` describes: its header verifies
// against its meta_checksum and differs from the row's. Another writer's
// version of the block, never a damaged file: it is to be described, not
// quarantined. nullopt if the file is gone, has no meta_checksum (an edited
// header could not be told from another writer's), is invalid, or has the
// row's very header (then its data is what failed).
Result<std::optional<IndexRow>> ReadRowOfAnotherFile(Env* env, DiskIndex* index,
                                                     const FolderLayout& layout,
                                                     const IndexRow& row);

// True if no writer holds the temp file at `path` (`info` from a Stat):
// writers keep an exclusive advisory lock on their temp file while it is
// open, seen by every process in every pid namespace; this process's own
// live temp files are never abandoned. Where the file system has no advisory
// locks, a temp file is abandoned once older than `stale_temp_seconds`.
// `kvtier gc` uses the same rule.
bool TempFileIsAbandoned(Env* env, const std::string& path, const FileInfo& info,
                         int64_t stale_temp_seconds);

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

  // A bounded part of Run() for an Open(): whole subfolders from `first`
  // on (wrapping around, each at most once) until `max_entries` entries
  // were listed; no limit enforcement (the writer's stores evict), no
  // quarantine retention.
  Result<ReconcileReport> RunBounded(uint8_t first, uint64_t max_entries);

 private:
  // `*listed` (if set) grows by the number of entries the subfolder held.
  Status Subdir(uint8_t prefix, ReconcileReport* report, uint64_t* listed = nullptr);
  Status TopLevel(ReconcileReport* report);

  Parts p_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_RECONCILE_H_
