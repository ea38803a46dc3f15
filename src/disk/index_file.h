// IndexFile: the checks and the setting aside of a cache folder's
// index.sqlite (with its -wal and -shm) before SQLite sees it.
//
// SQLite follows a symlink, blocks opening a FIFO, and reads a symlink to
// /dev/zero as an empty database whose every write then fails with "disk
// I/O error": so every opener (a DiskTier, a CacheFolder) looks at the
// files first and reports one that is not a regular file as Corruption
// naming its exact path and what it is. A writer then treats it as a
// corrupt index: sets the files aside into quarantine/ and starts a new
// index, which the reconcile (or `kvtier gc`) fills from the block files,
// but only while it holds the folder alone (folder_lock.h).
//
// Thread safety: plain functions.
#ifndef KVTIER_DISK_INDEX_FILE_H_
#define KVTIER_DISK_INDEX_FILE_H_

#include "disk/folder_layout.h"
#include "disk/quarantine.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::disk {

// OK if index.sqlite, -wal and -shm are each absent or a regular file;
// else Corruption: "index <path> is a symlink, not a regular file".
Status CheckIndexFiles(Env* env, const FolderLayout& layout);

// Corruption naming the index's path for a status from opening it that says
// it is no SQLite database (Corruption); other statuses are returned as
// they are.
Status NameIndexError(const FolderLayout& layout, const Status& s);

// Moves index.sqlite, -wal and -shm (whatever they are) to quarantine/.
// REQUIRES: the caller holds the folder lock exclusively.
Status SetAsideIndexFiles(Env* env, const FolderLayout& layout, Quarantine* quarantine);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_INDEX_FILE_H_
