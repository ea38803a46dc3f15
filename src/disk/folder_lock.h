// FolderLock: the advisory lock on <dir>/index.lock that says who has a
// cache folder open.
//
// Every open DiskTier holds it shared for its whole life. Rebuilding an
// index.sqlite that is not a usable database (moving it to quarantine/ and
// starting an empty one) needs it exclusive: while any other tier, in this
// process or another, still has the folder open, the old index is left
// where it is (those tiers would otherwise go on using a file no one else
// sees, with their own accounting). The lock is flock(2) through Env, so it
// works across processes and pid namespaces; on a file system without
// advisory locks nothing is locked and the rebuild goes ahead as before.
//
// Thread safety: a FolderLock is owned by one tier; Acquire() is safe from
// any thread.
#ifndef KVTIER_DISK_FOLDER_LOCK_H_
#define KVTIER_DISK_FOLDER_LOCK_H_

#include <cstdint>
#include <memory>

#include "disk/folder_layout.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::disk {

class FolderLock {
 public:
  FolderLock() = default;

  // Takes `kind` on the folder's lock file, creating the (empty) file with
  // `file_permissions` if it is missing. kShared waits up to `wait_micros`
  // while a rebuild holds it exclusively, then reports Unavailable;
  // kExclusive reports Unavailable at once if anyone else holds it.
  static Result<FolderLock> Acquire(Env* env, const FolderLayout& layout, FileLock kind,
                                    uint32_t file_permissions, uint64_t wait_micros);

  // False where the file system has no advisory locks.
  bool held() const { return file_ != nullptr; }
  void Release() { file_.reset(); }

 private:
  explicit FolderLock(std::unique_ptr<RandomAccessFile> file) : file_(std::move(file)) {}
  std::unique_ptr<RandomAccessFile> file_;  // the lock lives as long as it is open
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_FOLDER_LOCK_H_
