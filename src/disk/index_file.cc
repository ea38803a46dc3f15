#include "disk/index_file.h"

#include "core/env_error.h"

namespace kvtier::disk {

Status CheckIndexFiles(Env* env, const FolderLayout& layout) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string path = layout.IndexPath() + suffix;
    Result<FileInfo> info = env->Stat(path);
    if (!info.ok()) {
      if (info.status().IsNotFound()) continue;
      return info.status().WithContext("index");
    }
    if (info->type != FileType::kRegular) {
      return Status::Corruption("index " + path + " is a " + std::string(FileTypeName(info->type)) +
                                ", not a regular file");
    }
  }
  return Status::Ok();
}

Status NameIndexError(const FolderLayout& layout, const Status& s) {
  if (!s.IsCorruption()) return s;
  if (s.message().find(layout.IndexPath()) != std::string::npos) return s;
  return Status::Corruption("index " + layout.IndexPath() + " is not a usable SQLite database (" +
                            s.message() + ")");
}

Status SetAsideIndexFiles(Env* env, const FolderLayout& layout, Quarantine* quarantine) {
  for (const char* suffix : {"", "-wal", "-shm"}) {
    const std::string path = layout.IndexPath() + suffix;
    if (env->Stat(path).ok()) {
      KVTIER_RETURN_IF_ERROR(quarantine->Move(path, std::string(kIndexFileName) + suffix));
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::disk
