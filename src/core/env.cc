// Env helpers built on the virtual calls, shared by every Env, and the error
// helpers of core/env_error.h.
#include "kvtier/env.h"

#include <atomic>
#include <cerrno>
#include <cstring>
#include <string>

#include "core/env_error.h"

namespace kvtier {

Status PathError(std::string_view op, std::string_view path, int err) {
  std::string what(op);
  what += ' ';
  what += path;
  if (err == ENOENT) {
    what += ": ";
    what += std::strerror(err);
    return Status(StatusCode::kNotFound, std::move(what), err);
  }
  return Status::IOError(what, err);
}

std::string_view FileTypeName(FileType type) {
  switch (type) {
    case FileType::kRegular:
      return "regular file";
    case FileType::kDirectory:
      return "folder";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kFifo:
      return "FIFO";
    case FileType::kOther:
      return "special file";
  }
  return "special file";
}

namespace {

// The folder part of `path` ("" when it has none, "/" for a top-level name).
std::string_view ParentOf(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return {};
  if (slash == 0) return path.substr(0, 1);
  return path.substr(0, slash);
}

}  // namespace

Status Env::CreateDirs(const std::string& path, uint32_t permissions) {
  if (path.empty()) return Status::InvalidArgument("CreateDirs: empty path");
  Status s = CreateDir(path, permissions);
  if (!s.IsNotFound()) return s;
  // A parent is missing: make it, then try again.
  std::string_view parent = ParentOf(path);
  if (parent.empty() || parent == path || parent == "/") return s;
  KVTIER_RETURN_IF_ERROR(CreateDirs(std::string(parent), permissions));
  return CreateDir(path, permissions);
}

Result<std::vector<std::byte>> Env::ReadWholeFile(const std::string& path, uint64_t max_bytes) {
  KVTIER_ASSIGN_OR_RETURN(FileInfo info, Stat(path));
  if (info.type != FileType::kRegular) {
    return Status::InvalidArgument("refusing to read " + path + ": it is a " +
                                   std::string(FileTypeName(info.type)) + ", not a regular file");
  }
  auto too_big = [&](uint64_t size) {
    return Status::ResourceExhausted("refusing to read " + path + ": it is " +
                                     std::to_string(size) + " bytes, over the limit of " +
                                     std::to_string(max_bytes));
  };
  if (info.size > max_bytes) return too_big(info.size);
  ReadFileOptions ropts;
  ropts.follow_symlinks = false;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, OpenForRead(path, ropts));
  // The path may have been replaced between the lstat and the open; the size
  // of what was actually opened is the one that counts.
  const uint64_t size = file->size();
  if (size > max_bytes) return too_big(size);
  std::vector<std::byte> data(static_cast<size_t>(size));
  KVTIER_ASSIGN_OR_RETURN(size_t n, file->ReadAt(0, data));
  if (n != size) {
    return Status(StatusCode::kIOError,
                  "read " + path + ": file shrank from " + std::to_string(size) + " to " +
                      std::to_string(n) + " bytes while being read",
                  0);
  }
  return data;
}

Status Env::WriteFileAtomic(const std::string& path, std::span<const std::byte> data,
                            const WriteFileOptions& opts) {
  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(ProcessId()) + "." +
                          std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
  WriteFileOptions topts = opts;
  topts.exclusive = true;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, CreateFile(tmp, topts));
  Status s = file->Append(data);
  if (s.ok() && opts.sync) s = file->Sync();
  Status c = file->Close();
  if (s.ok()) s = c;
  if (s.ok()) s = RenameFile(tmp, path);
  if (!s.ok()) {
    file.reset();
    (void)RemoveFile(tmp);  // best effort; the original error is what matters
    return s;
  }
  if (opts.sync) {
    std::string_view parent = ParentOf(path);
    KVTIER_RETURN_IF_ERROR(SyncDir(parent.empty() ? std::string(".") : std::string(parent)));
  }
  return Status::Ok();
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  while (a.size() > 1 && a.back() == '/') a.remove_suffix(1);
  while (!b.empty() && b.front() == '/') b.remove_prefix(1);
  std::string out(a);
  if (out.back() != '/') out += '/';
  out += b;
  return out;
}

}  // namespace kvtier
