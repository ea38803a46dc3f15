#include "testing/memory_env.h"

#include <cerrno>
#include <cstring>
#include <unordered_set>
#include <utility>

#include "core/env_error.h"

namespace kvtier {

struct MemoryEnv::Inode {
  FileType type = FileType::kRegular;
  uint32_t mode = 0600;
  int64_t mtime_unix_s = 0;
  std::vector<std::byte> data;    // regular files: current contents
  std::vector<std::byte> synced;  // regular files: contents as of the last Sync
  std::string target;             // symlinks
  // Folders: current entries, and the entries as of the last SyncDir.
  std::map<std::string, InodePtr> children;
  std::map<std::string, InodePtr> durable_children;
  int links = 0;  // names pointing here in the current tree
  // Advisory locks of open files (FileLock).
  int shared_locks = 0;
  bool exclusive_lock = false;
};

namespace {

constexpr int kMaxSymlinkHops = 8;

// Splits a path into names, dropping empty and "." parts and applying "..".
// Relative paths are taken from the root.
std::vector<std::string> SplitPath(std::string_view path) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos <= path.size()) {
    size_t slash = path.find('/', pos);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(pos, slash - pos);
    if (part == "..") {
      if (!parts.empty()) parts.pop_back();
    } else if (!part.empty() && part != ".") {
      parts.emplace_back(part);
    }
    pos = slash + 1;
  }
  return parts;
}

}  // namespace

class MemoryRandomAccessFile final : public RandomAccessFile {
 public:
  // REQUIRES: `lock` is already taken on `inode` (under the Env's mutex).
  MemoryRandomAccessFile(MemoryEnv* env, std::shared_ptr<MemoryEnv::Inode> inode, uint64_t size,
                         FileLock lock)
      : env_(env), inode_(std::move(inode)), size_(size), lock_(lock) {}
  ~MemoryRandomAccessFile() override {
    if (lock_ == FileLock::kNone) return;
    MutexLock lock(&env_->mu_);
    if (lock_ == FileLock::kShared) {
      --inode_->shared_locks;
    } else {
      inode_->exclusive_lock = false;
    }
  }

  Result<size_t> ReadAt(uint64_t offset, std::span<std::byte> dst) override {
    MutexLock lock(&env_->mu_);
    const std::vector<std::byte>& data = inode_->data;
    if (offset >= data.size()) return size_t{0};
    size_t n = std::min<uint64_t>(dst.size(), data.size() - offset);
    if (n > 0) std::memcpy(dst.data(), data.data() + offset, n);
    return n;
  }

  // No Prefetch: no page cache, every ReadAt is already at memory speed.

  uint64_t size() const override { return size_; }

 private:
  MemoryEnv* const env_;
  const std::shared_ptr<MemoryEnv::Inode> inode_;
  const uint64_t size_;
  const FileLock lock_;
};

class MemoryWritableFile final : public WritableFile {
 public:
  // REQUIRES: if `locked`, the exclusive lock is already taken on `inode`.
  MemoryWritableFile(MemoryEnv* env, std::shared_ptr<MemoryEnv::Inode> inode, std::string path,
                     bool locked)
      : env_(env), inode_(std::move(inode)), path_(std::move(path)), locked_(locked) {}
  ~MemoryWritableFile() override { Unlock(); }

  Status Append(std::span<const std::byte> data) override {
    if (closed_) return Status::FailedPrecondition("append to closed file " + path_);
    MutexLock lock(&env_->mu_);
    uint64_t room =
        env_->used_bytes_ >= env_->capacity_bytes_ ? 0 : env_->capacity_bytes_ - env_->used_bytes_;
    // Like write(2) on a full disk: what fits is written, then ENOSPC. The
    // file grows within its last allocated unit for free, then by whole units.
    const uint64_t unit = std::max<uint64_t>(env_->options_.allocation_unit_bytes, 1);
    const uint64_t old_size = inode_->data.size();
    const uint64_t old_alloc = env_->AllocatedFor(old_size);
    const uint64_t max_size = (old_alloc + room) / unit * unit;
    size_t n = std::min<uint64_t>(max_size - std::min(max_size, old_size), data.size());
    inode_->data.insert(inode_->data.end(), data.begin(), data.begin() + n);
    if (inode_->links > 0) env_->used_bytes_ += env_->AllocatedFor(old_size + n) - old_alloc;
    inode_->mtime_unix_s = env_->NowUnixSecondsLocked();
    if (n < data.size()) return PathError("write", path_, ENOSPC);
    return Status::Ok();
  }

