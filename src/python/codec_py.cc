// kvtier.encode_block and kvtier.decode_block: block files (DESIGN.md §4)
// from and to numpy arrays. decode_block returns views into the caller's
// bytes, never copies.
#include "python/codec_py.h"

#include <pybind11/stl.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "bindings/layout_verifiers.h"
#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "python/convert.h"
#include "python/errors.h"
#include "python/register.h"

namespace kvtier::python {
namespace {

constexpr uint64_t kMicrosPerSecond = 1'000'000;

// The tensors argument: a sequence in layer-major order, or a dict by
// tensor name ("layer_{i}_state_{k}").
std::vector<py::object> TensorObjects(const ModelLayout& layout, py::handle tensors) {
  std::vector<py::object> out;
  const size_t want = layout.TensorCount();
  if (py::isinstance<py::dict>(tensors)) {
    py::dict d = py::reinterpret_borrow<py::dict>(tensors);
    for (uint32_t l = 0; l < layout.layers.size(); ++l) {
      for (uint32_t s = 0; s < layout.layers[l].states.size(); ++s) {
        const std::string name = "layer_" + std::to_string(l) + "_state_" + std::to_string(s);
        if (!d.contains(name)) ThrowInvalid("tensors: no entry '" + name + "'");
        out.push_back(d[py::str(name)]);
      }
    }
    if (d.size() != want) {
      ThrowInvalid("tensors: " + std::to_string(d.size()) + " entries, the layout has " +
                   std::to_string(want) + " tensors");
    }
    return out;
  }
  if (PyUnicode_Check(tensors.ptr()) || PyObject_CheckBuffer(tensors.ptr()) ||
      !PySequence_Check(tensors.ptr())) {
    ThrowInvalid("tensors: expected a list of arrays (layer-major) or a dict by name, got " +
                 TypeName(tensors));
  }
  py::sequence seq = py::reinterpret_borrow<py::sequence>(tensors);
  if (seq.size() != want) {
    ThrowInvalid("tensors: " + std::to_string(seq.size()) + " given, the layout has " +
                 std::to_string(want) + " tensors");
  }
  for (size_t i = 0; i < want; ++i) out.push_back(seq[i]);
  return out;
}

template <typename Int>
std::string ShapeText(std::span<const Int> shape, const char* open, const char* close) {
  std::string out = open;
  for (size_t a = 0; a < shape.size(); ++a) {
    out += (a == 0 ? "" : ", ") + std::to_string(shape[a]);
  }
  return out + (shape.size() == 1 && *open == '(' ? ",)" : close);
}

// A buffer with more than one axis must have the tensor's shape (a byte
// view: its last axis the tensor's times the dtype's size): an array of
// the right size in another order (token-major for a head-major tensor)
// would be stored as scrambled K/V that every checksum then vouches for.
void CheckShape(const std::string& name, const TensorSpec& spec, const BufferView& view) {
  const std::span<const Py_ssize_t> got = view.shape();
  if (got.size() <= 1) return;  // flat: the byte count was checked
  std::vector<uint64_t> want = spec.shape;
  // A byte view (TensorViews allows one for any dtype) of a wider dtype.
  if (view.itemsize() != DTypeSize(spec.dtype) && !want.empty()) want.back() *= DTypeSize(spec.dtype);
  const std::string shapes = ShapeText<Py_ssize_t>(got, "(", ")") + " for the layout's " +
                             ShapeText<uint64_t>(want, "[", "]");
  if (got.size() != want.size()) {
    ThrowInvalid(name + ": shape " + shapes + ": " + std::to_string(got.size()) + " axes, not " +
                 std::to_string(want.size()) + " (or pass a flat buffer)");
  }
  for (size_t a = 0; a < want.size(); ++a) {
    if (static_cast<uint64_t>(got[a]) != want[a]) {
      ThrowInvalid(name + ": shape " + shapes + ": axis " + std::to_string(a) + " is " +
                   std::to_string(got[a]) + ", the layout's is " + std::to_string(want[a]));
    }
  }
}

}  // namespace

uint32_t TokenCountFromPy(py::handle obj) {
  return static_cast<uint32_t>(IntFromPy(obj, "token_count", 0, UINT32_MAX));
}

std::optional<int64_t> CreatedAtFromPy(py::handle obj) {
  if (obj.is_none()) return std::nullopt;
  return IntFromPy(obj, "created_at", INT64_MIN, INT64_MAX);
}

std::vector<std::unique_ptr<BufferView>> TensorViews(const ModelLayout& layout, py::handle tensors,
                                                     BufferView::Access access) {
  const std::vector<py::object> objects = TensorObjects(layout, tensors);
  std::vector<std::unique_ptr<BufferView>> views;
  size_t i = 0;
  for (uint32_t l = 0; l < layout.layers.size(); ++l) {
    for (uint32_t s = 0; s < layout.layers[l].states.size(); ++s, ++i) {
      const TensorSpec& spec = layout.layers[l].states[s];
      const std::string name = "tensors[" + std::to_string(i) + "] (layer_" + std::to_string(l) +
                               "_state_" + std::to_string(s) + ")";
      auto view = std::make_unique<BufferView>(objects[i], name.c_str(), access);
      if (view->itemsize() != DTypeSize(spec.dtype) && !view->IsByteFormat()) {
        ThrowInvalid(name + ": element size " + std::to_string(view->itemsize()) +
                     " does not match dtype " + std::string(DTypeName(spec.dtype)) + " (" +
                     std::to_string(DTypeSize(spec.dtype)) + " bytes)");
      }
      if (view->bytes().size() != spec.ByteSize()) {
        ThrowInvalid(name + ": " + std::to_string(view->bytes().size()) + " bytes, the layout's " +
                     std::string(DTypeName(spec.dtype)) + " tensor has " +
                     std::to_string(spec.ByteSize()));
      }
      CheckShape(name, spec, *view);
      views.push_back(std::move(view));
    }
  }
  return views;
}

Result<BlockBuffer> EncodeFromPy(const ModelLayout& layout, const BlockKey& key,
                                 const BlockKey& parent, const BlockKey& ns, py::handle tensors,
                                 uint32_t token_count, std::optional<int64_t> created_at) {
  const std::vector<std::unique_ptr<BufferView>> views =
      TensorViews(layout, tensors, BufferView::Access::kRead);
  std::vector<std::span<const std::byte>> spans;
  for (const auto& view : views) spans.push_back(view->bytes());
  EncodeRequest req;
  req.layout = &layout;
  req.key = key;
  req.parent = parent;
  req.ns = ns;
  req.token_count = token_count;
  req.created_at = created_at.has_value()
                       ? *created_at
                       : Env::Default()->NowUnixMicros() / static_cast<int64_t>(kMicrosPerSecond);
  req.tensors = spans;
  py::gil_scoped_release release;
  return EncodeBlock(req);
}

Result<uint64_t> BlockFileBytes(const ModelLayout& layout) {
  uint64_t largest = 0;
  for (const LayerSpec& layer : layout.layers) {
    for (const TensorSpec& t : layer.states) largest = std::max(largest, t.ByteSize());
  }
  py::gil_scoped_release release;
  // Every tensor from one zero buffer of the largest one's size.
  const std::vector<std::byte> zeros(static_cast<size_t>(largest));
  std::vector<std::span<const std::byte>> spans;
  for (const LayerSpec& layer : layout.layers) {
    for (const TensorSpec& t : layer.states) {
      spans.emplace_back(zeros.data(), static_cast<size_t>(t.ByteSize()));
    }
  }
  EncodeRequest req;
  req.layout = &layout;
  req.created_at = Env::Default()->NowUnixMicros() / static_cast<int64_t>(kMicrosPerSecond);
  req.tensors = spans;
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer block, EncodeBlock(req));
  return static_cast<uint64_t>(block.size());
}

