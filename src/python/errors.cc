#include "python/errors.h"

#include <array>
#include <string>

namespace kvtier::python {
namespace {

namespace py = pybind11;

struct ErrorClass {
  StatusCode code;
  const char* name;
  const char* doc;
};

constexpr std::array<ErrorClass, 8> kClasses = {{
    {StatusCode::kNotFound, "NotFound", "A named thing does not exist (e.g. a layout file)."},
    {StatusCode::kCorruption, "Corruption",
     "Bytes failed validation: structure, key, signature or checksum."},
    {StatusCode::kInvalidArgument, "InvalidArgument",
     "A malformed argument: wrong type, size, dtype or value. Also a ValueError."},
    {StatusCode::kResourceExhausted, "ResourceExhausted",
     "Out of memory, budget, queue space or disk."},
    {StatusCode::kIOError, "IOError", "A system call failed. Also an OSError."},
    {StatusCode::kUnavailable, "Unavailable", "A tier or service is down."},
    {StatusCode::kFailedPrecondition, "FailedPrecondition",
     "The object does not allow the call in its state (e.g. a closed Cache)."},
    {StatusCode::kInternal, "Internal", "A broken invariant inside kvtier (a bug)."},
}};

// Owned by the module for the life of the process.
PyObject* g_base = nullptr;
std::array<PyObject*, 9> g_by_code{};

PyObject* ClassFor(StatusCode code) {
  const auto i = static_cast<size_t>(code);
  if (i < g_by_code.size() && g_by_code[i] != nullptr) return g_by_code[i];
  return g_base;
}

}  // namespace

void RegisterErrors(py::module_& m) {
  g_base = PyErr_NewExceptionWithDoc(
      "kvtier.Error", "Base class of every error kvtier raises; a cache miss is not an error.",
      PyExc_Exception, nullptr);
  if (g_base == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(g_base));
  for (const ErrorClass& c : kClasses) {
    // A second, built-in base where one fits, so that `except ValueError`
    // and `except OSError` catch what they would catch from Python's own
    // calls.
    py::tuple bases = py::make_tuple(py::handle(g_base));
    if (c.code == StatusCode::kInvalidArgument) {
      bases = py::make_tuple(py::handle(g_base), py::handle(PyExc_ValueError));
    } else if (c.code == StatusCode::kIOError) {
      bases = py::make_tuple(py::handle(g_base), py::handle(PyExc_OSError));
    }
    const std::string qualified = std::string("kvtier.") + c.name;
    PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), c.doc, bases.ptr(), nullptr);
    if (cls == nullptr) throw py::error_already_set();
    g_by_code[static_cast<size_t>(c.code)] = cls;
    m.add_object(c.name, py::handle(cls));
  }
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      PyErr_SetString(ClassFor(e.status().code()), e.status().message().c_str());
    } catch (const std::bad_alloc&) {
      PyErr_SetString(ClassFor(StatusCode::kResourceExhausted), "out of memory");
    }
  });
}

}  // namespace kvtier::python
