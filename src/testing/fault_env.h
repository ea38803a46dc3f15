// FaultInjectionEnv: an Env that forwards to another Env (an EnvWrapper)
// and fails chosen file and folder calls with a chosen errno, for tests of error paths (ENOSPC,
// EIO, ...).
//
//   FaultInjectionEnv env(&memory_env);
//   env.FailNth(OpKind::kAppend, 3, ENOSPC);  // the 3rd Append from now fails
//   env.FailAll(OpKind::kSyncDir, EIO);       // every SyncDir fails until Clear()
//
// An injected failure does not reach the wrapped Env (the call "did not
// happen"), except Close, which still closes the wrapped file, and Append
// when SetTornAppendBytes(n) is set: then the first n bytes of the data are
// written before the failure, as a torn write would leave them. The status of
// an injected failure is the one the POSIX Env gives for that errno (ENOENT →
// kNotFound, ENOSPC → kResourceExhausted, otherwise kIOError) with the errno
// in sys_errno() and "(injected)" in the message.
//
// Every call is counted per kind, failed or not (Calls()); the helpers
// CreateDirs, ReadWholeFile and WriteFileAtomic count as the calls they make.
//
// Ownership: the wrapped Env is not owned and must outlive this one; files
// returned must not outlive it either.
// Thread safety: all methods may be called from any thread.
#ifndef KVTIER_TESTING_FAULT_ENV_H_
#define KVTIER_TESTING_FAULT_ENV_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string_view>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"

namespace kvtier {

enum class OpKind : int {
  kOpenRead,        // Env::OpenForRead
  kCreate,          // Env::CreateFile
  kRead,            // RandomAccessFile::ReadAt
  kAppend,          // WritableFile::Append
  kSync,            // WritableFile::Sync
  kClose,           // WritableFile::Close
  kRename,          // Env::RenameFile and Env::RenameNoReplace
  kRemove,          // Env::RemoveFile
  kStat,            // Env::Stat
  kCreateDir,       // Env::CreateDir
  kListDir,         // Env::ListDir
  kSyncDir,         // Env::SyncDir
  kFreeSpace,       // Env::FreeSpace
  kChmod,           // Env::Chmod
  kRemoveDir,       // Env::RemoveDir
  kSyncFileSystem,  // Env::SyncFileSystem
  kPrefetch,        // RandomAccessFile::Prefetch
};
inline constexpr int kNumOpKinds = 17;

std::string_view OpKindName(OpKind kind);

class FaultInjectionEnv final : public EnvWrapper {
 public:
  explicit FaultInjectionEnv(Env* base);

  // The n-th call of `kind` from now (n >= 1; 1 = the next one) fails with
  // errno `err`. Several may be pending for one kind.
  // REQUIRES: n >= 1, err != 0.
  void FailNth(OpKind kind, int n, int err);
  // Every call of `kind` from now fails with `err` until Clear().
  void FailAll(OpKind kind, int err);
  // Drops every pending and permanent fault. Counters are kept.
  void Clear();
  // Failed Appends write the first `bytes` of their data first (0: nothing).
  void SetTornAppendBytes(size_t bytes);

  // Calls of `kind` so far, including failed ones.
  int64_t Calls(OpKind kind);
  // Calls of `kind` that were failed by injection.
  int64_t Injected(OpKind kind);
  void ResetCounters();

  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path,
                                                        const ReadFileOptions& opts) override;
  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& path,
                                                   const WriteFileOptions& opts) override;
  Status RenameFile(const std::string& from, const std::string& to) override;
  Status RenameNoReplace(const std::string& from, const std::string& to) override;
  Status RemoveFile(const std::string& path) override;
  Result<FileInfo> Stat(const std::string& path) override;
  Status Chmod(const std::string& path, uint32_t permissions) override;
  Status CreateDir(const std::string& path, uint32_t permissions) override;
  Status RemoveDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Status SyncDir(const std::string& path) override;
  Status SyncFileSystem(const std::string& path) override;
  Result<uint64_t> FreeSpace(const std::string& path) override;
  // Clocks, processes and threads: forwarded as they are (EnvWrapper).

  // The status an injected failure of `kind` on `path` returns.
  static Status InjectedError(OpKind kind, std::string_view path, int err);

 private:
  friend class FaultRandomAccessFile;
  friend class FaultWritableFile;

  // Counts a call of `kind` and returns the errno to fail it with, if any.
  std::optional<int> Check(OpKind kind);
  size_t torn_append_bytes();

  Mutex mu_;
  std::array<int64_t, kNumOpKinds> calls_ GUARDED_BY(mu_) = {};
  std::array<int64_t, kNumOpKinds> injected_ GUARDED_BY(mu_) = {};
  std::array<int, kNumOpKinds> fail_all_ GUARDED_BY(mu_) = {};  // errno or 0
  // Per kind: call number (1-based, since ResetCounters) → errno.
  std::array<std::multimap<int64_t, int>, kNumOpKinds> fail_at_ GUARDED_BY(mu_);
  size_t torn_append_bytes_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_TESTING_FAULT_ENV_H_
