// Where a DiskTier over a folder keeps its block files (docs/disk-tier.md):
//
//   <dir>/blocks/<2 hex>/<64 hex>.safetensors                one block file
//   <dir>/blocks/<2 hex>/<64 hex>.safetensors.tmp.<pid>.<n>  being written
//
// The subfolder is the key's first byte, in lowercase hex. For tools that
// work beside a tier on the same disk (`kvtier bench disk` writes and reads
// the same files the tier's way, as its raw limit); everything else about a
// cache folder is CacheFolder's (cache_folder.h).
//
// Thread safety: pure functions on values.
#ifndef KVTIER_DISK_PATHS_H_
#define KVTIER_DISK_PATHS_H_

#include <cstdint>
#include <string>

#include "kvtier/block_key.h"

namespace kvtier {

// <dir>/blocks
std::string DiskBlocksDir(const std::string& dir);
// <dir>/blocks/<2 hex of prefix>
std::string DiskBlockSubdir(const std::string& dir, uint8_t prefix);
// <dir>/blocks/<2 hex>/<64 hex>.safetensors
std::string DiskBlockPath(const std::string& dir, const BlockKey& key);
// The temp name a writer in process `pid` uses for `key` before its rename
// (`counter` makes it unique within the process).
std::string DiskBlockTempPath(const std::string& dir, const BlockKey& key, int pid,
                              uint64_t counter);

}  // namespace kvtier

#endif  // KVTIER_DISK_PATHS_H_
