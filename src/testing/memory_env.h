// MemoryEnv: an Env whose files and folders live in RAM, for tests.
//
// It behaves like a POSIX file system as far as kvtier can tell: folders with
// entries, regular files, symlinks and FIFOs (made with AddSymlink/AddFifo),
// owner permission bits that are enforced (EACCES), ENOENT/ENOTDIR/EISDIR/
// ENOTEMPTY/EEXIST where POSIX gives them, and a capacity: a write past it
// stores the bytes that fit and then fails with ENOSPC, as write(2) does.
//
// It also models what a power loss keeps. A file's contents survive only up
// to its last WritableFile::Sync(); a folder's entries (files and folders
// created, renamed into, renamed out of or removed from it) only as of its
// last SyncDir(). DropUnsyncedData() applies exactly that to the whole tree.
// SyncFileSystem() (and SyncEverything()) make everything durable.
//
// Time is fake: NowMicros() starts at options.start_micros and moves only by
// AdvanceClock() or SleepForMicros() (which advances it and yields instead of
// sleeping). ProcessId() is options.pid; ProcessAlive() is true for it and
// for the pids marked with SetProcessAlive(). StartThread() starts a real
// std::thread.
//
// Ownership: files returned by the Env refer to it and must not outlive it.
// Thread safety: every method may be called from any thread; one mutex
// guards the whole tree (there is no real I/O to keep outside it).
#ifndef KVTIER_TESTING_MEMORY_ENV_H_
#define KVTIER_TESTING_MEMORY_ENV_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"

namespace kvtier {

struct MemoryEnvOptions {
  // Total bytes of file contents the file system holds; FreeSpace() reports
  // what is left and writes past it fail with ENOSPC. Default 1 TiB.
  uint64_t capacity_bytes = uint64_t{1} << 40;
  // The file system's allocation unit: a file of n bytes takes n rounded up
  // to a multiple of it from the capacity (Stat's allocated_bytes), as a
  // page-based tmpfs or a 4 KiB-block ext4 does. Default 1 (exactly n).
  uint64_t allocation_unit_bytes = 1;
  // What ProcessId() returns. Default 4242.
  int pid = 4242;
  // NowMicros() at construction, in microseconds. Default 1 s.
  uint64_t start_micros = 1'000'000;
  // NowUnixMicros() at construction. Default 2023-11-14T22:13:20Z.
  int64_t start_unix_micros = 1'700'000'000'000'000;
};

class MemoryEnv final : public Env {
 public:
  explicit MemoryEnv(const MemoryEnvOptions& options = {});
  ~MemoryEnv() override;
  MemoryEnv(const MemoryEnv&) = delete;
  MemoryEnv& operator=(const MemoryEnv&) = delete;

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
  uint64_t NowMicros() override;
  int64_t NowUnixMicros() override;
  void SleepForMicros(uint64_t micros) override;
  int ProcessId() override;
  bool ProcessAlive(int pid) override;
  std::thread StartThread(std::function<void()> fn) override;

  // Test controls.
  // Moves both clocks forward.
  void AdvanceClock(uint64_t micros);
  void SetCapacity(uint64_t bytes);
  // Bytes allocated to file contents reachable from the root.
  uint64_t UsedBytes();
  // `bytes` of contents rounded up to the allocation unit.
  uint64_t AllocatedFor(uint64_t bytes) const;
  void SetProcessAlive(int pid, bool alive);
  // Makes a symlink / FIFO at `path` (the Env API has no call for them).
  Status AddSymlink(const std::string& path, const std::string& target);
  Status AddFifo(const std::string& path);
  // Simulates a power loss and reboot; see the class comment.
  void DropUnsyncedData();
  // Makes the current state durable, as after a full sync.
  void SyncEverything();

  struct Inode;  // public for the file classes in memory_env.cc

 private:
  using InodePtr = std::shared_ptr<Inode>;
  // Where a path lands: its folder, last name, and the node (null if absent).
  struct Where {
    InodePtr parent;
    std::string name;
    InodePtr node;
  };

  // Walks to `path`. Fails with ENOENT/ENOTDIR/EACCES if a folder above it is
  // missing, not a folder or not searchable; the node itself may be absent.
  Result<Where> LookupLocked(std::string_view op, const std::string& path) REQUIRES(mu_);
  // Like LookupLocked, and the node must exist.
  Result<Where> FindLocked(std::string_view op, const std::string& path) REQUIRES(mu_);
  // Follows symlinks at the end of `path`.
  Result<Where> FollowLocked(std::string_view op, const std::string& path) REQUIRES(mu_);
  // EACCES unless the folder allows creating and removing entries.
  Status CheckWritableDirLocked(std::string_view op, const std::string& path, const Inode& dir)
      REQUIRES(mu_);
  Status AddNodeLocked(std::string_view op, const std::string& path, InodePtr node) REQUIRES(mu_);
  // One name less for `node`; frees its bytes when no name is left.
  void UnlinkLocked(const InodePtr& node) REQUIRES(mu_);
  void RecountLocked() REQUIRES(mu_);
  int64_t NowUnixSecondsLocked() REQUIRES(mu_);

  const MemoryEnvOptions options_;
  std::atomic<uint64_t> now_micros_;
  Mutex mu_;
  // The inodes under root_ are guarded by mu_ as well (not annotated: the
  // analysis cannot name this Env's mutex from an Inode).
  InodePtr root_ GUARDED_BY(mu_);
  uint64_t capacity_bytes_ GUARDED_BY(mu_);
  uint64_t used_bytes_ GUARDED_BY(mu_) = 0;
  std::set<int> alive_pids_ GUARDED_BY(mu_);

  friend class MemoryWritableFile;
  friend class MemoryRandomAccessFile;
};

}  // namespace kvtier

#endif  // KVTIER_TESTING_MEMORY_ENV_H_
