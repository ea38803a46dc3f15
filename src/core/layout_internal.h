// Helpers shared by the layout and block key sources; not API.
#ifndef KVTIER_CORE_LAYOUT_INTERNAL_H_
#define KVTIER_CORE_LAYOUT_INTERNAL_H_

#include <cstdint>
#include <string_view>

#include "kvtier/layout.h"
#include "kvtier/status.h"

#include "core/json_strict.h"  // IsStrictUtf8

namespace kvtier::internal {

// Limits Validate() enforces (documented in docs/layouts.md).
inline constexpr size_t kMaxLayers = 4096;
inline constexpr size_t kMaxTensors = 4096;
inline constexpr size_t kMaxRank = 8;
inline constexpr size_t kMaxNameBytes = 64;
inline constexpr size_t kMaxMetaStateBytes = 1024;
inline constexpr uint32_t kMaxQuantBits = 8;
inline constexpr uint32_t kMaxQuantGroup = 65536;
inline constexpr uint64_t kMaxBlockBytes = uint64_t{1} << 32;  // 4 GiB

// True for a non-empty [A-Za-z0-9_.-] string of at most kMaxNameBytes.
bool IsValidName(std::string_view s);

// Checks one layer as Validate() does; messages start with `path`
// ("layers[3]"). On success stores the layer's byte size in *bytes
// (at most kMaxBlockBytes).
Status ValidateLayer(const LayerSpec& layer, uint32_t block_tokens, std::string_view path,
                     uint64_t* bytes);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_LAYOUT_INTERNAL_H_
