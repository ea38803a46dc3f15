#include "testing/fault_env.h"

#include <cassert>
#include <string>
#include <utility>

#include "core/env_error.h"

namespace kvtier {

std::string_view OpKindName(OpKind kind) {
  switch (kind) {
    case OpKind::kOpenRead:
      return "open for read";
    case OpKind::kCreate:
      return "create";
    case OpKind::kRead:
      return "read";
    case OpKind::kAppend:
      return "write";
    case OpKind::kSync:
      return "fdatasync";
    case OpKind::kClose:
      return "close";
    case OpKind::kRename:
      return "rename";
    case OpKind::kRemove:
      return "unlink";
    case OpKind::kStat:
      return "lstat";
    case OpKind::kCreateDir:
      return "mkdir";
    case OpKind::kListDir:
      return "opendir";
    case OpKind::kSyncDir:
      return "fsync folder";
    case OpKind::kFreeSpace:
      return "statvfs";
    case OpKind::kChmod:
      return "chmod";
    case OpKind::kRemoveDir:
      return "rmdir";
    case OpKind::kSyncFileSystem:
      return "syncfs";
    case OpKind::kPrefetch:
      return "posix_fadvise";
  }
  return "unknown op";
}

class FaultRandomAccessFile final : public RandomAccessFile {
 public:
  FaultRandomAccessFile(FaultInjectionEnv* env, std::unique_ptr<RandomAccessFile> base,
                        std::string path)
      : env_(env), base_(std::move(base)), path_(std::move(path)) {}

  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> dst) override {
    if (auto err = env_->Check(OpKind::kRead)) {
      return FaultInjectionEnv::InjectedError(OpKind::kRead, path_, *err);
    }
    return base_->ReadAt(offset, dst);
  }
  Status Prefetch(uint64_t offset, uint64_t length) override {
    if (auto err = env_->Check(OpKind::kPrefetch)) {
      return FaultInjectionEnv::InjectedError(OpKind::kPrefetch, path_, *err);
    }
    return base_->Prefetch(offset, length);
  }
  uint64_t size() const override { return base_->size(); }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<RandomAccessFile> base_;
  const std::string path_;
};

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionEnv* env, std::unique_ptr<WritableFile> base, std::string path)
      : env_(env), base_(std::move(base)), path_(std::move(path)) {}

  Status Append(std::span<const std::byte> data) override {
    if (auto err = env_->Check(OpKind::kAppend)) {
      size_t torn = std::min(env_->torn_append_bytes(), data.size());
      if (torn > 0) (void)base_->Append(data.first(torn));
      return FaultInjectionEnv::InjectedError(OpKind::kAppend, path_, *err);
    }
    return base_->Append(data);
  }
  Status Sync() override {
    if (auto err = env_->Check(OpKind::kSync)) {
      return FaultInjectionEnv::InjectedError(OpKind::kSync, path_, *err);
    }
    return base_->Sync();
  }
  Status Close() override {
    // close(2) releases the descriptor even when it reports an error.
    Status s = base_->Close();
    if (auto err = env_->Check(OpKind::kClose)) {
      return FaultInjectionEnv::InjectedError(OpKind::kClose, path_, *err);
    }
    return s;
  }

 private:
  FaultInjectionEnv* const env_;
  const std::unique_ptr<WritableFile> base_;
  const std::string path_;
};

FaultInjectionEnv::FaultInjectionEnv(Env* base) : EnvWrapper(base) {}

void FaultInjectionEnv::FailNth(OpKind kind, int n, int err) {
  assert(n >= 1 && err != 0);
  MutexLock lock(&mu_);
  const int k = static_cast<int>(kind);
  fail_at_[k].emplace(calls_[k] + std::max(n, 1), err);
}

void FaultInjectionEnv::FailAll(OpKind kind, int err) {
  MutexLock lock(&mu_);
  fail_all_[static_cast<int>(kind)] = err;
}

void FaultInjectionEnv::Clear() {
  MutexLock lock(&mu_);
  fail_all_.fill(0);
  for (auto& m : fail_at_) m.clear();
  torn_append_bytes_ = 0;
}

void FaultInjectionEnv::SetTornAppendBytes(size_t bytes) {
  MutexLock lock(&mu_);
  torn_append_bytes_ = bytes;
}

size_t FaultInjectionEnv::torn_append_bytes() {
  MutexLock lock(&mu_);
  return torn_append_bytes_;
}

int64_t FaultInjectionEnv::Calls(OpKind kind) {
  MutexLock lock(&mu_);
  return calls_[static_cast<int>(kind)];
}

int64_t FaultInjectionEnv::Injected(OpKind kind) {
  MutexLock lock(&mu_);
  return injected_[static_cast<int>(kind)];
}

