// The Python module's Logger (kvtier/logger.h): every kvtier.Cache sends
// its events (DESIGN.md §7) to logging.getLogger("kvtier"), at the matching
// logging level (DEBUG, INFO, WARNING, ERROR).
//
// Events come from kvtier's own threads (disk writers, remote writers, the
// maintenance thread) as well as from the caller's, a match() on the
// request path included: Log() only queues the line (at most 256; more are
// counted and said in the next line) and one delivery thread takes the GIL
// (pybind11 gil_scoped_acquire) and calls logging, so no caller waits for
// the GIL or a handler. Nothing raises into any thread (an exception in a
// handler is reported through sys.unraisablehook and dropped).
// Deadlock-free because no kvtier.Cache call holds the GIL while it waits
// for a kvtier thread or the delivery thread (each releases it, close()
// and the destructor included); close() waits for the lines queued so far.
// At interpreter exit an atexit hook delivers what is queued, stops the
// thread and waits, GIL released, for the line in flight; later events are
// dropped.
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

// Waits (GIL released, at most 5 s) until every line logged so far has
// reached logging: Log() only queues a line, a thread of this module hands
// it to Python. Cache.close() calls it.
void DrainPythonLog();

// Registers the atexit hook that stops PythonLog() before finalization.
void RegisterLogger(pybind11::module_& m);

}  // namespace kvtier::python

#endif  // KVTIER_PYTHON_LOGGER_PY_H_