py::list DecodeToViews(py::handle data, const ModelLayout& layout, const BlockKey& key,
                       bool verify_checksum) {
  // The arrays' base: a memoryview that holds its own export of `data`, so
  // the bytes stay put (and a bytearray cannot be resized) while any view
  // lives.
  py::object owner = py::reinterpret_steal<py::object>(PyMemoryView_FromObject(data.ptr()));
  if (!owner) {
    PyErr_Clear();
    ThrowInvalid("data: expected a bytes-like object (buffer protocol), got " + TypeName(data));
  }
  const Py_buffer* buf = PyMemoryView_GET_BUFFER(owner.ptr());
  if (!PyBuffer_IsContiguous(buf, 'C')) ThrowInvalid("data: expected a C-contiguous buffer");
  const std::span<const std::byte> bytes(static_cast<const std::byte*>(buf->buf),
                                         static_cast<size_t>(buf->len));
  const std::string signature = layout.Signature();
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature;
  opts.expected_layout = &layout;
  opts.verify_checksum = verify_checksum;
  Result<DecodedBlock> decoded = [&] {
    py::gil_scoped_release release;
    // DecodeBlock's verdict, without a JSON parse for a header of a shape
    // seen before.
    return bindings::LayoutVerifiers::Shared().Decode(layout, bytes, opts);
  }();
  if (!decoded.ok()) Throw(decoded.status());
  py::list out(decoded->tensors.size());
  for (size_t i = 0; i < decoded->tensors.size(); ++i) {
    const TensorView& t = decoded->tensors[i];
    const size_t item = DTypeSize(t.dtype);
    std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
    std::vector<py::ssize_t> strides(shape.size());
    py::ssize_t stride = static_cast<py::ssize_t>(item);
    for (size_t d = shape.size(); d-- > 0;) {
      strides[d] = stride;
      stride *= shape[d];
    }
    py::array array(NumpyDType(t.dtype), shape, strides, t.data.data(), owner);
    if (buf->readonly) array.attr("setflags")(py::arg("write") = false);
    out[i] = std::move(array);
  }
  return out;
}

