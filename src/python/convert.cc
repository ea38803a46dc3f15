#include "python/convert.h"

#include <atomic>
#include <limits>
#include <mutex>

#include "kvtier/env.h"
#include "python/errors.h"

namespace kvtier::python {

BufferView::BufferView(py::handle obj, const char* what, Access access) {
  if (PyUnicode_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected a bytes-like object, got str");
  }
  int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT;
  if (access == Access::kWrite) flags |= PyBUF_WRITABLE;
  if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) {
    // Replace the exporter's TypeError/BufferError with one naming the argument.
    py::error_already_set cause;
    view_ = Py_buffer{};
    const bool has_buffer = PyObject_CheckBuffer(obj.ptr()) != 0;
    std::string message = std::string(what) + ": ";
    if (!has_buffer) {
      message += "expected a bytes-like object (buffer protocol), got " + TypeName(obj);
    } else if (access == Access::kWrite) {
      message += "expected a writable, C-contiguous buffer (" + std::string(cause.what()) + ")";
    } else {
      message += "expected a C-contiguous buffer (" + std::string(cause.what()) + ")";
    }
    ThrowInvalid(std::move(message));
  }
}

BufferView::~BufferView() {
  if (view_.obj != nullptr) PyBuffer_Release(&view_);
}

bool BufferView::IsByteFormat() const {
  std::string f = format();
  if (!f.empty() && (f[0] == '<' || f[0] == '>' || f[0] == '=' || f[0] == '!' || f[0] == '@')) {
    f = f.substr(1);
  }
  return itemsize() == 1 && (f == "B" || f == "b" || f == "c");
}

int64_t IntFromPy(py::handle obj, const char* what, int64_t min, int64_t max) {
  if (!PyLong_Check(obj.ptr()) || PyBool_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected an int, got " + TypeName(obj));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(obj.ptr(), &overflow);
  if (overflow != 0 || v < min || v > max) {
    ThrowInvalid(std::string(what) + ": " + py::str(obj).cast<std::string>() + " is not in " +
                 std::to_string(min) + ".." + std::to_string(max));
  }
  return v;
}

void RequireArg(py::handle obj, const char* what) {
  if (obj.is_none()) ThrowInvalid(std::string(what) + ": is required");
}

std::string TypeName(py::handle obj) {
  py::handle type = reinterpret_cast<PyObject*>(Py_TYPE(obj.ptr()));
  std::string module = py::str(type.attr("__module__"));
  std::string name = py::str(type.attr("__qualname__"));
  return module == "builtins" ? name : module + "." + name;
}

BlockKey KeyFromPy(py::handle obj, const char* what) {
  if (obj.is_none()) ThrowInvalid(std::string(what) + ": expected 32 bytes, got None");
  if (!PyObject_CheckBuffer(obj.ptr()) || PyUnicode_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected 32 bytes (bytes-like), got " + TypeName(obj));
  }
  BufferView view(obj, what, BufferView::Access::kRead);
  if (view.bytes().size() != 32) {
    ThrowInvalid(std::string(what) + ": expected 32 bytes, got " +
                 std::to_string(view.bytes().size()));
  }
  BlockKey key;
  std::memcpy(key.bytes.data(), view.bytes().data(), 32);
  return key;
}

py::bytes KeyToPy(const BlockKey& key) {
  return py::bytes(reinterpret_cast<const char*>(key.bytes.data()), key.bytes.size());
}

std::vector<BlockKey> KeysFromPy(py::handle obj, const char* what) {
  if (PyUnicode_Check(obj.ptr()) || PyBytes_Check(obj.ptr()) || PyByteArray_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected a list of 32-byte keys, got " + TypeName(obj));
  }
  std::vector<BlockKey> keys;
  py::iterator it;
  try {
    it = py::iter(obj);
  } catch (const py::error_already_set&) {
    ThrowInvalid(std::string(what) + ": expected an iterable of 32-byte keys, got " +
                 TypeName(obj));
  }
  for (py::handle item : it) {
    const std::string name = std::string(what) + "[" + std::to_string(keys.size()) + "]";
    keys.push_back(KeyFromPy(item, name.c_str()));
  }
  return keys;
}

namespace {

template <typename T>
void AppendTokens(const std::byte* data, size_t count, const char* what,
                  std::vector<uint32_t>* out) {
  out->reserve(count);
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, data + i * sizeof(T), sizeof(T));
    if constexpr (std::numeric_limits<T>::is_signed) {
      if (v < 0) {
        ThrowInvalid(std::string(what) + "[" + std::to_string(i) + "]: token id " +
                     std::to_string(v) + " is negative");
      }
    }
    if (static_cast<uint64_t>(v) > UINT32_MAX) {
      ThrowInvalid(std::string(what) + "[" + std::to_string(i) + "]: token id " +
                   std::to_string(v) + " does not fit 32 bits");
    }
    out->push_back(static_cast<uint32_t>(v));
  }
}

}  // namespace

