// Conversions between Python objects and kvtier values for the module:
// buffers (the buffer protocol, checked for contiguity, writability and
// element type), 32-byte keys, token lists, layouts and numpy dtypes.
//
// Every converter raises kvtier.InvalidArgument (StatusError) with a message
// naming the argument (`what`) and what was wrong, never a bare TypeError.
//
// Thread safety: call with the GIL held. A BufferView's bytes may be used
// without the GIL while the view is alive (the export pins them); it must
// be destroyed with the GIL held.
#ifndef KVTIER_PYTHON_CONVERT_H_
#define KVTIER_PYTHON_CONVERT_H_

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/layout.h"

namespace kvtier::python {

namespace py = pybind11;

// Arguments and results the functions check and convert themselves (with
// the messages below), typed for help(): pybind11 shows a py::handle or
// py::object parameter as `handle` / `object`; these show the Python type
// the function takes. Any object binds (the conversion, not pybind11,
// decides what is accepted, so errors stay kvtier.InvalidArgument).
inline bool AnyObject(PyObject*) { return true; }
#define KVTIER_PY_TYPED(Name, shown)                          \
  class Name : public py::object {                            \
   public:                                                    \
    PYBIND11_OBJECT_DEFAULT(Name, py::object, AnyObject)      \
    static constexpr char kShown[] = shown;                   \
  };
KVTIER_PY_TYPED(PyKey, "bytes")
KVTIER_PY_TYPED(PyKeys, "Iterable[bytes]")
KVTIER_PY_TYPED(PyBuffer, "Buffer")
KVTIER_PY_TYPED(PyBuffers, "Sequence[Buffer]")
KVTIER_PY_TYPED(PyTensors, "Sequence[Buffer] | Mapping[str, Buffer]")
KVTIER_PY_TYPED(PyTokens, "Sequence[int] | Buffer")
KVTIER_PY_TYPED(PyBytesLike, "bytes")
KVTIER_PY_TYPED(PyText, "str")
KVTIER_PY_TYPED(PyLayoutArg, "Layout | str | os.PathLike")
KVTIER_PY_TYPED(PyPathOrNone, "str | os.PathLike | None")
KVTIER_PY_TYPED(PyTextOrNone, "str | None")
KVTIER_PY_TYPED(PyInt, "int")
KVTIER_PY_TYPED(PyBytesOrNone, "bytes | None")
KVTIER_PY_TYPED(PyDict, "dict")
KVTIER_PY_TYPED(PyAny, "Any")
KVTIER_PY_TYPED(PyKeyList, "list[bytes]")
KVTIER_PY_TYPED(PyArrays, "list[numpy.ndarray]")
KVTIER_PY_TYPED(PyConfigArg, "str | os.PathLike | dict")
KVTIER_PY_TYPED(PyKeyChainOrNone, "KeyChain | None")
KVTIER_PY_TYPED(PySignatureArg, "str | Layout")
KVTIER_PY_TYPED(PyIntOrNone, "int | None")
KVTIER_PY_TYPED(PyBytesOrText, "bytes | str")
#undef KVTIER_PY_TYPED

// One buffer-protocol export of a C-contiguous object, released on
// destruction.
class BufferView {
 public:
  enum class Access : uint8_t { kRead, kWrite };

