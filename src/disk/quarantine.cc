#include "disk/quarantine.h"

namespace kvtier::disk {

Status Quarantine::Move(const std::string& path, std::string_view name) {
  Status mk = env_->CreateDir(layout_->QuarantineDir(), dir_permissions_);
  std::string to = layout_->QuarantinePath(name, env_->NowUnixMicros() / 1'000'000,
                                           env_->ProcessId(), NextUniqueCounter());
  Status s = mk.ok() ? env_->RenameFile(path, to) : mk;
  if (s.ok()) {
    DiskCounters::Add(counters_->quarantined);
    counters_->events.Quarantined(path);
    return s;
  }
  if (s.IsNotFound()) return Status::Ok();
  // Could not move it aside: make sure it is never served at least.
  Status rm = RemoveTree(env_, path);
  if (rm.ok() || rm.IsNotFound()) {
    DiskCounters::Add(counters_->quarantined);
    counters_->events.Quarantined(path);
    return Status::Ok();
  }
  DiskCounters::Add(counters_->errors);
  return s.WithContext("quarantine " + path);
}

uint64_t Quarantine::RemoveOlderThan(int64_t cutoff_unix_s) {
  Result<std::vector<std::string>> names = env_->ListDir(layout_->QuarantineDir());
  if (!names.ok()) return 0;
  uint64_t removed = 0;
  for (const std::string& name : *names) {
    int64_t t = QuarantineTimeOf(name);
    if (t < 0 || t >= cutoff_unix_s) continue;
    if (RemoveTree(env_, JoinPath(layout_->QuarantineDir(), name)).ok()) ++removed;
  }
  return removed;
}

uint64_t Quarantine::Count() {
  Result<std::vector<std::string>> names = env_->ListDir(layout_->QuarantineDir());
  return names.ok() ? names->size() : 0;
}

Status RemoveTree(Env* env, const std::string& path, int depth) {
  KVTIER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
  if (info.type != FileType::kDirectory) return env->RemoveFile(path);
  if (depth <= 0) return Status::InvalidArgument("folder too deep to remove: " + path);
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(path));
  for (const std::string& n : names) {
    Status s = RemoveTree(env, JoinPath(path, n), depth - 1);
    if (!s.ok() && !s.IsNotFound()) return s;
  }
  return env->RemoveDir(path);
}

}  // namespace kvtier::disk
