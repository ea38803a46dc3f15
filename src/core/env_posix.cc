// The POSIX Env: Env::Default().
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>  // renameat2, RENAME_NOREPLACE
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "core/env_error.h"
#include "kvtier/env.h"

namespace kvtier {

namespace {

FileType TypeOfMode(mode_t mode) {
  if (S_ISREG(mode)) return FileType::kRegular;
  if (S_ISDIR(mode)) return FileType::kDirectory;
  if (S_ISLNK(mode)) return FileType::kSymlink;
  if (S_ISFIFO(mode)) return FileType::kFifo;
  return FileType::kOther;
}

// Opens `path`, retrying EINTR (open of a FIFO or on NFS may be interrupted).
int OpenRetry(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

class PosixRandomAccessFile final : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, uint64_t size, bool direct, std::string path)
      : fd_(fd), size_(size), direct_(direct), path_(std::move(path)) {}
  ~PosixRandomAccessFile() override { ::close(fd_); }

  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> dst) override {
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n =
          ::pread(fd_, dst.data() + done, dst.size() - done, static_cast<off_t>(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        // An unaligned buffer, offset or length under O_DIRECT: drop to
        // buffered reads for this file rather than fail the caller.
        if (errno == EINVAL && direct_ && DisableDirectIo()) continue;
        return PathError("read", path_, errno);
      }
      if (n == 0) break;  // end of file
      done += static_cast<size_t>(n);
    }
    return done;
  }

  Status Prefetch(uint64_t offset, uint64_t length) override {
    // O_DIRECT reads bypass the page cache: a prefetch would only be
    // read twice.
    if (direct_ || length == 0) return Status::Ok();
    const int rc = ::posix_fadvise(fd_, static_cast<off_t>(offset), static_cast<off_t>(length),
                                   POSIX_FADV_WILLNEED);
    if (rc != 0) return PathError("posix_fadvise", path_, rc);  // returns the errno, not -1
    return Status::Ok();
  }

  uint64_t size() const override { return size_; }

 private:
  bool DisableDirectIo() {
    direct_ = false;
    int flags = ::fcntl(fd_, F_GETFL);
    return flags >= 0 && ::fcntl(fd_, F_SETFL, flags & ~O_DIRECT) == 0;
  }

  const int fd_;
  const uint64_t size_;
  bool direct_;
  const std::string path_;
};

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Status Append(std::span<const std::byte> data) override {
    if (fd_ < 0) return Status::FailedPrecondition("append to closed file " + path_);
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        return PathError("write", path_, errno);
      }
      // write(2) returning 0 for a non-empty buffer means no progress is
      // possible; report it instead of spinning.
      if (n == 0) return PathError("write", path_, EIO);
      done += static_cast<size_t>(n);
    }
    return Status::Ok();
  }

  Status Sync() override {
    if (fd_ < 0) return Status::FailedPrecondition("sync of closed file " + path_);
    if (::fdatasync(fd_) != 0) return PathError("fdatasync", path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    if (fd_ < 0) return Status::Ok();
    int fd = std::exchange(fd_, -1);
    // Linux releases the descriptor even when close fails, so never retry.
    if (::close(fd) != 0 && errno != EINTR) return PathError("close", path_, errno);
    return Status::Ok();
  }

 private:
  int fd_;
  const std::string path_;
};

