#include "disk/block_writer.h"

#include <cerrno>

namespace kvtier::disk {

bool NeedsChmod(uint32_t perms, uint32_t owner_default) {
  // The umask never removes owner bits in practice; anything beyond the
  // owner's default may be stripped, so set it explicitly.
  return (perms & ~owner_default) != 0;
}

void BlockWriter::Hook(DiskKillPoint point) const {
  if (*kill_hook_) (*kill_hook_)(point);
}

Status BlockWriter::MakeAllSubdirs() {
  for (int prefix = 0; prefix < 256; ++prefix) {
    const std::string sub = layout_->Subdir(static_cast<uint8_t>(prefix));
    auto info = env_->Stat(sub);
    if (!info.ok()) {
      KVTIER_RETURN_IF_ERROR(env_->CreateDir(sub, options_->dir_permissions));
      // Only what it creates: a folder someone else made keeps its mode.
      if (NeedsChmod(options_->dir_permissions, 0700)) {
        KVTIER_RETURN_IF_ERROR(env_->Chmod(sub, options_->dir_permissions));
      }
    }
    subdir_ready_[prefix].store(true, std::memory_order_relaxed);
  }
  KVTIER_RETURN_IF_ERROR(env_->SyncDir(layout_->BlocksDir()));
  return env_->SyncDir(layout_->dir());
}

Status BlockWriter::EnsureSubdir(uint8_t prefix) {
  if (subdir_ready_[prefix].load(std::memory_order_acquire)) return Status::Ok();
  const std::string sub = layout_->Subdir(prefix);
  KVTIER_RETURN_IF_ERROR(env_->CreateDir(sub, options_->dir_permissions));
  if (NeedsChmod(options_->dir_permissions, 0700)) {
    KVTIER_RETURN_IF_ERROR(env_->Chmod(sub, options_->dir_permissions));
  }
  if (options_->durability == Durability::kFsync) {
    KVTIER_RETURN_IF_ERROR(env_->SyncDir(layout_->BlocksDir()));
  }
  subdir_ready_[prefix].store(true, std::memory_order_release);
  return Status::Ok();
}

Result<PublishOutcome> BlockWriter::PublishVia(const std::string& tmp, const BlockKey& key,
                                               std::span<const std::byte> bytes) {
  const uint8_t prefix = key.bytes[0];
  WriteFileOptions wo;
  wo.permissions = options_->file_permissions;
  wo.exclusive = true;
  wo.lock = true;
  auto file = env_->CreateFile(tmp, wo);
  if (!file.ok() && file.status().IsNotFound()) {
    // The subfolder vanished (removed by hand): make it again.
    subdir_ready_[prefix].store(false, std::memory_order_release);
    KVTIER_RETURN_IF_ERROR(EnsureSubdir(prefix));
    file = env_->CreateFile(tmp, wo);
  }
  if (!file.ok()) return file.status();
  if (*kill_hook_) {
    const size_t half = bytes.size() / 2;
    KVTIER_RETURN_IF_ERROR((*file)->Append(bytes.first(half)));
    Hook(DiskKillPoint::kMidWrite);
    KVTIER_RETURN_IF_ERROR((*file)->Append(bytes.subspan(half)));
  } else {
    KVTIER_RETURN_IF_ERROR((*file)->Append(bytes));
  }
  if (options_->durability == Durability::kFsync) KVTIER_RETURN_IF_ERROR((*file)->Sync());
  if (NeedsChmod(options_->file_permissions, 0600)) {
    KVTIER_RETURN_IF_ERROR(env_->Chmod(tmp, options_->file_permissions));
  }
  Hook(DiskKillPoint::kBeforeRename);
  // Moved while still open: the lock covers the temp name until it is gone.
  Status moved = env_->RenameNoReplace(tmp, layout_->BlockPath(key));
  if (!moved.ok() && moved.sys_errno() != EEXIST) return moved;
  const PublishOutcome outcome =
      moved.ok() ? PublishOutcome::kPublished : PublishOutcome::kExisting;
  if (outcome == PublishOutcome::kExisting) (void)env_->RemoveFile(tmp);
  Status closed = (*file)->Close();
  if (!closed.ok()) {
    // The data may not all have reached the file (NFS reports write errors
    // at close): take back what was published.
    if (outcome == PublishOutcome::kPublished) (void)env_->RemoveFile(layout_->BlockPath(key));
    return closed;
  }
  return outcome;
}

Result<PublishOutcome> BlockWriter::Publish(const BlockKey& key, std::span<const std::byte> bytes) {
  const uint8_t prefix = key.bytes[0];
  KVTIER_RETURN_IF_ERROR(EnsureSubdir(prefix));
  for (int attempt = 0;; ++attempt) {
    const std::string tmp = layout_->TempPath(key, env_->ProcessId(), NextUniqueCounter());
    LiveTempFiles::Add(tmp);
    Hook(DiskKillPoint::kBeforeWrite);
    Result<PublishOutcome> out = PublishVia(tmp, key, bytes);
    LiveTempFiles::Remove(tmp);
    if (!out.ok()) {
      (void)env_->RemoveFile(tmp);
      // The temp name vanished between its creation and its lock (another
      // process's reconcile judged it abandoned in that instant), or its
      // subfolder did: write it once more.
      if (out.status().IsNotFound() && attempt == 0) continue;
      return out.status().WithContext("write block " + key.Hex());
    }
    if (*out == PublishOutcome::kPublished && options_->durability == Durability::kFsync) {
      Hook(DiskKillPoint::kBeforeDirSync);
      Status s = env_->SyncDir(layout_->Subdir(prefix));
      if (!s.ok()) {
        (void)env_->RemoveFile(layout_->BlockPath(key));
        return s.WithContext("sync folder of block " + key.Hex());
      }
    }
    return out;
  }
}

}  // namespace kvtier::disk
