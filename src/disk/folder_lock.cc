#include "disk/folder_lock.h"

#include <cerrno>

namespace kvtier::disk {

Result<FolderLock> FolderLock::Acquire(Env* env, const FolderLayout& layout, FileLock kind,
                                       uint32_t file_permissions, uint64_t wait_micros) {
  const std::string path = layout.LockPath();
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  ro.lock = kind;
  constexpr uint64_t kPollMicros = 10'000;
  uint64_t waited = 0;
  while (true) {
    auto file = env->OpenForRead(path, ro);
    if (file.ok()) return FolderLock(std::move(file).value());
    const Status& s = file.status();
    if (s.IsNotFound()) {
      WriteFileOptions wo;
      wo.permissions = file_permissions;
      wo.exclusive = true;
      auto created = env->CreateFile(path, wo);
      if (created.ok()) {
        KVTIER_RETURN_IF_ERROR((*created)->Close());
      } else if (created.status().sys_errno() != EEXIST) {
        return created.status().WithContext("folder lock");
      }
      continue;
    }
    if (s.sys_errno() == ENOLCK) return FolderLock();  // no advisory locks here
    if (!s.IsUnavailable() || kind == FileLock::kExclusive || waited >= wait_micros) {
      return s.WithContext("folder lock");
    }
    env->SleepForMicros(kPollMicros);
    waited += kPollMicros;
  }
}

}  // namespace kvtier::disk