class PosixEnv final : public Env {
 public:
  Result<std::unique_ptr<RandomAccessFile>> OpenForRead(const std::string& path,
                                                        const ReadFileOptions& opts) override {
    // O_NONBLOCK so that opening a FIFO never waits for a writer.
    int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK;
    if (!opts.follow_symlinks) flags |= O_NOFOLLOW;
    bool direct = opts.direct_io;
    int fd = OpenRetry(path.c_str(), direct ? flags | O_DIRECT : flags);
    if (fd < 0 && direct && errno == EINVAL) {  // the file system refuses O_DIRECT
      direct = false;
      fd = OpenRetry(path.c_str(), flags);
    }
    if (fd < 0) {
      if (errno == ELOOP && !opts.follow_symlinks) {
        return Status(StatusCode::kIOError,
                      "open for read " + path + ": is a symlink, and symlinks are not followed",
                      ELOOP);
      }
      return PathError("open for read", path, errno);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      int err = errno;
      ::close(fd);
      return PathError("fstat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::InvalidArgument("open for read " + path + ": is a " +
                                     std::string(FileTypeName(TypeOfMode(st.st_mode))) +
                                     ", not a regular file");
    }
    if (opts.lock != FileLock::kNone) {
      const int op = (opts.lock == FileLock::kShared ? LOCK_SH : LOCK_EX) | LOCK_NB;
      int rc;
      do {
        rc = ::flock(fd, op);
      } while (rc != 0 && errno == EINTR);
      if (rc != 0) {
        const int err = errno;
        ::close(fd);
        if (err == EWOULDBLOCK) {
          return Status::Unavailable("lock " + path + ": another open file holds a lock on it");
        }
        // No advisory locks here (EOPNOTSUPP on some FUSE, ENOLCK on NFS
        // without a lock manager): say so as ENOLCK.
        return Status(StatusCode::kIOError, "lock " + path + ": " + std::strerror(err), ENOLCK);
      }
    }
    // Advice only: a file system that ignores it reads as before, so its
    // failure is not the caller's.
    if (opts.random_access) (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    return std::unique_ptr<RandomAccessFile>(std::make_unique<PosixRandomAccessFile>(
        fd, static_cast<uint64_t>(st.st_size), direct, path));
  }

  Result<std::unique_ptr<WritableFile>> CreateFile(const std::string& path,
                                                   const WriteFileOptions& opts) override {
    const int base = O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW;
    const mode_t mode = static_cast<mode_t>(opts.permissions & 07777);
    int fd = OpenRetry(path.c_str(), base, mode);
    bool created = fd >= 0;
    if (fd < 0 && errno == EEXIST && !opts.exclusive) {
      fd = OpenRetry(path.c_str(), (base & ~(O_CREAT | O_EXCL)) | O_TRUNC);
    }
    if (fd < 0) return PathError("create", path, errno);
    // The umask must not weaken or widen what the caller configured.
    if (created && ::fchmod(fd, mode) != 0) {
      int err = errno;
      ::close(fd);
      ::unlink(path.c_str());
      return PathError("fchmod", path, err);
    }
    if (opts.lock) {
      int rc;
      do {
        rc = ::flock(fd, LOCK_EX);
      } while (rc != 0 && errno == EINTR);
      // rc != 0: no advisory locks on this file system; the file is still
      // usable, only unlocked (ReadFileOptions::lock reports ENOLCK there).
    }
    return std::unique_ptr<WritableFile>(std::make_unique<PosixWritableFile>(fd, path));
  }

  Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return PathError("rename", from + " to " + to, errno);
    }
    return Status::Ok();
  }

  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) {
      return Status::Ok();
    }
    const int err = errno;
    // EINVAL: the file system has no RENAME_NOREPLACE (NFS, some FUSE);
    // ENOSYS: the kernel has no renameat2. link(2) refuses an existing
    // name just the same.
    if (err != EINVAL && err != ENOSYS) return PathError("rename", from + " to " + to, err);
    if (::link(from.c_str(), to.c_str()) != 0) {
      return PathError("link", from + " to " + to, errno);
    }
    if (::unlink(from.c_str()) != 0 && errno != ENOENT) {
      return PathError("unlink", from, errno);
    }
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return PathError("unlink", path, errno);
    return Status::Ok();
  }

  Result<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) return PathError("lstat", path, errno);
    FileInfo info;
    info.type = TypeOfMode(st.st_mode);
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime_unix_s = static_cast<int64_t>(st.st_mtim.tv_sec);
    info.allocated_bytes = static_cast<uint64_t>(st.st_blocks) * 512;
    return info;
  }

  Status Chmod(const std::string& path, uint32_t permissions) override {
    if (::chmod(path.c_str(), static_cast<mode_t>(permissions & 07777)) != 0) {
      return PathError("chmod", path, errno);
    }
    return Status::Ok();
  }

  Status CreateDir(const std::string& path, uint32_t permissions) override {
    const mode_t mode = static_cast<mode_t>(permissions & 07777);
    if (::mkdir(path.c_str(), mode) != 0) {
      int err = errno;
      if (err != EEXIST) return PathError("mkdir", path, err);
      // stat, not lstat: a symlink to a folder is a usable folder.
      struct stat st;
      if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
      return Status(StatusCode::kIOError, "mkdir " + path + ": exists and is not a folder", EEXIST);
    }
    if (::chmod(path.c_str(), mode) != 0) return PathError("chmod", path, errno);
    return Status::Ok();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return PathError("rmdir", path, errno);
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return PathError("opendir", path, errno);
    std::vector<std::string> names;
    while (true) {
      errno = 0;
      struct dirent* e = ::readdir(dir);
      if (e == nullptr) {
        int err = errno;
        ::closedir(dir);
        if (err != 0) return PathError("readdir", path, err);
        return names;
      }
      std::string_view name(e->d_name);
      if (name == "." || name == "..") continue;
      names.emplace_back(name);
    }
  }

  Status SyncDir(const std::string& path) override {
    int fd = OpenRetry(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return PathError("open folder", path, errno);
    Status s;
    if (::fsync(fd) != 0) s = PathError("fsync folder", path, errno);
    ::close(fd);
    return s;
  }

  Status SyncFileSystem(const std::string& path) override {
    int fd = OpenRetry(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) return PathError("open", path, errno);
    Status s;
    if (::syncfs(fd) != 0) s = PathError("syncfs", path, errno);
    ::close(fd);
    return s;
  }

  Result<uint64_t> FreeSpace(const std::string& path) override {
    struct statvfs vfs;
    if (::statvfs(path.c_str(), &vfs) != 0) return PathError("statvfs", path, errno);
    return static_cast<uint64_t>(vfs.f_bavail) * static_cast<uint64_t>(vfs.f_frsize);
  }

  uint64_t NowMicros() override {
    struct timespec ts;
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1000000u + static_cast<uint64_t>(ts.tv_nsec) / 1000u;
  }

  int64_t NowUnixMicros() override {
    struct timespec ts;
    ::clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000 + static_cast<int64_t>(ts.tv_nsec) / 1000;
  }

  void SleepForMicros(uint64_t micros) override {
    struct timespec req;
    req.tv_sec = static_cast<time_t>(micros / 1000000u);
    req.tv_nsec = static_cast<long>(micros % 1000000u) * 1000;
    while (::nanosleep(&req, &req) != 0 && errno == EINTR) {
    }
  }

  int ProcessId() override { return static_cast<int>(::getpid()); }

  bool ProcessAlive(int pid) override {
    // kill(0) and kill(-n) address process groups, never one process.
    if (pid <= 0) return false;
    if (::kill(static_cast<pid_t>(pid), 0) == 0) return true;
    return errno != ESRCH;  // EPERM: it exists but belongs to someone else
  }

  std::thread StartThread(std::function<void()> fn) override { return std::thread(std::move(fn)); }
};

}  // namespace

Env* Env::Default() {
  // Never destroyed: threads may still use it while static destructors run.
  static Env* const env = new PosixEnv();
  return env;
}

}  // namespace kvtier
