// FullDiskOpen: opening a cache folder's index for writing on a disk with
// no room left. SQLite must make (or grow) the -shm and -wal files before
// the first statement; on a full disk that fails ("disk I/O error") and the
// folder could never be written again, though evicting blocks is exactly
// what a full disk calls for. So an opener that fails on a nearly full disk
// reads the index read-only (which needs no room), removes the files of the
// least recently used blocks until there is room, opens again, and only
// then deletes their rows. A crash in between leaves rows whose file is
// gone: a miss for readers, removed by the next reconcile or gc.
//
// Thread safety: plain functions; the caller holds the folder lock.
#ifndef KVTIER_DISK_FULL_DISK_OPEN_H_
#define KVTIER_DISK_FULL_DISK_OPEN_H_

#include <cstdint>
#include <vector>

#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::disk {

// Free bytes under which a writer that cannot open the index is taken to
// be on a full disk.
inline constexpr uint64_t kFullDiskBytes = uint64_t{1} << 20;
// What the room-making removes at most: SQLite needs its 32 KiB -shm and a
// few WAL pages; the rest is for the stores that follow.
inline constexpr uint64_t kOpenRoomBytes = uint64_t{512} << 10;

// True when `dir`'s file system has less than kFullDiskBytes free.
bool NearlyFull(Env* env, const std::string& dir);

// Reads the index at `layout` read-only and removes the block files of the
// least recently used rows until kOpenRoomBytes are allocated no more (by
// the files' allocated sizes), or the rows run out. Returns the keys whose
// files it removed (their rows still to be deleted by the caller).
Result<std::vector<BlockKey>> FreeRoomToOpen(Env* env, const FolderLayout& layout,
                                             const IndexOptions& options);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_FULL_DISK_OPEN_H_
