// Flags shared by the commands that work on cache folders.
#include "folder_flags.h"

#include <charconv>

#include "kvtier/env.h"
#include "kvtier/layout.h"

namespace kvtier::cli {

Result<std::optional<std::string>> ReferenceSignature(const std::string& layout, bool has_layout,
                                                      const std::string& signature,
                                                      bool has_signature) {
  if (has_layout && has_signature) {
    return Status::InvalidArgument("give at most one of --layout or --signature");
  }
  if (has_signature) {
    if (signature.empty()) return Status::InvalidArgument("--signature: empty");
    return std::optional<std::string>(signature);
  }
  if (has_layout) {
    auto l = ModelLayout::Resolve(Env::Default(), layout);
    if (!l.ok()) return l.status().WithContext("--layout");
    return std::optional<std::string>(l->Signature());
  }
  return std::optional<std::string>();
}

Result<std::unique_ptr<CacheFolder>> OpenCacheFolder(const std::string& dir,
                                                     CacheFolderAccess access,
                                                     UnitProgress* progress) {
  CacheFolderOptions o;
  o.dir = dir;
  o.access = access;
  if (progress != nullptr) {
    o.progress = [progress](const char* unit, uint64_t done, uint64_t total) {
      progress->Update(unit, done, total);
    };
  }
  return CacheFolder::Open(o, Env::Default());
}

}  // namespace kvtier::cli
