// Block-file helpers shared by kvtier.encode_block / decode_block and the
// Cache methods that encode and decode (cache_py.cc).
//
// Thread safety: call with the GIL held; each releases it around the work
// that does not touch Python objects.
#ifndef KVTIER_PYTHON_CODEC_PY_H_
#define KVTIER_PYTHON_CODEC_PY_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "python/convert.h"

namespace kvtier::python {

// One buffer view per tensor of `layout` from a list (layer-major) or a
// dict by tensor name, each checked: C-contiguous (writable for kWrite),
// exactly the tensor's bytes, elements of the dtype's size or bytes.
std::vector<std::unique_ptr<BufferView>> TensorViews(const ModelLayout& layout,
                                                     pybind11::handle tensors,
                                                     BufferView::Access access);

// encode_block's and store_tensors' keywords: token_count an int in
// 0..4294967295, created_at None (now) or a 64-bit int.
uint32_t TokenCountFromPy(pybind11::handle obj);
std::optional<int64_t> CreatedAtFromPy(pybind11::handle obj);

// Encodes a block from Python tensors (list in layer-major order or dict by
// name), checking each one's element size and byte size against `layout`.
Result<BlockBuffer> EncodeFromPy(const ModelLayout& layout, const BlockKey& key,
                                 const BlockKey& parent, const BlockKey& ns,
                                 pybind11::handle tensors, uint32_t token_count,
                                 std::optional<int64_t> created_at);

// The size of a full block file of `layout` encoded now: what EncodeFromPy
// writes for any tensors (the header does not depend on the data), as
// kvtier_block_encode reports it with cap 0.
Result<uint64_t> BlockFileBytes(const ModelLayout& layout);

// Decodes `data` (any C-contiguous bytes-like object) and returns numpy
// views of its tensors whose base keeps `data` exported.
pybind11::list DecodeToViews(pybind11::handle data, const ModelLayout& layout, const BlockKey& key,
                             bool verify_checksum);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_CODEC_PY_H_
