// Folder helpers over Env for the demo and the CLI: remove a folder tree.
//
// Thread safety: free functions; the Env's.
#ifndef KVTIER_ENGINE_FILE_TREE_H_
#define KVTIER_ENGINE_FILE_TREE_H_

#include <string>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::engine {

// Removes `path` and everything under it. Symlinks are removed, never
// followed. OK if `path` does not exist. Stops at the first error.
Status RemoveTree(Env* env, const std::string& path);

// True if `path` is a folder with no entries.
Result<bool> IsEmptyDir(Env* env, const std::string& path);

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_FILE_TREE_H_
