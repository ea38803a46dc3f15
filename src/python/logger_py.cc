#include "python/logger_py.h"

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace py = pybind11;

namespace kvtier::python {
namespace {

// logging's levels.
int PyLevel(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 10;
    case LogLevel::kInfo:
      return 20;
    case LogLevel::kWarning:
      return 30;
    case LogLevel::kError:
      return 40;
  }
  return 30;
}

bool Finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

class PythonLogger final : public Logger {
 public:
  void Log(LogLevel level, std::string_view message) override {
    // Counted before the check, so that Stop() sees every line that got
    // past it.
    in_flight_.fetch_add(1);
    if (enabled_.load() && Py_IsInitialized() != 0 && !Finalizing()) Forward(level, message);
    in_flight_.fetch_sub(1);
  }

  // REQUIRES: the GIL held. Later lines are dropped; the ones in flight
  // finish first (they need the GIL, released meanwhile).
  void Stop() {
    enabled_.store(false);
    py::gil_scoped_release release;
    // Bounded: a handler that never returns must not hang the exit.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  static void Forward(LogLevel level, std::string_view message) {
    try {
      py::gil_scoped_acquire gil;
      try {
        py::object logger = py::module_::import("logging").attr("getLogger")("kvtier");
        logger.attr("log")(PyLevel(level), py::str(message.data(), message.size()));
      } catch (py::error_already_set& e) {
        e.discard_as_unraisable("kvtier logger");
      }
    } catch (...) {
      // Out of memory building the line, or no interpreter: the line is
      // lost; nothing unwinds into a kvtier thread.
    }
  }

  std::atomic<bool> enabled_{true};
  std::atomic<int> in_flight_{0};
};

PythonLogger* TheLogger() {
  static PythonLogger* const logger = new PythonLogger();
  return logger;
}

}  // namespace

Logger* PythonLog() { return TheLogger(); }

void RegisterLogger(py::module_& m) {
  (void)m;
  py::module_::import("atexit").attr("register")(
      py::cpp_function([] { TheLogger()->Stop(); }));
}

}  // namespace kvtier::python
