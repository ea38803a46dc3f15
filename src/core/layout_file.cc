// ModelLayout::LoadFile and ModelLayout::Resolve: layouts named on a command
// line or in options (a preset name or a JSON file read through Env).
#include <string>

#include "kvtier/env.h"
#include "kvtier/layout.h"

namespace kvtier {
namespace {

// Layout files are small; anything bigger is a mistake.
constexpr uint64_t kMaxLayoutFileBytes = uint64_t{1} << 20;

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

Result<ModelLayout> ModelLayout::LoadFile(Env* env, const std::string& path) {
  Result<std::vector<std::byte>> bytes = env->ReadWholeFile(path, kMaxLayoutFileBytes);
  if (!bytes.ok()) return bytes.status().WithContext("layout file " + path);
  std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  Result<ModelLayout> layout = FromJson(text);
  if (!layout.ok()) return layout.status().WithContext(path);
  if (layout->name.empty()) {
    // Default name: the file name without folder and ".json".
    std::string_view base(path);
    size_t slash = base.rfind('/');
    if (slash != std::string_view::npos) base.remove_prefix(slash + 1);
    if (EndsWith(base, ".json")) base.remove_suffix(5);
    layout->name = std::string(base);
  }
  return layout;
}

Result<ModelLayout> ModelLayout::Resolve(Env* env, std::string_view preset_or_path,
                                         uint32_t block_tokens) {
  if (!EndsWith(preset_or_path, ".json")) return Preset(preset_or_path, block_tokens);
  KVTIER_ASSIGN_OR_RETURN(ModelLayout layout, LoadFile(env, std::string(preset_or_path)));
  Result<ModelLayout> resized = layout.WithBlockTokens(block_tokens);
  if (!resized.ok()) {
    return resized.status().WithContext(std::string(preset_or_path) + " with block_tokens " +
                                        std::to_string(block_tokens));
  }
  return resized;
}

}  // namespace kvtier
