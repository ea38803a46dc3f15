// Kill points: where the disk tier's crash tests stop the process, and the
// test-only way to install a hook there.
//
// The hook is called on the thread doing the work, at each point, for every
// block; a crash test SIGKILLs itself there, a unit test may block there to
// hold a write in flight. It is not part of the public API: tests reach it
// through OpenWithKillHook() (this internal header), never through
// DiskTierOptions.
//
// Thread safety: the hook must be safe to call from the writer, reader and
// maintenance threads at once, and must not call back into the tier.
#ifndef KVTIER_DISK_KILL_POINTS_H_
#define KVTIER_DISK_KILL_POINTS_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier {

// Where a test may stop the process.
enum class DiskKillPoint : uint8_t {
  kBeforeWrite,        // temp file not created yet
  kMidWrite,           // half of the bytes appended to the temp file
  kBeforeRename,       // temp file complete (and fsynced in kFsync mode)
  kBeforeDirSync,      // renamed, folder not fsynced yet (kFsync mode only)
  kBeforeIndexCommit,  // file in place, index row not committed yet
  kMidEviction,        // eviction transaction open, some victims unlinked
  kAfterIndexCommit,   // index rows committed, the writer's reservation still held
};

namespace disk {

using KillHook = std::function<void(DiskKillPoint)>;

// DiskTier::Open() with `hook` called at each DiskKillPoint. Tests only.
Result<std::unique_ptr<DiskTier>> OpenWithKillHook(const DiskTierOptions& options, Env* env,
                                                   KillHook hook);

}  // namespace disk
}  // namespace kvtier

#endif  // KVTIER_DISK_KILL_POINTS_H_