  Status Sync() override {
    if (closed_) return Status::FailedPrecondition("sync of closed file " + path_);
    MutexLock lock(&env_->mu_);
    inode_->synced = inode_->data;
    return Status::Ok();
  }

  Status Close() override {
    closed_ = true;
    Unlock();
    return Status::Ok();
  }

 private:
  void Unlock() {
    if (!locked_) return;
    locked_ = false;
    MutexLock lock(&env_->mu_);
    inode_->exclusive_lock = false;
  }

  MemoryEnv* const env_;
  const std::shared_ptr<MemoryEnv::Inode> inode_;
  const std::string path_;
  bool closed_ = false;
  bool locked_;
};

MemoryEnv::MemoryEnv(const MemoryEnvOptions& options)
    : options_(options),
      now_micros_(options.start_micros),
      root_(std::make_shared<Inode>()),
      capacity_bytes_(options.capacity_bytes) {
  root_->type = FileType::kDirectory;
  root_->mode = 0755;
  root_->links = 1;
}

MemoryEnv::~MemoryEnv() = default;

int64_t MemoryEnv::NowUnixSecondsLocked() { return NowUnixMicros() / 1000000; }

Result<MemoryEnv::Where> MemoryEnv::LookupLocked(std::string_view op, const std::string& path) {
  std::vector<std::string> parts = SplitPath(path);
  if (parts.empty()) {
    // The root: its own parent, for the checks callers make.
    return Where{root_, "", root_};
  }
  InodePtr dir = root_;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    auto it = dir->children.find(parts[i]);
    if (it == dir->children.end()) return PathError(op, path, ENOENT);
    dir = it->second;
    if (dir->type != FileType::kDirectory) return PathError(op, path, ENOTDIR);
    if ((dir->mode & 0100) == 0) return PathError(op, path, EACCES);
  }
  Where w{dir, parts.back(), nullptr};
  auto it = dir->children.find(w.name);
  if (it != dir->children.end()) w.node = it->second;
  return w;
}

Result<MemoryEnv::Where> MemoryEnv::FindLocked(std::string_view op, const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(Where w, LookupLocked(op, path));
  if (w.node == nullptr) return PathError(op, path, ENOENT);
  return w;
}

Result<MemoryEnv::Where> MemoryEnv::FollowLocked(std::string_view op, const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop <= kMaxSymlinkHops; ++hop) {
    KVTIER_ASSIGN_OR_RETURN(Where w, FindLocked(op, current));
    if (w.node->type != FileType::kSymlink) return w;
    const std::string& target = w.node->target;
    if (!target.empty() && target.front() == '/') {
      current = target;
    } else {
      std::vector<std::string> parts = SplitPath(current);
      parts.pop_back();
      std::string base;
      for (const std::string& p : parts) base += "/" + p;
      current = base + "/" + target;
    }
  }
  return PathError(op, path, ELOOP);
}

Status MemoryEnv::CheckWritableDirLocked(std::string_view op, const std::string& path,
                                         const Inode& dir) {
  if ((dir.mode & 0300) != 0300) return PathError(op, path, EACCES);
  return Status::Ok();
}

Status MemoryEnv::AddNodeLocked(std::string_view op, const std::string& path, InodePtr node) {
  KVTIER_ASSIGN_OR_RETURN(Where w, LookupLocked(op, path));
  if (w.node != nullptr) return PathError(op, path, EEXIST);
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked(op, path, *w.parent));
  node->mtime_unix_s = NowUnixSecondsLocked();
  node->links = 1;
  w.parent->children[w.name] = std::move(node);
  return Status::Ok();
}

void MemoryEnv::UnlinkLocked(const InodePtr& node) {
  if (--node->links == 0 && node->type == FileType::kRegular) {
    used_bytes_ -= std::min<uint64_t>(used_bytes_, AllocatedFor(node->data.size()));
  }
}

