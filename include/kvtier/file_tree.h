// Folder helpers over Env: remove a folder tree, ask whether a folder is
// empty (the demo, `kvtier bench`). Every call goes through the Env given.
//
// Thread safety: free functions; the Env's.
#ifndef KVTIER_FILE_TREE_H_
#define KVTIER_FILE_TREE_H_

#include <string>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier {

// Removes `path` and everything under it. Symlinks are removed, never
// followed. OK if `path` does not exist. Stops at the first error.
Status RemoveTree(Env* env, const std::string& path);

// True if `path` is a folder with no entries.
Result<bool> IsEmptyDir(Env* env, const std::string& path);

}  // namespace kvtier

#endif  // KVTIER_FILE_TREE_H_
