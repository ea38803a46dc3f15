// Env: every file, folder, clock and thread-start call kvtier makes.
//
// The library never calls POSIX file or clock functions directly; it goes
// through an Env so that tests can run on an in-memory file system, fail the
// Nth write with ENOSPC, or drop unsynced data (src/testing/). Env::Default()
// is the POSIX implementation and lives for the whole process.
//
// Paths are plain UTF-8 strings with '/' separators. Every failing call
// returns a Status whose sys_errno() carries the errno (ENOSPC maps to
// kResourceExhausted, other errors to kIOError, a missing path to kNotFound).
//
// Thread safety: Env implementations are safe to call from many threads.
// A file object is used by one thread at a time.
#ifndef KVTIER_ENV_H_
#define KVTIER_ENV_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

// A file opened for reading at arbitrary offsets.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  // Reads up to dst.size() bytes at `offset`. Returns the number read, which
  // is smaller than dst.size() only at end of file. Retries EINTR.
  virtual Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> dst) = 0;
  // Starts reading [offset, offset + length) into the page cache in the
  // background (posix_fadvise POSIX_FADV_WILLNEED) and returns without
  // waiting for it: a reader that needs several ranges of a file asks for
  // all of them first, so the device works on them at once, then reads each
  // (ReadAt) as it lands. Advice only: what ReadAt returns is the same with
  // or without it, and a file without a page cache (O_DIRECT, the in-memory
  // Env) does nothing, which is what this default does: an Env of its own
  // need not implement it. An error is the advice's own (the reads may still
  // work).
  virtual Status Prefetch(uint64_t offset, uint64_t length) {
    (void)offset;
    (void)length;
    return Status::Ok();
  }
  // The size of the file when it was opened (fstat).
  virtual uint64_t size() const = 0;
};

// A new file being written front to back.
class WritableFile {
 public:
  // Closes the descriptor if Close() was not called; errors are dropped.
  virtual ~WritableFile() = default;
  // Writes all of `data` (retrying short writes and EINTR) or fails.
  virtual Status Append(std::span<const std::byte> data) = 0;
  // fsync(2) (or fdatasync) of the file's data.
  virtual Status Sync() = 0;
  virtual Status Close() = 0;
};

enum class FileType { kRegular, kDirectory, kSymlink, kFifo, kOther };

struct FileInfo {
  FileType type = FileType::kOther;
  uint64_t size = 0;         // bytes
  int64_t mtime_unix_s = 0;  // modification time, seconds since the epoch
  // Bytes the file system allocated for it (st_blocks × 512): what it takes
  // from the disk, whole blocks or pages, so usually more than `size` (less
  // for a sparse or compressed file).
  uint64_t allocated_bytes = 0;
};

// An advisory lock (flock(2)) a file holds while it is open. Every opener
// of the file sees it: threads, processes, and processes in other pid
// namespaces (containers) sharing the file system.
enum class FileLock : uint8_t { kNone, kShared, kExclusive };

struct ReadFileOptions {
  // O_NOFOLLOW: refuse to open a symlink (ELOOP → kInvalidArgument-ish IOError).
  bool follow_symlinks = false;
  // Try O_DIRECT; falls back to buffered I/O where the file system refuses it.
  // Reads through such a file must then use aligned buffers, offsets, sizes.
  bool direct_io = false;
  // Lock the file while it is open, never waiting: kUnavailable if another
  // open file holds a conflicting lock; kIOError (sys_errno ENOLCK) where
  // the file system has no advisory locks.
  FileLock lock = FileLock::kNone;
  // The reads will be scattered (a partial read of a block's tensors):
  // posix_fadvise(POSIX_FADV_RANDOM) on this open file, so the kernel reads
  // what each ReadAt asks for and no readahead beyond it (a readahead of
  // megabytes after every small read would pull in the tensors a partial
  // read skips). Only this open file is affected. Envs without a page cache
  // ignore it.
  bool random_access = false;
};

struct WriteFileOptions {
  uint32_t permissions = 0600;  // mode bits for a newly created file
  // O_EXCL: fail with kIOError(EEXIST) if the path exists.
  bool exclusive = true;
  // WriteFileAtomic only: fsync the temp file before the rename and the
  // folder after it, so the new content survives a power loss. Default off.
  bool sync = false;
  // CreateFile only: hold an exclusive lock (see ReadFileOptions::lock) on
  // the new file until it is closed, so other processes can tell that it is
  // still being written. Waits out a reader's brief probe; where the file
  // system has no advisory locks the file is simply not locked.
  bool lock = false;
};

class Env {
 public:
  virtual ~Env() = default;

  // The process-wide POSIX Env. Never null; never destroyed.
  static Env* Default();