Result<std::unique_ptr<RandomAccessFile>> MemoryEnv::OpenForRead(const std::string& path,
                                                                 const ReadFileOptions& opts) {
  MutexLock lock(&mu_);
  Where w;
  if (opts.follow_symlinks) {
    KVTIER_ASSIGN_OR_RETURN(w, FollowLocked("open for read", path));
  } else {
    KVTIER_ASSIGN_OR_RETURN(w, FindLocked("open for read", path));
    if (w.node->type == FileType::kSymlink) {
      return Status(StatusCode::kIOError,
                    "open for read " + path + ": is a symlink, and symlinks are not followed",
                    ELOOP);
    }
  }
  if ((w.node->mode & 0400) == 0) return PathError("open for read", path, EACCES);
  if (w.node->type != FileType::kRegular) {
    return Status::InvalidArgument("open for read " + path + ": is a " +
                                   std::string(FileTypeName(w.node->type)) +
                                   ", not a regular file");
  }
  if (opts.lock == FileLock::kShared) {
    if (w.node->exclusive_lock) {
      return Status::Unavailable("lock " + path + ": another open file holds a lock on it");
    }
    ++w.node->shared_locks;
  } else if (opts.lock == FileLock::kExclusive) {
    if (w.node->exclusive_lock || w.node->shared_locks > 0) {
      return Status::Unavailable("lock " + path + ": another open file holds a lock on it");
    }
    w.node->exclusive_lock = true;
  }
  return std::unique_ptr<RandomAccessFile>(
      std::make_unique<MemoryRandomAccessFile>(this, w.node, w.node->data.size(), opts.lock));
}

Result<std::unique_ptr<WritableFile>> MemoryEnv::CreateFile(const std::string& path,
                                                            const WriteFileOptions& opts) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, LookupLocked("create", path));
  if (w.node == root_) return PathError("create", path, EISDIR);
  InodePtr node = w.node;
  if (node != nullptr) {
    if (opts.exclusive) return PathError("create", path, EEXIST);
    if (node->type == FileType::kSymlink) return PathError("create", path, ELOOP);
    if (node->type == FileType::kDirectory) return PathError("create", path, EISDIR);
    if ((node->mode & 0200) == 0) return PathError("create", path, EACCES);
    used_bytes_ -= std::min<uint64_t>(used_bytes_, AllocatedFor(node->data.size()));
    node->data.clear();  // O_TRUNC
    node->mtime_unix_s = NowUnixSecondsLocked();
  } else {
    node = std::make_shared<Inode>();
    node->type = FileType::kRegular;
    node->mode = opts.permissions & 07777;
    KVTIER_RETURN_IF_ERROR(AddNodeLocked("create", path, node));
  }
  // A new file cannot be locked by anyone yet; an existing one held by
  // another open file stays unlocked here (the POSIX Env would wait).
  const bool locked = opts.lock && !node->exclusive_lock && node->shared_locks == 0;
  if (locked) node->exclusive_lock = true;
  return std::unique_ptr<WritableFile>(
      std::make_unique<MemoryWritableFile>(this, node, path, locked));
}

Status MemoryEnv::RenameFile(const std::string& from, const std::string& to) {
  const std::string op = "rename";
  const std::string both = from + " to " + to;
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where src, FindLocked(op, from));
  KVTIER_ASSIGN_OR_RETURN(Where dst, LookupLocked(op, to));
  if (src.node == root_ || dst.node == root_) return PathError(op, both, EBUSY);
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked(op, both, *src.parent));
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked(op, both, *dst.parent));
  if (src.node == dst.node) return Status::Ok();
  const bool src_dir = src.node->type == FileType::kDirectory;
  if (dst.node != nullptr) {
    const bool dst_dir = dst.node->type == FileType::kDirectory;
    if (src_dir && !dst_dir) return PathError(op, both, ENOTDIR);
    if (!src_dir && dst_dir) return PathError(op, both, EISDIR);
    if (dst_dir && !dst.node->children.empty()) return PathError(op, both, ENOTEMPTY);
  }
  if (src_dir) {
    // A folder cannot move below itself.
    std::vector<std::string> a = SplitPath(from), b = SplitPath(to);
    if (b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin())) {
      return PathError(op, both, EINVAL);
    }
  }
  InodePtr moving = src.node;
  src.parent->children.erase(src.name);
  if (dst.node != nullptr) UnlinkLocked(dst.node);
  dst.parent->children[dst.name] = std::move(moving);
  return Status::Ok();
}

