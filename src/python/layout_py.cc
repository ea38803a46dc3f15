// kvtier.Layout (ModelLayout), kvtier.TensorInfo and kvtier.layout_signature.
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/layout.h"
#include "python/codec_py.h"
#include "python/convert.h"
#include "python/errors.h"
#include "python/register.h"

namespace kvtier::python {
namespace {

// One state tensor of a block, as Layout.tensors() lists it.
struct TensorInfo {
  std::string name;  // layer_{i}_state_{k}
  uint32_t layer = 0;
  uint32_t state = 0;
  std::string role;
  std::string cache_type;
  std::string dtype;  // safetensors name
  std::vector<uint64_t> shape;
  uint64_t nbytes = 0;
  int32_t token_dim = -1;
};

// A block_tokens argument: an int in 0..4294967295 (0 = the layout's own).
uint32_t BlockTokensFromPy(py::handle obj) {
  return static_cast<uint32_t>(IntFromPy(obj, "block_tokens", 0, UINT32_MAX));
}

std::vector<TensorInfo> TensorsOf(const ModelLayout& layout) {
  std::vector<TensorInfo> out;
  out.reserve(layout.TensorCount());
  for (uint32_t l = 0; l < layout.layers.size(); ++l) {
    const LayerSpec& layer = layout.layers[l];
    for (uint32_t s = 0; s < layer.states.size(); ++s) {
      const TensorSpec& t = layer.states[s];
      out.push_back({"layer_" + std::to_string(l) + "_state_" + std::to_string(s), l, s, t.role,
                     layer.cache_type, std::string(DTypeName(t.dtype)), t.shape, t.ByteSize(),
                     t.token_dim});
    }
  }
  return out;
}

DType DTypeFromPy(const std::string& name) {
  std::optional<DType> d = DTypeFromName(name);
  if (!d.has_value()) {
    ThrowInvalid("dtype: unknown dtype '" + name + "' (safetensors names: F16, BF16, F32, ...)");
  }
  return *d;
}

}  // namespace

void RegisterLayout(py::module_& m) {
  py::class_<TensorInfo>(m, "TensorInfo",
                         "One state tensor of a block: its name in the block file, dtype, "
                         "per-block shape and size.")
      .def_readonly("name", &TensorInfo::name, "'layer_{i}_state_{k}'")
      .def_readonly("layer", &TensorInfo::layer)
      .def_readonly("state", &TensorInfo::state)
      .def_readonly("role", &TensorInfo::role, "'keys', 'values', 'scales', 'conv', ...")
      .def_readonly("cache_type", &TensorInfo::cache_type, "the layer's kind, e.g. 'attention'")
      .def_readonly("dtype", &TensorInfo::dtype, "safetensors dtype name, e.g. 'F16', 'BF16'")
      .def_property_readonly(
          "shape", [](const TensorInfo& t) { return py::tuple(py::cast(t.shape)); },
          "per-block shape")
      .def_readonly("nbytes", &TensorInfo::nbytes)
      .def_readonly("token_dim", &TensorInfo::token_dim,
                    "index of the token axis, or -1 if the shape does not depend on it")
      .def_property_readonly(
          "numpy_dtype", [](const TensorInfo& t) { return NumpyDType(DTypeFromPy(t.dtype)); },
          "the numpy dtype decode_block() uses (BF16 as uint16, F8 as uint8: raw bits)")
      .def("__repr__", [](const TensorInfo& t) {
        std::string shape;
        for (uint64_t d : t.shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
        return "TensorInfo(" + t.name + ", " + t.role + ", " + t.dtype + "[" + shape + "])";
      });

  py::class_<ModelLayout>(m, "Layout",
                          "What one cached block of a model holds: per layer, the state "
                          "tensors with dtypes and per-block shapes (docs/layouts.md).")
      .def(py::init([](PyLayoutArg layout, PyInt block_tokens) {
             return LayoutFromPy(layout, "layout", BlockTokensFromPy(block_tokens));
           }),
           py::arg("layout"), py::arg("block_tokens") = 0,
           "A preset ('tiny', 'qwen2.5-0.5b', 'llama3-8b', 'gpt-oss-20b', 'qwen3-next-80b', "
           "'llama3-8b-q4') or a layout JSON path; "
           "block_tokens > 0 overrides the layout's tokens per block.")
      .def_static(
          "from_json",
          [](PyText text) {
            if (!PyUnicode_Check(text.ptr())) {
              ThrowInvalid("text: expected a str of layout JSON, got " + TypeName(text));
            }
            return ValueOrThrow(ModelLayout::FromJson(text.cast<std::string>()));
          },
          py::arg("text"), "Parses a layout from JSON text (docs/layouts.md).")
      .def_static(
          "attention",
          [](PyText name, PyInt layers, PyInt kv_heads, PyInt head_dim, PyText dtype,
             PyInt block_tokens) {
            RequireArg(name, "name");
            if (!PyUnicode_Check(name.ptr())) ThrowInvalid("name: expected a str, got " + TypeName(name));
            RequireArg(dtype, "dtype");
            if (!PyUnicode_Check(dtype.ptr())) {
              ThrowInvalid("dtype: expected a str (F16, BF16, F32, ...), got " + TypeName(dtype));
            }
            const auto count = [](py::handle v, const char* what) {
              RequireArg(v, what);
              return static_cast<uint32_t>(IntFromPy(v, what, 0, UINT32_MAX));
            };
            ModelLayout layout = ModelLayout::Attention(
                name.cast<std::string>(), count(layers, "layers"), count(kv_heads, "kv_heads"),
                count(head_dim, "head_dim"), DTypeFromPy(dtype.cast<std::string>()),
                count(block_tokens, "block_tokens"));
            ThrowIfError(layout.Validate());
            return layout;
          },
          py::arg("name") = py::none(), py::arg("layers") = py::none(),
          py::arg("kv_heads") = py::none(), py::arg("head_dim") = py::none(),
          py::arg("dtype") = py::none(), py::arg("block_tokens") = py::none(),
          "A standard attention layout: per layer K and V of [kv_heads, block_tokens, "
          "head_dim]. Every argument is required.")
      .def_static("presets", &ModelLayout::PresetNames, "Names of the built-in presets.")
      .def_property_readonly("name", [](const ModelLayout& l) { return l.name; })
      .def_property_readonly("block_tokens", [](const ModelLayout& l) { return l.block_tokens; })
      .def_property_readonly("signature", &ModelLayout::Signature,
                             "The canonical signature string (compatibility of blocks).")
      .def_property_readonly("block_bytes", &ModelLayout::BlockBytes,
                             "Bytes of all state tensors of one block (the data section).")
      .def_property_readonly(
          "max_file_bytes",
          [](const ModelLayout& l) { return 8 + kMaxBlockHeaderBytes + l.BlockBytes(); },
          "The largest block file of this layout a reader accepts (8 + 1 MiB header limit + "
          "block_bytes): a load_into() buffer of this size always fits.")
      .def_property_readonly(
          "block_file_bytes", [](const ModelLayout& l) { return ValueOrThrow(BlockFileBytes(l)); },
          "The exact size of a full block file of this layout as encode_block() and "
          "store_tensors() write it now (C: kvtier_block_encode with cap 0): the size for "
          "load_into() / load_many() buffers of full blocks.")
      .def_property_readonly("num_layers", [](const ModelLayout& l) { return l.layers.size(); })
      .def_property_readonly("tensor_count", &ModelLayout::TensorCount)
      .def("tensors", &TensorsOf,
           "The block's state tensors in file order (layer-major): list of TensorInfo.")
      .def("to_json", &ModelLayout::ToJson, "The JSON form Layout.from_json() reads back.")
      .def("__eq__",
           [](const ModelLayout& a, PyAny b) -> PyAny {
             if (!py::isinstance<ModelLayout>(b)) {
               return py::reinterpret_borrow<py::object>(Py_NotImplemented);
             }
             return py::bool_(a == b.cast<const ModelLayout&>());
           })
      .def("__repr__", [](const ModelLayout& l) {
        return "Layout(" + (l.name.empty() ? std::string("<unnamed>") : l.name) +
               ", block_tokens=" + std::to_string(l.block_tokens) +
               ", layers=" + std::to_string(l.layers.size()) + ")";
      });

  m.def(
      "layout_signature",
      [](PyLayoutArg layout) { return LayoutFromPy(layout, "layout").Signature(); },
      py::arg("layout"),
      "The signature of a layout (a preset name, a layout JSON path or a Layout).");
}

}  // namespace kvtier::python
