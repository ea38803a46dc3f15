#include "kvtier/file_tree.h"

#include <vector>

namespace kvtier {

namespace {

// Folders deeper than this are refused rather than recursed into (a cache
// folder is three levels deep).
constexpr int kMaxDepth = 64;

Status RemoveTreeAt(Env* env, const std::string& path, int depth) {
  Result<FileInfo> info = env->Stat(path);
  if (!info.ok()) return info.status().IsNotFound() ? Status::Ok() : info.status();
  if (info->type != FileType::kDirectory) return env->RemoveFile(path);
  if (depth >= kMaxDepth) {
    return Status::InvalidArgument("refusing to remove " + path + ": folders nested deeper than " +
                                   std::to_string(kMaxDepth));
  }
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(path));
  for (const std::string& name : names) {
    KVTIER_RETURN_IF_ERROR(RemoveTreeAt(env, JoinPath(path, name), depth + 1));
  }
  return env->RemoveDir(path);
}

}  // namespace

Status RemoveTree(Env* env, const std::string& path) { return RemoveTreeAt(env, path, 0); }

Result<bool> IsEmptyDir(Env* env, const std::string& path) {
  KVTIER_ASSIGN_OR_RETURN(FileInfo info, env->Stat(path));
  if (info.type != FileType::kDirectory) return false;
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(path));
  return names.empty();
}

}  // namespace kvtier