Status MemoryEnv::RenameNoReplace(const std::string& from, const std::string& to) {
  const std::string op = "rename";
  const std::string both = from + " to " + to;
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where src, FindLocked(op, from));
  KVTIER_ASSIGN_OR_RETURN(Where dst, LookupLocked(op, to));
  if (src.node == root_ || dst.node == root_) return PathError(op, both, EBUSY);
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked(op, both, *src.parent));
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked(op, both, *dst.parent));
  if (dst.node != nullptr) return PathError(op, both, EEXIST);
  if (src.node->type == FileType::kDirectory) {
    std::vector<std::string> a = SplitPath(from), b = SplitPath(to);
    if (b.size() > a.size() && std::equal(a.begin(), a.end(), b.begin())) {
      return PathError(op, both, EINVAL);
    }
  }
  InodePtr moving = src.node;
  src.parent->children.erase(src.name);
  dst.parent->children[dst.name] = std::move(moving);
  return Status::Ok();
}

Status MemoryEnv::RemoveFile(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FindLocked("unlink", path));
  if (w.node->type == FileType::kDirectory) return PathError("unlink", path, EISDIR);
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked("unlink", path, *w.parent));
  w.parent->children.erase(w.name);
  UnlinkLocked(w.node);
  return Status::Ok();
}

Result<FileInfo> MemoryEnv::Stat(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FindLocked("lstat", path));
  FileInfo info;
  info.type = w.node->type;
  info.size = w.node->type == FileType::kRegular   ? w.node->data.size()
              : w.node->type == FileType::kSymlink ? w.node->target.size()
                                                   : 0;
  info.mtime_unix_s = w.node->mtime_unix_s;
  if (w.node->type == FileType::kRegular) info.allocated_bytes = AllocatedFor(info.size);
  return info;
}

Status MemoryEnv::Chmod(const std::string& path, uint32_t permissions) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FollowLocked("chmod", path));
  w.node->mode = permissions & 07777;
  return Status::Ok();
}

Status MemoryEnv::CreateDir(const std::string& path, uint32_t permissions) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, LookupLocked("mkdir", path));
  if (w.node != nullptr) {
    // As mkdir -p: an existing folder, or a symlink to one, is fine.
    Result<Where> real = FollowLocked("mkdir", path);
    if (real.ok() && real->node->type == FileType::kDirectory) return Status::Ok();
    return Status(StatusCode::kIOError, "mkdir " + path + ": exists and is not a folder", EEXIST);
  }
  auto node = std::make_shared<Inode>();
  node->type = FileType::kDirectory;
  node->mode = permissions & 07777;
  return AddNodeLocked("mkdir", path, std::move(node));
}

Status MemoryEnv::RemoveDir(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FindLocked("rmdir", path));
  if (w.node == root_) return PathError("rmdir", path, EBUSY);
  if (w.node->type != FileType::kDirectory) return PathError("rmdir", path, ENOTDIR);
  if (!w.node->children.empty()) return PathError("rmdir", path, ENOTEMPTY);
  KVTIER_RETURN_IF_ERROR(CheckWritableDirLocked("rmdir", path, *w.parent));
  w.parent->children.erase(w.name);
  UnlinkLocked(w.node);
  return Status::Ok();
}

Result<std::vector<std::string>> MemoryEnv::ListDir(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FollowLocked("opendir", path));
  if (w.node->type != FileType::kDirectory) return PathError("opendir", path, ENOTDIR);
  if ((w.node->mode & 0400) == 0) return PathError("opendir", path, EACCES);
  std::vector<std::string> names;
  names.reserve(w.node->children.size());
  for (const auto& [name, child] : w.node->children) names.push_back(name);
  return names;
}

Status MemoryEnv::SyncDir(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Where w, FollowLocked("open folder", path));
  if (w.node->type != FileType::kDirectory) return PathError("open folder", path, ENOTDIR);
  w.node->durable_children = w.node->children;
  return Status::Ok();
}

Status MemoryEnv::SyncFileSystem(const std::string& path) {
  {
    MutexLock lock(&mu_);
    KVTIER_RETURN_IF_ERROR(FindLocked("open", path).status());
  }
  SyncEverything();
  return Status::Ok();
}

