#include "python/logger_py.h"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

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

// Lines waiting for the delivery thread, at most: the events are
// rate-limited per kind (a few dozen kinds), so a full queue means Python
// is not taking the GIL back; later lines are counted and dropped.
constexpr size_t kMaxQueuedLines = 256;

class PythonLogger final : public Logger {
 public:
  // Queues the line and returns: taking the GIL and running logging's
  // handlers (a stream write, a formatter) on the thread that logged would
  // put them on the request path (a match() that opens a breaker) and on
  // kvtier's own threads.
  void Log(LogLevel level, std::string_view message) override {
    try {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopped_) return;
      if (queue_.size() >= kMaxQueuedLines) {
        ++dropped_;
        return;
      }
      queue_.emplace_back(level, std::string(message));
      if (!started_) {
        started_ = true;
        std::thread([this] { DeliveryLoop(); }).detach();
      }
      wake_.notify_one();
    } catch (...) {
      // No memory for the line or no thread: the line is lost; nothing
      // unwinds into the caller.
    }
  }

  // Waits, with the GIL released, until every line queued so far has been
  // handed to logging (bounded: a handler that never returns must not hang
  // the caller). Cache.close() calls it, so that a caller who closes a
  // cache sees all of its lines.
  void Drain() {
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = queued_total_locked();
    drained_.wait_for(lock, std::chrono::seconds(5),
                      [&] { return delivered_ >= target || stopped_; });
  }

  // REQUIRES: the GIL held (atexit). Later lines are dropped; the queued
  // ones are delivered first, bounded by the same 5 s.
  void Stop() {
    Drain();
    py::gil_scoped_release release;
    std::unique_lock<std::mutex> lock(mu_);
    stopped_ = true;
    queue_.clear();
    wake_.notify_all();
    // A line that got in after the drain may be in Forward(): it needs the
    // GIL (released here) and must be done before finalization starts.
    drained_.wait_for(lock, std::chrono::seconds(5), [&] { return in_delivery_ == 0; });
  }

  // pthread_atfork handlers: `mu_` is held across fork() by the forking
  // thread, so no other thread is inside it when the image is copied.
  void BeforeFork() { mu_.lock(); }
  void AfterForkInParent() { mu_.unlock(); }
  // The delivery thread and any thread that waited on the condition
  // variables are the parent's: the child delivers its own lines with a
  // thread of its own, started by its first line. The queued lines are the
  // parent's to deliver.
  void AfterForkInChild() {
    new (&wake_) std::condition_variable();
    new (&drained_) std::condition_variable();
    queue_.clear();
    delivered_ = 0;
    in_delivery_ = 0;
    dropped_ = 0;
    started_ = false;
    mu_.unlock();
  }

 private:
  uint64_t queued_total_locked() const { return delivered_ + in_delivery_ + queue_.size(); }

  void DeliveryLoop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      wake_.wait(lock, [&] { return stopped_ || !queue_.empty(); });
      if (stopped_) return;
      std::pair<LogLevel, std::string> line = std::move(queue_.front());
      queue_.pop_front();
      const uint64_t dropped = std::exchange(dropped_, 0);
      in_delivery_ = 1;
      lock.unlock();
      if (dropped > 0) {
        line.second += " (" + std::to_string(dropped) +
                       " more lines dropped: Python did not take them in time)";
      }
      if (Py_IsInitialized() != 0 && !Finalizing()) Forward(line.first, line.second);
      lock.lock();
      in_delivery_ = 0;
      ++delivered_;
      drained_.notify_all();
    }
  }

  static void Forward(LogLevel level, const std::string& message) {
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
      // lost; nothing unwinds into the delivery thread.
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;     // a line queued, or stopped
  std::condition_variable drained_;  // a line delivered
  std::deque<std::pair<LogLevel, std::string>> queue_;
  uint64_t delivered_ = 0;
  uint64_t in_delivery_ = 0;
  uint64_t dropped_ = 0;
  bool started_ = false;
  bool stopped_ = false;
};

PythonLogger* TheLogger() {
  static PythonLogger* const logger = [] {
    auto* created = new PythonLogger();
    // fork() copies the logger but not its delivery thread, and may copy
    // `mu_` held by a thread that is not in the child: the child then waits
    // forever in the first Log() or close(). The lock is taken around
    // fork() and the child starts over with its own thread.
    pthread_atfork([] { TheLogger()->BeforeFork(); }, [] { TheLogger()->AfterForkInParent(); },
                   [] { TheLogger()->AfterForkInChild(); });
    return created;
  }();
  return logger;
}

}  // namespace

Logger* PythonLog() { return TheLogger(); }

void DrainPythonLog() { TheLogger()->Drain(); }

void RegisterLogger(py::module_& m) {
  (void)m;
  // Made at import, so its fork handlers are registered before the disk
  // tier's (disk/index_fork_guard.h): theirs then run first before a fork,
  // while a thread that logs can still take `mu_`.
  (void)TheLogger();
  py::module_::import("atexit").attr("register")(py::cpp_function([] { TheLogger()->Stop(); }));
}

}  // namespace kvtier::python
