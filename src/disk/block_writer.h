// BlockWriter: publishes one block file in a cache folder so that the first
// complete file wins.
//
// The bytes go to a unique temp name in the block's final subfolder
// (<64 hex>.safetensors.tmp.<pid>.<n>), created exclusively and held under
// an exclusive advisory lock while it is open, so a reconcile in any
// process (in any pid namespace) can tell a live writer's temp file from an
// abandoned one. The temp file is then moved to the final name with
// Env::RenameNoReplace: if a file is already there (another writer of the
// same key, in this or another process, finished first) the temp file is
// removed and the existing file stays: a block file, once in place, is
// never replaced, so the index row describing it stays true. In kFsync
// mode the temp file is fsynced before the move and the subfolder after.
//
// Thread safety: Publish() may be called from any number of threads.
#ifndef KVTIER_DISK_BLOCK_WRITER_H_
#define KVTIER_DISK_BLOCK_WRITER_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <string>

#include "disk/folder_layout.h"
#include "disk/kill_points.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

enum class PublishOutcome {
  kPublished,  // our file is in place
  kExisting,   // a file was already in place; ours was discarded
};

class BlockWriter {
 public:
  // REQUIRES: every pointer outlives this object; `kill_hook` may hold no
  // function.
  BlockWriter(Env* env, const FolderLayout* layout, const DiskTierOptions* options,
              const KillHook* kill_hook)
      : env_(env), layout_(layout), options_(options), kill_hook_(kill_hook) {}

  // Makes all 256 subfolders now (kFsync mode does, so that a write never
  // syncs blocks/ after making one) and syncs blocks/ and the folder.
  Status MakeAllSubdirs();

  // Writes `bytes` as the block file of `key` unless a file is already
  // there. On an error nothing of ours is left behind.
  Result<PublishOutcome> Publish(const BlockKey& key, std::span<const std::byte> bytes);

 private:
  void Hook(DiskKillPoint point) const;
  Status EnsureSubdir(uint8_t prefix);
  // One attempt through the temp name `tmp`.
  Result<PublishOutcome> PublishVia(const std::string& tmp, const BlockKey& key,
                                    std::span<const std::byte> bytes);

  Env* const env_;
  const FolderLayout* const layout_;
  const DiskTierOptions* const options_;
  const KillHook* const kill_hook_;
  std::array<std::atomic<bool>, 256> subdir_ready_{};
};

// True if mode bits `perms` go beyond what is created by default for the
// owner (`owner_default`), so an explicit chmod is needed against the umask.
bool NeedsChmod(uint32_t perms, uint32_t owner_default);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_BLOCK_WRITER_H_
