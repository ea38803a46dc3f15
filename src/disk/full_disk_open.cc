#include "disk/full_disk_open.h"

#include <memory>

namespace kvtier::disk {

bool NearlyFull(Env* env, const std::string& dir) {
  Result<uint64_t> free = env->FreeSpace(dir);
  return free.ok() && *free < kFullDiskBytes;
}

Result<std::vector<BlockKey>> FreeRoomToOpen(Env* env, const FolderLayout& layout,
                                             const IndexOptions& options) {
  IndexOptions ro = options;
  ro.read_only = true;
  ro.create_if_missing = false;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<DiskIndex> index,
                          DiskIndex::Open(layout.IndexPath(), ro));
  // Tiny blocks take a page each: enough rows for the room at any size.
  constexpr uint32_t kMaxRows = 4096;
  KVTIER_ASSIGN_OR_RETURN(std::vector<IndexRow> rows, index->LruRows(kMaxRows));
  std::vector<BlockKey> removed;
  uint64_t freed = 0;
  for (const IndexRow& row : rows) {
    if (freed >= kOpenRoomBytes) break;
    const std::string path = layout.BlockPath(row.key);
    Result<FileInfo> info = env->Stat(path);
    Status s = env->RemoveFile(path);
    if (!s.ok() && !s.IsNotFound()) return s.WithContext("making room to open the index");
    removed.push_back(row.key);
    if (s.ok() && info.ok()) freed += info->allocated_bytes;
  }
  return removed;
}

}  // namespace kvtier::disk
