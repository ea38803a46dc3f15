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

void CircuitBreaker::OnSuccess() {
  MutexLock lock(&mu_);
  state_ = State::kClosed;
  failures_ = 0;
  open_micros_ = 0;
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

bool CircuitBreaker::OnFailure(uint64_t now_micros) {
  MutexLock lock(&mu_);
  ++failures_;
  if (state_ == State::kHalfOpen) return OpenLocked(now_micros);
  if (state_ == State::kClosed && failures_ >= options_.failure_threshold) {
    return OpenLocked(now_micros);
  }
  return false;
}

bool CircuitBreaker::Trip(uint64_t now_micros) {
  MutexLock lock(&mu_);
  if (state_ == State::kOpen) return false;
  return OpenLocked(now_micros);
}

bool CircuitBreaker::IsOpen(uint64_t now_micros) {
  MutexLock lock(&mu_);
  return (state_ == State::kOpen && now_micros < open_until_) || state_ == State::kHalfOpen;
}

}  // namespace kvtier::remote
