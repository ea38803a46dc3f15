#include "kvtier/disk_paths.h"

#include "disk/folder_layout.h"

namespace kvtier {

std::string DiskBlocksDir(const std::string& dir) { return disk::FolderLayout(dir).BlocksDir(); }

std::string DiskBlockSubdir(const std::string& dir, uint8_t prefix) {
  return disk::FolderLayout(dir).Subdir(prefix);
}

std::string DiskBlockPath(const std::string& dir, const BlockKey& key) {
  return disk::FolderLayout(dir).BlockPath(key);
}

std::string DiskBlockTempPath(const std::string& dir, const BlockKey& key, int pid,
                              uint64_t counter) {
  return disk::FolderLayout(dir).TempPath(key, pid, counter);
}

}  // namespace kvtier