  // Files.
  virtual Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path,
                                                                const ReadFileOptions& opts) = 0;
  virtual Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& path,
                                                           const WriteFileOptions& opts) = 0;
  // rename(2): atomically replaces `to` if it exists.
  virtual Status RenameFile(const std::string& from, const std::string& to) = 0;
  // Moves the file `from` to `to` only if nothing is at `to`; otherwise fails
  // with kIOError and sys_errno EEXIST and leaves both as they were, so the
  // first of several writers publishing one name wins. Atomic where the file
  // system has renameat2(RENAME_NOREPLACE); elsewhere link(2) then unlink(2)
  // of `from` (a crash in between leaves both names on the one file).
  virtual Status RenameNoReplace(const std::string& from, const std::string& to) = 0;
  virtual Status RemoveFile(const std::string& path) = 0;
  // lstat(2): does not follow a final symlink.
  virtual Result<FileInfo> Stat(const std::string& path) = 0;
  // Sets the permission bits of an existing file or folder.
  virtual Status Chmod(const std::string& path, uint32_t permissions) = 0;

  // Folders.
  // Creates one folder; OK if it already exists as a folder.
  virtual Status CreateDir(const std::string& path, uint32_t permissions) = 0;
  virtual Status RemoveDir(const std::string& path) = 0;
  // Names in `path` without "." and "..", in no particular order.
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;
  // fsync(2) of a folder, making renames and creations in it durable.
  virtual Status SyncDir(const std::string& path) = 0;
  // syncfs(2) of the file system holding `path`.
  virtual Status SyncFileSystem(const std::string& path) = 0;
  // Bytes available to an unprivileged user on the file system of `path`.
  virtual Result<uint64_t> FreeSpace(const std::string& path) = 0;

  // Clocks.
  // Monotonic time for durations and timeouts.
  virtual uint64_t NowMicros() = 0;
  // Wall-clock time for timestamps stored on disk.
  virtual int64_t NowUnixMicros() = 0;
  virtual void SleepForMicros(uint64_t micros) = 0;

  // Processes and threads.
  virtual int ProcessId() = 0;
  // True if a process with this id exists (kill(pid, 0) != ESRCH).
  virtual bool ProcessAlive(int pid) = 0;
  // Starts a thread running `fn`. The caller joins it.
  virtual std::thread StartThread(std::function<void()> fn) = 0;

  // Helpers built on the calls above.
  // Creates `path` and any missing parents.
  Status CreateDirs(const std::string& path, uint32_t permissions);
  // Reads a whole regular file, refusing symlinks, FIFOs, folders and files
  // larger than `max_bytes` (kInvalidArgument / kResourceExhausted).
  Result<std::vector<std::byte>> ReadWholeFile(const std::string& path, uint64_t max_bytes);
  // Writes `data` to `path` through a unique temp file
  // ("<path>.tmp.<pid>.<n>", same folder) and a rename that replaces `path`.
  // `opts.exclusive` is ignored (the temp is always created exclusively);
  // `opts.sync` adds the fsyncs. On failure the temp file is removed.
  Status WriteFileAtomic(const std::string& path, std::span<const std::byte> data,
                         const WriteFileOptions& opts);
};

// An Env that forwards every call to another (the LevelDB pattern): a test
// or tool Env derives from it and overrides only the calls it changes, so
// a new Env method needs no edit in every wrapper.
//
// Ownership: `target` is not owned and must outlive the wrapper.
// Thread safety: as the target's.
class EnvWrapper : public Env {
 public:
  // REQUIRES: target != nullptr.
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }

  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path,
                                                        const ReadFileOptions& opts) override {
    return target_->OpenForRead(path, opts);
  }
  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& path,
                                                   const WriteFileOptions& opts) override {
    return target_->CreateFile(path, opts);
  }
  Status RenameFile(const std::string& from, const std::string& to) override {
    return target_->RenameFile(from, to);
  }
  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    return target_->RenameNoReplace(from, to);
  }
  Status RemoveFile(const std::string& path) override { return target_->RemoveFile(path); }
  Result<FileInfo> Stat(const std::string& path) override { return target_->Stat(path); }
  Status Chmod(const std::string& path, uint32_t permissions) override {
    return target_->Chmod(path, permissions);
  }
  Status CreateDir(const std::string& path, uint32_t permissions) override {
    return target_->CreateDir(path, permissions);
  }
  Status RemoveDir(const std::string& path) override { return target_->RemoveDir(path); }
  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    return target_->ListDir(path);
  }
  Status SyncDir(const std::string& path) override { return target_->SyncDir(path); }
  Status SyncFileSystem(const std::string& path) override { return target_->SyncFileSystem(path); }
  Result<uint64_t> FreeSpace(const std::string& path) override { return target_->FreeSpace(path); }
  uint64_t NowMicros() override { return target_->NowMicros(); }
  int64_t NowUnixMicros() override { return target_->NowUnixMicros(); }
  void SleepForMicros(uint64_t micros) override { target_->SleepForMicros(micros); }
  int ProcessId() override { return target_->ProcessId(); }
  bool ProcessAlive(int pid) override { return target_->ProcessAlive(pid); }
  std::thread StartThread(std::function<void()> fn) override {
    return target_->StartThread(std::move(fn));
  }

 private:
  Env* const target_;
};

// Joins path components with a single '/'.
std::string JoinPath(std::string_view a, std::string_view b);

}  // namespace kvtier

#endif  // KVTIER_ENV_H_
