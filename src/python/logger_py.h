// The Python module's Logger (kvtier/logger.h): every kvtier.Cache sends
// its events (DESIGN.md §7) to logging.getLogger("kvtier"), at the matching
// logging level (DEBUG, INFO, WARNING, ERROR).
//
// Events come from kvtier's own threads (disk writers, remote writers, the
// maintenance thread) as well as from the caller's: Log() takes the GIL
// (pybind11 gil_scoped_acquire), and nothing it does may raise into those
// threads (an exception in a handler is reported through
// sys.unraisablehook and dropped). Deadlock-free because no kvtier.Cache
// call holds the GIL while it waits for a kvtier thread (each releases it,
// close() and the destructor included), and at interpreter exit an atexit
// hook stops the forwarding and waits, with the GIL released, for the
// lines in flight; later events are dropped.
//
// Thread safety: Log() from any thread.
#ifndef KVTIER_PYTHON_LOGGER_PY_H_
#define KVTIER_PYTHON_LOGGER_PY_H_

#include <pybind11/pybind11.h>

#include "kvtier/logger.h"

namespace kvtier::python {

// The module's logger; never destroyed (a cache's threads may outlive the
// module's objects at exit).
Logger* PythonLog();

// Registers the atexit hook that stops PythonLog() before finalization.
void RegisterLogger(pybind11::module_& m);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_LOGGER_PY_H_