Result<uint64_t> MemoryEnv::FreeSpace(const std::string& path) {
  MutexLock lock(&mu_);
  KVTIER_RETURN_IF_ERROR(FindLocked("statvfs", path).status());
  return used_bytes_ >= capacity_bytes_ ? 0 : capacity_bytes_ - used_bytes_;
}

uint64_t MemoryEnv::NowMicros() { return now_micros_.load(); }

int64_t MemoryEnv::NowUnixMicros() {
  return options_.start_unix_micros +
         static_cast<int64_t>(now_micros_.load() - options_.start_micros);
}

void MemoryEnv::SleepForMicros(uint64_t micros) {
  now_micros_.fetch_add(micros);
  std::this_thread::yield();
}

int MemoryEnv::ProcessId() { return options_.pid; }

bool MemoryEnv::ProcessAlive(int pid) {
  if (pid == options_.pid) return true;
  MutexLock lock(&mu_);
  return alive_pids_.count(pid) > 0;
}

std::thread MemoryEnv::StartThread(std::function<void()> fn) { return std::thread(std::move(fn)); }

void MemoryEnv::AdvanceClock(uint64_t micros) { now_micros_.fetch_add(micros); }

void MemoryEnv::SetCapacity(uint64_t bytes) {
  MutexLock lock(&mu_);
  capacity_bytes_ = bytes;
}

uint64_t MemoryEnv::UsedBytes() {
  MutexLock lock(&mu_);
  return used_bytes_;
}

void MemoryEnv::SetProcessAlive(int pid, bool alive) {
  MutexLock lock(&mu_);
  if (alive) {
    alive_pids_.insert(pid);
  } else {
    alive_pids_.erase(pid);
  }
}

Status MemoryEnv::AddSymlink(const std::string& path, const std::string& target) {
  MutexLock lock(&mu_);
  auto node = std::make_shared<Inode>();
  node->type = FileType::kSymlink;
  node->mode = 0777;
  node->target = target;
  return AddNodeLocked("symlink", path, std::move(node));
}

Status MemoryEnv::AddFifo(const std::string& path) {
  MutexLock lock(&mu_);
  auto node = std::make_shared<Inode>();
  node->type = FileType::kFifo;
  node->mode = 0600;
  return AddNodeLocked("mkfifo", path, std::move(node));
}

void MemoryEnv::DropUnsyncedData() {
  MutexLock lock(&mu_);
  // Every folder reachable after the reboot shows its durable entries, and
  // every file its synced contents. A folder may be reachable by two names
  // (moved and both parents synced); the visited set handles that.
  std::unordered_set<Inode*> seen;
  std::vector<InodePtr> stack = {root_};
  while (!stack.empty()) {
    InodePtr node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (node->type == FileType::kRegular) {
      node->data = node->synced;
    } else if (node->type == FileType::kDirectory) {
      node->children = node->durable_children;
      for (const auto& [name, child] : node->children) stack.push_back(child);
    }
  }
  RecountLocked();
}

void MemoryEnv::SyncEverything() {
  MutexLock lock(&mu_);
  std::unordered_set<Inode*> seen;
  std::vector<InodePtr> stack = {root_};
  while (!stack.empty()) {
    InodePtr node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    if (node->type == FileType::kRegular) {
      node->synced = node->data;
    } else if (node->type == FileType::kDirectory) {
      node->durable_children = node->children;
      for (const auto& [name, child] : node->children) stack.push_back(child);
    }
  }
}

void MemoryEnv::RecountLocked() {
  // Links and used bytes from scratch: names may have come back or gone.
  std::unordered_set<Inode*> seen;
  std::vector<InodePtr> nodes;
  std::vector<InodePtr> stack = {root_};
  while (!stack.empty()) {
    InodePtr node = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(node.get()).second) continue;
    node->links = 0;
    nodes.push_back(node);
    for (const auto& [name, child] : node->children) stack.push_back(child);
  }
  root_->links = 1;
  used_bytes_ = 0;
  for (const InodePtr& node : nodes) {
    for (const auto& [name, child] : node->children) ++child->links;
    if (node->type == FileType::kRegular) used_bytes_ += AllocatedFor(node->data.size());
  }
}

uint64_t MemoryEnv::AllocatedFor(uint64_t bytes) const {
  const uint64_t unit = std::max<uint64_t>(options_.allocation_unit_bytes, 1);
  return (bytes + unit - 1) / unit * unit;
}

}  // namespace kvtier
