#include "remote/circuit_breaker.h"

#include <algorithm>

namespace kvtier::remote {

CircuitBreaker::Admit CircuitBreaker::Allow(uint64_t now_micros) {
  MutexLock lock(&mu_);
  switch (state_) {
    case State::kClosed:
      return Admit::kYes;
    case State::kHalfOpen:
      return Admit::kNo;  // the probe is in flight
    case State::kOpen:
      if (now_micros < open_until_) return Admit::kNo;
      state_ = State::kHalfOpen;
      return Admit::kProbe;
  }
  return Admit::kNo;
}

void CircuitBreaker::Notify(BreakerChange change, uint64_t open_micros,
                            std::string_view cause) const {
  if (options_.on_change) options_.on_change(change, open_micros, cause);
}

void CircuitBreaker::OnSuccess() {
  bool was_open;
  {
    MutexLock lock(&mu_);
    was_open = state_ != State::kClosed;
    state_ = State::kClosed;
    failures_ = 0;
    open_micros_ = 0;
  }
  if (was_open) Notify(BreakerChange::kClosed, 0, {});
}

bool CircuitBreaker::OpenLocked(uint64_t now_micros) {
  // The first opening waits open_micros; each failed probe doubles it.
  open_micros_ = open_micros_ == 0 ? options_.open_micros
                                   : std::min(open_micros_ * 2, options_.max_open_micros);
  open_until_ = now_micros + open_micros_;
  const bool was_open = state_ == State::kOpen;
  state_ = State::kOpen;
  return !was_open;
}

bool CircuitBreaker::OnFailure(uint64_t now_micros, std::string_view cause) {
  return Fail(now_micros, false, cause);
}

bool CircuitBreaker::OnSlowFailure(uint64_t now_micros, std::string_view cause) {
  return Fail(now_micros, true, cause);
}

bool CircuitBreaker::Fail(uint64_t now_micros, bool slow, std::string_view cause) {
  BreakerChange change;
  uint64_t open_micros;
  {
    MutexLock lock(&mu_);
    ++failures_;
    if (slow) {
      if (slow_failures_ == 0 || now_micros - slow_since_ > options_.slow_window_micros) {
        slow_failures_ = 0;
        slow_since_ = now_micros;
      }
      ++slow_failures_;
    }
    if (state_ == State::kHalfOpen) {
      change = BreakerChange::kReopened;
    } else if (state_ == State::kClosed && (failures_ >= options_.failure_threshold ||
                                            slow_failures_ >= options_.failure_threshold)) {
      change = BreakerChange::kOpened;
      slow_failures_ = 0;
    } else {
      return false;
    }
    OpenLocked(now_micros);
    open_micros = open_micros_;
  }
  Notify(change, open_micros, cause);
  return true;
}

bool CircuitBreaker::Trip(uint64_t now_micros, std::string_view cause) {
  BreakerChange change;
  uint64_t open_micros;
  {
    MutexLock lock(&mu_);
    if (state_ == State::kOpen) return false;
    change = state_ == State::kHalfOpen ? BreakerChange::kReopened : BreakerChange::kOpened;
    OpenLocked(now_micros);
    open_micros = open_micros_;
  }
  Notify(change, open_micros, cause);
  return true;
}

bool CircuitBreaker::IsOpen(uint64_t now_micros) {
  MutexLock lock(&mu_);
  return (state_ == State::kOpen && now_micros < open_until_) || state_ == State::kHalfOpen;
}

}  // namespace kvtier::remote
