// The safetensors layer of a block file: the header JSON's structure and
// tensor table, independent of what the kvtier metadata says.
//
// ParseSafetensorsHeader checks, in order: strict JSON (core/json_strict.h),
// a top-level object, at most kMaxBlockTensors tensors, every tensor name
// `layer_{i}_state_{k}`, every entry exactly {dtype, shape, data_offsets}
// with a known dtype, dimensions >= 1, no 64-bit overflow of elements x
// dtype size, names dense (layers 0..L-1, states 0..S-1 in each), then in
// name order: end >= begin, end - begin == byte size, the first at 0, each
// starting where the previous ended, the last ending at the data section's
// size; finally a `__metadata__` object of string -> string. Each failure is
// a Reject() status with its BlockFileError.
//
// Thread safety: a ParsedHeader is a value owned by one caller.
#ifndef KVTIER_CORE_SAFETENSORS_HEADER_H_
#define KVTIER_CORE_SAFETENSORS_HEADER_H_

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/json_strict.h"
#include "kvtier/block_file.h"

namespace kvtier::internal {

struct HeaderTensor {
  TensorView view;  // name, layer, state, dtype, shape; data left empty
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t bytes = 0;  // elements x dtype size, from the shape
};

// Not movable: metadata views may point into `doc`'s arena.
struct ParsedHeader {
  ParsedHeader() = default;
  ParsedHeader(const ParsedHeader&) = delete;
  ParsedHeader& operator=(const ParsedHeader&) = delete;

  std::vector<HeaderTensor> tensors;  // in name order = file order
  uint32_t layers = 0;                // L: 1 + the last tensor's layer
  // `__metadata__` entries in header order, as decoded strings.
  std::vector<std::pair<std::string_view, std::string_view>> metadata;
  JsonDocument doc;
};

// Parses and checks `json` (the N header bytes, padding included, already
// checked to be NUL-free strict UTF-8) for a data section of `data_size`
// bytes. `out` must be freshly constructed.
Status ParseSafetensorsHeader(std::string_view json, uint64_t data_size, ParsedHeader* out);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_SAFETENSORS_HEADER_H_