void RegisterCodec(py::module_& m) {
  m.def(
      "encode_block",
      [](PyLayoutArg layout, PyKey key, PyKey parent, PyKey ns, PyTensors tensors,
         PyInt token_count, PyIntOrNone created_at) -> py::bytes {
        const ModelLayout l = LayoutFromPy(layout, "layout");
        const BlockKey k = KeyFromPy(key, "key");
        const BlockKey p = KeyFromPy(parent, "parent");
        const BlockKey n = KeyFromPy(ns, "namespace");
        BlockBuffer block = ValueOrThrow(EncodeFromPy(l, k, p, n, tensors, TokenCountFromPy(token_count),
                                                      CreatedAtFromPy(created_at)));
        return py::bytes(reinterpret_cast<const char*>(block.data()), block.size());
      },
      py::arg("layout"), py::arg("key"), py::arg("parent"), py::arg("namespace"),
      py::arg("tensors"), py::kw_only(), py::arg("token_count") = 0,
      py::arg("created_at") = py::none(),
      "Encodes one block file (DESIGN.md §4) from its state tensors: a list in the order of "
      "Layout.tensors() or a dict by tensor name, each a C-contiguous buffer of exactly the "
      "tensor's bytes. `parent` is the previous block's key (the namespace for the first "
      "block). token_count 0 = a full block; created_at defaults to now (unix seconds).");

  // decode_block, and with verify_checksum false the engine integrations'
  // second look at bytes they verified before (not part of the module's
  // API: DESIGN.md §8 names decode_block only).
  auto decode = [](bool verify_checksum) {
    return [verify_checksum](PyBuffer data, PyLayoutArg layout, PyKey key) -> PyArrays {
      const ModelLayout l = LayoutFromPy(layout, "layout");
      return DecodeToViews(data, l, KeyFromPy(key, "key"), verify_checksum);
    };
  };
  m.def("decode_block", decode(true), py::arg("data"), py::arg("layout"), py::arg("key"),
        "Validates a block file strictly (structure, key, layout, checksum; kvtier.Corruption "
        "otherwise) and returns its tensors as numpy arrays that are views into `data`, not "
        "copies (read-only when `data` is). BF16 is exposed as uint16, F8 as uint8.");
  m.def("_decode_block_verified", decode(false), py::arg("data"), py::arg("layout"), py::arg("key"),
        "decode_block for bytes that decode_block verified in this process and that nothing "
        "can have written since (bytes, or a read-only array over memory this process owns): "
        "the structure, key and layout are checked again, the data section's checksum is not "
        "recomputed. Internal to kvtier's engine integrations.");
}

}  // namespace kvtier::python