  // REQUIRES: the GIL. InvalidArgument naming `what` if obj has no buffer,
  // is not C-contiguous, or (kWrite) is read-only.
  BufferView(py::handle obj, const char* what, Access access);
  ~BufferView();
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }
  std::span<std::byte> mutable_bytes() const {
    return {static_cast<std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }
  bool readonly() const { return view_.readonly != 0; }
  // The exporter's axes (one axis of len() bytes for a plain bytes-like).
  std::span<const Py_ssize_t> shape() const {
    if (view_.shape == nullptr) return {&view_.len, 1};
    return {view_.shape, static_cast<size_t>(view_.ndim)};
  }
  size_t itemsize() const { return static_cast<size_t>(view_.itemsize); }
  // The struct-module format ("B", "f", "<e", ...); "B" when the exporter
  // gives none.
  std::string format() const { return view_.format == nullptr ? "B" : view_.format; }
  // True for the single-byte formats ("B", "b", "c", with or without a
  // byte-order prefix).
  bool IsByteFormat() const;

 private:
  Py_buffer view_{};
};

// An int (not a bool) in [min, max]: anything else, a float or a value out
// of range included, is kvtier.InvalidArgument naming `what` and the range
// (pybind11's own conversion would raise a bare TypeError).
int64_t IntFromPy(py::handle obj, const char* what, int64_t min, int64_t max);

// A required argument that defaults to None so that a missing one is
// kvtier.InvalidArgument ("<what>: is required") rather than a TypeError.
void RequireArg(py::handle obj, const char* what);

// The type name of obj, for messages ("str", "numpy.ndarray", ...).
std::string TypeName(py::handle obj);

// A 32-byte key from any bytes-like object of exactly 32 bytes.
BlockKey KeyFromPy(py::handle obj, const char* what);
py::bytes KeyToPy(const BlockKey& key);
// A list of 32-byte keys from an iterable of keys.
std::vector<BlockKey> KeysFromPy(py::handle obj, const char* what);

// Token ids from a sequence of ints or an integer buffer (numpy array);
// each must be in 0..4294967295.
std::vector<uint32_t> TokensFromPy(py::handle obj, const char* what);

// A layout from a kvtier.Layout, or a preset name / layout JSON path (str or
// os.PathLike). block_tokens > 0 overrides the layout's own.
ModelLayout LayoutFromPy(py::handle obj, const char* what, uint32_t block_tokens = 0);

// The numpy dtype a tensor of `dtype` is exposed as. numpy has no bfloat16
// or float8: BF16 is uint16, F8_E4M3 and F8_E5M2 are uint8 (raw bits).
py::dtype NumpyDType(DType dtype);

// bytes-like (or str, encoded as UTF-8) to std::string; None → "".
std::string BytesFromPy(py::handle obj, const char* what);

}  // namespace kvtier::python

// How help() names the typed arguments above.
#define KVTIER_PY_SHOWN(Name)                                              \
  template <>                                                              \
  struct pybind11::detail::handle_type_name<kvtier::python::Name> {        \
    static constexpr auto name = pybind11::detail::const_name(             \
        kvtier::python::Name::kShown);                                     \
  };
KVTIER_PY_SHOWN(PyKey)
KVTIER_PY_SHOWN(PyKeys)
KVTIER_PY_SHOWN(PyBuffer)
KVTIER_PY_SHOWN(PyBuffers)
KVTIER_PY_SHOWN(PyTensors)
KVTIER_PY_SHOWN(PyTokens)
KVTIER_PY_SHOWN(PyBytesLike)
KVTIER_PY_SHOWN(PyText)
KVTIER_PY_SHOWN(PyLayoutArg)
KVTIER_PY_SHOWN(PyPathOrNone)
KVTIER_PY_SHOWN(PyTextOrNone)
KVTIER_PY_SHOWN(PyInt)
KVTIER_PY_SHOWN(PyBytesOrNone)
KVTIER_PY_SHOWN(PyDict)
KVTIER_PY_SHOWN(PyAny)
KVTIER_PY_SHOWN(PyKeyList)
KVTIER_PY_SHOWN(PyArrays)
KVTIER_PY_SHOWN(PyConfigArg)
KVTIER_PY_SHOWN(PySignatureArg)
KVTIER_PY_SHOWN(PyIntOrNone)
KVTIER_PY_SHOWN(PyBytesOrText)
KVTIER_PY_SHOWN(PyKeyChainOrNone)
#undef KVTIER_PY_SHOWN

#endif  // KVTIER_PYTHON_CONVERT_H_
