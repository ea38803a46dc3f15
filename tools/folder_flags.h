// What the `kvtier` commands that work on cache folders (ls, stats, gc,
// verify DIR) share: the reference signature of --layout | --signature
// and opening a folder (size flags: AcceptSizeUnits, option_rules.h).
// Reading a folder's index and files is the library's CacheFolder
// (include/kvtier/cache_folder.h).
//
// Thread safety: plain functions; each call opens what it needs.
#ifndef KVTIER_TOOLS_FOLDER_FLAGS_H_
#define KVTIER_TOOLS_FOLDER_FLAGS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvtier/cache_folder.h"
#include "kvtier/status.h"
#include "progress.h"

namespace kvtier::cli {

// The signature named by --layout P (a preset or .json) or --signature S,
// if either was given; InvalidArgument if both were.
Result<std::optional<std::string>> ReferenceSignature(const std::string& layout, bool has_layout,
                                                      const std::string& signature,
                                                      bool has_signature);

// Opens the cache folder `dir` through the public CacheFolder API
// (include/kvtier/cache_folder.h); read-only unless `access` says otherwise.
// `progress`, if given, draws CacheFolderOptions::progress; it must outlive
// the folder.
Result<std::unique_ptr<CacheFolder>> OpenCacheFolder(
    const std::string& dir, CacheFolderAccess access = CacheFolderAccess::kReadOnly,
    UnitProgress* progress = nullptr);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_FOLDER_FLAGS_H_
