#include "core/event_log.h"

#include <cassert>

namespace kvtier {

std::string_view LogLevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "unknown";
}

bool EventLog::Admit(size_t kind, uint64_t* suppressed) {
  assert(kind < kMaxKinds);
  if (kind >= kMaxKinds) kind = kMaxKinds - 1;
  const uint64_t now = env_->NowMicros();
  MutexLock lock(&mu_);
  Slot& s = slots_[kind];
  if (s.sent && now - s.last_sent_us < interval_micros_) {
    ++s.suppressed;
    return false;
  }
  s.sent = true;
  s.last_sent_us = now;
  *suppressed = s.suppressed;
  s.suppressed = 0;
  return true;
}

void EventLog::Send(LogLevel level, std::string message, uint64_t suppressed) {
  if (suppressed > 0) {
    message += " (" + std::to_string(suppressed) + " more since the last report)";
  }
  logger_->Log(level, message);
}

}  // namespace kvtier
