// The kvtier Python extension module (kvtier._kvtier), re-exported by the
// pure-Python package kvtier/__init__.py. DESIGN.md §8 names its surface.
#include <pybind11/pybind11.h>

#include "python/errors.h"
#include "python/logger_py.h"
#include "python/register.h"

PYBIND11_MODULE(_kvtier, m) {
  m.doc() = "kvtier: KV-cache tiers (RAM, disk) for LLM inference engines.";
  m.attr("__version__") = KVTIER_VERSION;
  kvtier::python::RegisterErrors(m);
  kvtier::python::RegisterLayout(m);
  kvtier::python::RegisterKeys(m);
  kvtier::python::RegisterCodec(m);
  kvtier::python::RegisterCache(m);
  kvtier::python::RegisterLogger(m);
}
