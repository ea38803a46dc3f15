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

Result<uint64_t> ParseByteCount(const std::string& text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  std::string_view rest(p, text.data() + text.size() - p);
  int shift = 0;
  if (rest == "K" || rest == "KiB")
    shift = 10;
  else if (rest == "M" || rest == "MiB")
    shift = 20;
  else if (rest == "G" || rest == "GiB")
    shift = 30;
  else if (rest == "T" || rest == "TiB")
    shift = 40;
  else if (!rest.empty())
    ec = std::errc::invalid_argument;
  if (text.empty() || ec != std::errc() || p == text.data() ||
      (shift > 0 && (v >> (64 - shift)) != 0)) {
    return Status::InvalidArgument("expected a byte count like 1073741824 or 512M, got '" +
                                   text.substr(0, 40) + "'");
  }
  return v << shift;
}

Result<std::unique_ptr<CacheFolder>> OpenCacheFolder(const std::string& dir,
                                                     CacheFolderAccess access) {
  CacheFolderOptions o;
  o.dir = dir;
  o.access = access;
  return CacheFolder::Open(o, Env::Default());
}

}  // namespace kvtier::cli
