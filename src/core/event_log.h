// EventLog: a tier's events on their way to its Logger (kvtier/logger.h),
// at most one line per event kind per interval. A line suppressed by the
// interval is counted, and the next line of its kind that goes out says how
// many were ("... (3 more since the last report)"), so an operator sees an
// outage once and the flood it caused as one number.
//
// Kinds are small integers a tier defines (its own enum, < kMaxKinds); the
// clock is the Env's monotonic one, so tests move it with a fake Env.
//
// Thread safety: Emit() from any thread; one mutex guards the per-kind
// state, and the Logger is called after it is released (never under any
// lock). Attach() only before the first Emit().
#ifndef KVTIER_CORE_EVENT_LOG_H_
#define KVTIER_CORE_EVENT_LOG_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"
#include "kvtier/logger.h"

namespace kvtier {

class EventLog {
 public:
  static constexpr size_t kMaxKinds = 16;

  EventLog() = default;
  EventLog(Logger* logger, Env* env, uint64_t interval_micros = kEventLogIntervalMicros) {
    Attach(logger, env, interval_micros);
  }
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Where lines go; nullptr logs nothing. REQUIRES: no Emit() yet, env
  // non-null when logger is.
  void Attach(Logger* logger, Env* env, uint64_t interval_micros = kEventLogIntervalMicros) {
    logger_ = logger;
    env_ = env;
    interval_micros_ = interval_micros;
  }
  bool enabled() const { return logger_ != nullptr; }

  // Sends make_message() (a std::string, built only when the line goes
  // out) unless a line of `kind` went out less than the interval ago; then
  // the event is only counted. REQUIRES: kind < kMaxKinds.
  template <typename MakeMessage>
  void Emit(size_t kind, LogLevel level, MakeMessage&& make_message) {
    if (logger_ == nullptr) return;
    uint64_t suppressed = 0;
    if (!Admit(kind, &suppressed)) return;
    Send(level, make_message(), suppressed);
  }

 private:
  struct Slot {
    bool sent = false;
    uint64_t last_sent_us = 0;
    uint64_t suppressed = 0;
  };
  // True if a line of `kind` may go out now (and records it as sent);
  // *suppressed = lines of that kind held back since the last one.
  bool Admit(size_t kind, uint64_t* suppressed);
  void Send(LogLevel level, std::string message, uint64_t suppressed);

  Logger* logger_ = nullptr;
  Env* env_ = nullptr;
  uint64_t interval_micros_ = kEventLogIntervalMicros;
  Mutex mu_;
  std::array<Slot, kMaxKinds> slots_ GUARDED_BY(mu_);
};

}  // namespace kvtier

#endif  // KVTIER_CORE_EVENT_LOG_H_