std::vector<uint32_t> TokensFromPy(py::handle obj, const char* what) {
  std::vector<uint32_t> tokens;
  if (PyUnicode_Check(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected token ids (ints), got str");
  }
  if (PyObject_CheckBuffer(obj.ptr()) && !PyBytes_Check(obj.ptr()) &&
      !PyByteArray_Check(obj.ptr())) {
    BufferView view(obj, what, BufferView::Access::kRead);
    std::string f = view.format();
    if (!f.empty() && (f[0] == '<' || f[0] == '=' || f[0] == '@')) f = f.substr(1);
    const size_t n = view.itemsize() == 0 ? 0 : view.bytes().size() / view.itemsize();
    const std::byte* d = view.bytes().data();
    if (f == "b")
      AppendTokens<int8_t>(d, n, what, &tokens);
    else if (f == "B")
      AppendTokens<uint8_t>(d, n, what, &tokens);
    else if (f == "h")
      AppendTokens<int16_t>(d, n, what, &tokens);
    else if (f == "H")
      AppendTokens<uint16_t>(d, n, what, &tokens);
    else if (f == "i" || (f == "l" && view.itemsize() == 4))
      AppendTokens<int32_t>(d, n, what, &tokens);
    else if (f == "I" || (f == "L" && view.itemsize() == 4))
      AppendTokens<uint32_t>(d, n, what, &tokens);
    else if (f == "q" || f == "l")
      AppendTokens<int64_t>(d, n, what, &tokens);
    else if (f == "Q" || f == "L")
      AppendTokens<uint64_t>(d, n, what, &tokens);
    else {
      ThrowInvalid(std::string(what) + ": expected an integer array, got format '" + view.format() +
                   "'");
    }
    return tokens;
  }
  py::iterator it;
  try {
    it = py::iter(obj);
  } catch (const py::error_already_set&) {
    ThrowInvalid(std::string(what) + ": expected a sequence of token ids, got " + TypeName(obj));
  }
  for (py::handle item : it) {
    const std::string where = std::string(what) + "[" + std::to_string(tokens.size()) + "]";
    if (!PyLong_Check(item.ptr()) && !PyIndex_Check(item.ptr())) {
      ThrowInvalid(where + ": expected an int token id, got " + TypeName(item));
    }
    py::int_ value = py::reinterpret_steal<py::int_>(PyNumber_Index(item.ptr()));
    if (!value) throw py::error_already_set();
    int overflow = 0;
    const long long v = PyLong_AsLongLongAndOverflow(value.ptr(), &overflow);
    if (overflow != 0 || v < 0 || v > static_cast<long long>(UINT32_MAX)) {
      ThrowInvalid(where + ": token id " + std::string(py::str(value)) +
                   " is not in 0..4294967295");
    }
    tokens.push_back(static_cast<uint32_t>(v));
  }
  return tokens;
}

ModelLayout LayoutFromPy(py::handle obj, const char* what, uint32_t block_tokens) {
  if (py::isinstance<ModelLayout>(obj)) {
    const ModelLayout& layout = obj.cast<const ModelLayout&>();
    if (block_tokens == 0) return layout;
    Result<ModelLayout> scaled = layout.WithBlockTokens(block_tokens);
    if (!scaled.ok()) Throw(scaled.status().WithContext(what));
    return *std::move(scaled);
  }
  std::string name;
  if (PyUnicode_Check(obj.ptr())) {
    name = obj.cast<std::string>();
  } else if (py::hasattr(obj, "__fspath__")) {
    py::object path = obj.attr("__fspath__")();
    if (!PyUnicode_Check(path.ptr())) {
      ThrowInvalid(std::string(what) + ": expected a str path, got a bytes path");
    }
    name = path.cast<std::string>();
  } else {
    ThrowInvalid(std::string(what) +
                 ": expected a kvtier.Layout, a preset name or a layout JSON path, got " +
                 TypeName(obj));
  }
  Result<ModelLayout> layout = ModelLayout::Resolve(Env::Default(), name, block_tokens);
  if (!layout.ok()) Throw(layout.status().WithContext(what));
  return *std::move(layout);
}

namespace {

// pybind11 (2.10) sets up its table of numpy's C API on first use, in a C++
// function-local static whose initializer imports numpy.core.multiarray.
// That import runs Python code, so the interpreter may hand the GIL to
// another thread meanwhile; a second thread that reaches the same static
// then waits on the C++ initialization guard while holding the GIL, and
// the first never gets the GIL back: both hang. Two threads decoding their
// first blocks at once did (the vLLM backend's lookup threads, with numpy 2
// whose numpy.core.multiarray is imported only when asked for; with numpy
// 1.24 when numpy was not imported yet). So the first use goes through
// here: one thread sets the table up holding `mu`, and the others wait for
// `mu` without the GIL.
void EnsureNumpyApi() {
  static std::atomic<bool> ready{false};
  static std::mutex mu;
  if (ready.load(std::memory_order_acquire)) return;
  std::unique_lock<std::mutex> lock(mu, std::defer_lock);
  {
    py::gil_scoped_release release;
    lock.lock();
  }
  if (ready.load(std::memory_order_relaxed)) return;
  py::detail::npy_api::get();  // throws without numpy: the next call tries again
  ready.store(true, std::memory_order_release);
}

}  // namespace

py::dtype NumpyDType(DType dtype) {
  EnsureNumpyApi();
  switch (dtype) {
    case DType::kF16:
      return py::dtype("float16");
    case DType::kBF16:
      return py::dtype("uint16");
    case DType::kF32:
      return py::dtype("float32");
    case DType::kF64:
      return py::dtype("float64");
    case DType::kI8:
      return py::dtype("int8");
    case DType::kI16:
      return py::dtype("int16");
    case DType::kI32:
      return py::dtype("int32");
    case DType::kI64:
      return py::dtype("int64");
    case DType::kU8:
      return py::dtype("uint8");
    case DType::kU16:
      return py::dtype("uint16");
    case DType::kU32:
      return py::dtype("uint32");
    case DType::kU64:
      return py::dtype("uint64");
    case DType::kBool:
      return py::dtype("bool");
    case DType::kF8E4M3:
      return py::dtype("uint8");
    case DType::kF8E5M2:
      return py::dtype("uint8");
  }
  return py::dtype("uint8");
}

std::string BytesFromPy(py::handle obj, const char* what) {
  if (obj.is_none()) return {};
  if (PyUnicode_Check(obj.ptr())) return obj.cast<std::string>();
  if (!PyObject_CheckBuffer(obj.ptr())) {
    ThrowInvalid(std::string(what) + ": expected bytes or str, got " + TypeName(obj));
  }
  BufferView view(obj, what, BufferView::Access::kRead);
  return std::string(reinterpret_cast<const char*>(view.bytes().data()), view.bytes().size());
}

}  // namespace kvtier::python
