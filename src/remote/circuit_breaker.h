// CircuitBreaker: turns an outage of one node into immediate misses.
//
//   closed     calls go through; `failure_threshold` consecutive failures
//              open it;
//   open       calls are refused at once until `open_micros` have passed;
//   half-open  then exactly one call (the probe) goes through: success
//              closes the breaker, failure opens it again for twice as long
//              (at most `max_open_micros`).
//
// Failures are failed connects and round trips (timeouts, resets, protocol
// errors), not error replies: a server that answers -OOM is up. Slow
// failures (OnSlowFailure: a reply under the reply-rate floor) also count
// on their own: `failure_threshold` of them within `slow_window_micros`
// open the breaker even with successes in between, because a node that
// trickles its large replies still answers small ones (a writer's EXISTS)
// at once, and those successes would otherwise reset the count for ever. The open
// time is also the reconnect backoff: no connection is attempted while the
// breaker is open.
//
// Each change of state an operator must hear of (DESIGN.md §7) goes to
// BreakerOptions::on_change, after mu_ is released: opened from closed (the
// node is down or failing), opened again after a failed probe (still
// down), closed by a successful probe (back up). A failure names its cause
// (the failed call's status message), which on_change hands on, so that the
// "down" line says why (refused, name resolution, TLS handshake, timeout).
//
// Thread safety: all methods are safe from any thread (one mutex, mu_).
#ifndef KVTIER_REMOTE_CIRCUIT_BREAKER_H_
#define KVTIER_REMOTE_CIRCUIT_BREAKER_H_

#include <cstdint>
#include <functional>
#include <string_view>

#include "core/mutex.h"
#include "core/thread_annotations.h"

namespace kvtier::remote {

enum class BreakerChange : uint8_t {
  kOpened,    // closed -> open: `failure_threshold` failures, or Trip()
  kReopened,  // a probe failed: open again, for longer
  kClosed,    // a probe succeeded after the breaker was open
};

struct BreakerOptions {
  uint32_t failure_threshold = 3;
  uint64_t open_micros = 1'000'000;
  uint64_t max_open_micros = 30'000'000;
  uint64_t slow_window_micros = 10'000'000;
  // Called on each change above with the open time now in force (0 for
  // kClosed) and the cause the failure that made it gave ("" if none), on
  // the thread that caused it, with no lock held. Optional.
  std::function<void(BreakerChange change, uint64_t open_micros, std::string_view cause)> on_change;
};

class CircuitBreaker {
 public:
  enum class Admit : uint8_t {
    kYes,    // closed: go ahead
    kProbe,  // half-open: go ahead, and report the outcome
    kNo,     // open (or a probe is in flight): fail at once
  };

  explicit CircuitBreaker(const BreakerOptions& options) : options_(options) {}

  // Whether a call may go to the node now. A caller given kYes or kProbe
  // reports the outcome with OnSuccess() or OnFailure().
  Admit Allow(uint64_t now_micros);
  void OnSuccess();
  // True if this failure opened the breaker. `cause`: why the call failed.
  bool OnFailure(uint64_t now_micros, std::string_view cause = {});
  // A failure that was a slow reply: OnFailure(), and also counted in a
  // window that successes do not reset. True if it opened the breaker.
  bool OnSlowFailure(uint64_t now_micros, std::string_view cause = {});
  // Opens the breaker now (e.g. the server did not answer at Open()).
  // True if it was not open already.
  bool Trip(uint64_t now_micros, std::string_view cause = {});
  // True while calls would be refused without a probe being due.
  bool IsOpen(uint64_t now_micros);

 private:
  enum class State : uint8_t { kClosed, kOpen, kHalfOpen };
  bool OpenLocked(uint64_t now_micros) REQUIRES(mu_);
  bool Fail(uint64_t now_micros, bool slow, std::string_view cause) EXCLUDES(mu_);
  void Notify(BreakerChange change, uint64_t open_micros, std::string_view cause) const;

  const BreakerOptions options_;
  Mutex mu_;
  State state_ GUARDED_BY(mu_) = State::kClosed;
  uint32_t failures_ GUARDED_BY(mu_) = 0;
  uint32_t slow_failures_ GUARDED_BY(mu_) = 0;  // since slow_since_
  uint64_t slow_since_ GUARDED_BY(mu_) = 0;
  uint64_t open_until_ GUARDED_BY(mu_) = 0;
  uint64_t open_micros_ GUARDED_BY(mu_) = 0;  // the current open period; 0 = first
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_CIRCUIT_BREAKER_H_