void FaultInjectionEnv::ResetCounters() {
  MutexLock lock(&mu_);
  for (int k = 0; k < kNumOpKinds; ++k) {
    // Pending faults keep their distance from "now".
    std::multimap<int64_t, int> shifted;
    for (const auto& [at, err] : fail_at_[k]) shifted.emplace(at - calls_[k], err);
    fail_at_[k] = std::move(shifted);
    calls_[k] = 0;
    injected_[k] = 0;
  }
}

std::optional<int> FaultInjectionEnv::Check(OpKind kind) {
  MutexLock lock(&mu_);
  const int k = static_cast<int>(kind);
  const int64_t call = ++calls_[k];
  std::optional<int> err;
  auto it = fail_at_[k].find(call);
  if (it != fail_at_[k].end()) {
    err = it->second;
    // Several faults planned for one call: the first planned wins, all go.
    fail_at_[k].erase(call);
  } else if (fail_all_[k] != 0) {
    err = fail_all_[k];
  }
  if (err) ++injected_[k];
  return err;
}

Status FaultInjectionEnv::InjectedError(OpKind kind, std::string_view path, int err) {
  std::string op(OpKindName(kind));
  op += " (injected)";
  return PathError(op, path, err);
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectionEnv::OpenForRead(
    const std::string& path, const ReadFileOptions& opts) {
  if (auto err = Check(OpKind::kOpenRead)) return InjectedError(OpKind::kOpenRead, path, *err);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                          target()->OpenForRead(path, opts));
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<FaultRandomAccessFile>(this, std::move(file), path));
}

Result<std::unique_ptr<WritableFile>> FaultInjectionEnv::CreateFile(const std::string& path,
                                                                    const WriteFileOptions& opts) {
  if (auto err = Check(OpKind::kCreate)) return InjectedError(OpKind::kCreate, path, *err);
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, target()->CreateFile(path, opts));
  return std::unique_ptr<WritableFile>(
      std::make_unique<FaultWritableFile>(this, std::move(file), path));
}

Status FaultInjectionEnv::RenameFile(const std::string& from, const std::string& to) {
  if (auto err = Check(OpKind::kRename)) {
    return InjectedError(OpKind::kRename, from + " to " + to, *err);
  }
  return target()->RenameFile(from, to);
}

Status FaultInjectionEnv::RenameNoReplace(const std::string& from, const std::string& to) {
  if (auto err = Check(OpKind::kRename)) {
    return InjectedError(OpKind::kRename, from + " to " + to, *err);
  }
  return target()->RenameNoReplace(from, to);
}

Status FaultInjectionEnv::RemoveFile(const std::string& path) {
  if (auto err = Check(OpKind::kRemove)) return InjectedError(OpKind::kRemove, path, *err);
  return target()->RemoveFile(path);
}

Result<FileInfo> FaultInjectionEnv::Stat(const std::string& path) {
  if (auto err = Check(OpKind::kStat)) return InjectedError(OpKind::kStat, path, *err);
  return target()->Stat(path);
}

Status FaultInjectionEnv::Chmod(const std::string& path, uint32_t permissions) {
  if (auto err = Check(OpKind::kChmod)) return InjectedError(OpKind::kChmod, path, *err);
  return target()->Chmod(path, permissions);
}

Status FaultInjectionEnv::CreateDir(const std::string& path, uint32_t permissions) {
  if (auto err = Check(OpKind::kCreateDir)) return InjectedError(OpKind::kCreateDir, path, *err);
  return target()->CreateDir(path, permissions);
}

Status FaultInjectionEnv::RemoveDir(const std::string& path) {
  if (auto err = Check(OpKind::kRemoveDir)) return InjectedError(OpKind::kRemoveDir, path, *err);
  return target()->RemoveDir(path);
}

Result<std::vector<std::string>> FaultInjectionEnv::ListDir(const std::string& path) {
  if (auto err = Check(OpKind::kListDir)) return InjectedError(OpKind::kListDir, path, *err);
  return target()->ListDir(path);
}

Status FaultInjectionEnv::SyncDir(const std::string& path) {
  if (auto err = Check(OpKind::kSyncDir)) return InjectedError(OpKind::kSyncDir, path, *err);
  return target()->SyncDir(path);
}

Status FaultInjectionEnv::SyncFileSystem(const std::string& path) {
  if (auto err = Check(OpKind::kSyncFileSystem)) {
    return InjectedError(OpKind::kSyncFileSystem, path, *err);
  }
  return target()->SyncFileSystem(path);
}

Result<uint64_t> FaultInjectionEnv::FreeSpace(const std::string& path) {
  if (auto err = Check(OpKind::kFreeSpace)) return InjectedError(OpKind::kFreeSpace, path, *err);
  return target()->FreeSpace(path);
}

}  // namespace kvtier
