// DType sizes and safetensors names.
#include <array>

#include "kvtier/layout.h"

namespace kvtier {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};

// Indexed by the enum's value; the static_assert below keeps them in step.
constexpr std::array<DTypeInfo, 15> kDTypes = {{
    {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},
    {DType::kF32, "F32", 4},
    {DType::kF64, "F64", 8},
    {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},
    {DType::kI32, "I32", 4},
    {DType::kI64, "I64", 8},
    {DType::kU8, "U8", 1},
    {DType::kU16, "U16", 2},
    {DType::kU32, "U32", 4},
    {DType::kU64, "U64", 8},
    {DType::kBool, "BOOL", 1},
    {DType::kF8E4M3, "F8_E4M3", 1},
    {DType::kF8E5M2, "F8_E5M2", 1},
}};

constexpr bool TableInEnumOrder() {
  for (size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(TableInEnumOrder(), "kDTypes must follow the order of enum DType");
static_assert(static_cast<size_t>(DType::kF8E5M2) + 1 == kDTypes.size(),
              "kDTypes must list every DType");

const DTypeInfo* Find(DType dtype) {
  size_t i = static_cast<size_t>(dtype);
  return i < kDTypes.size() ? &kDTypes[i] : nullptr;
}

}  // namespace

size_t DTypeSize(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->size : 0;
}

std::string_view DTypeName(DType dtype) {
  const DTypeInfo* info = Find(dtype);
  return info ? info->name : std::string_view("?");
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (const DTypeInfo& info : kDTypes) {
    if (info.name == name) return info.dtype;
  }
  return std::nullopt;
}

}  // namespace kvtier
