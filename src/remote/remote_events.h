// RemoteEvents: what a RemoteTier tells its Logger (RemoteTierOptions::
// info_log, DESIGN.md §7), rate-limited per kind (core/event_log.h): a node
// down (its breaker opened), still down (a probe failed; debug), back up (a
// probe succeeded), a full write queue dropping copies, a server refusing
// writes with -OOM, and values that fail verification (poisoned, damaged or
// of another layout; where MAC failures will be reported too).
//
// Thread safety: every method from any thread, after Attach(); the Logger
// is called with no lock held.
#ifndef KVTIER_REMOTE_REMOTE_EVENTS_H_
#define KVTIER_REMOTE_REMOTE_EVENTS_H_

#include <cstdint>
#include <string>

#include "core/event_log.h"
#include "kvtier/env.h"
#include "kvtier/logger.h"
#include "remote/circuit_breaker.h"

namespace kvtier::remote {

class RemoteEvents {
 public:
  // REQUIRES: before any other call; `env` outlives this object.
  void Attach(Logger* logger, Env* env, uint32_t failure_threshold) {
    log_.Attach(logger, env);
    failure_threshold_ = failure_threshold;
  }

  // The breaker of the node at `address` ("host:port") changed.
  void BreakerChanged(const std::string& address, BreakerChange change, uint64_t open_micros);
  // A Put found the write queue full (queue_max_bytes) and dropped its copy.
  void QueueFull(uint64_t queue_max_bytes);
  // A SET was answered -OOM: the copy is dropped.
  void OutOfMemory();
  // A value read failed verification: a miss, deleted.
  void BadValue();

 private:
  enum Kind : size_t { kDown, kStillDown, kUp, kQueueFull, kOom, kBadValue };

  EventLog log_;
  uint32_t failure_threshold_ = 0;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_REMOTE_EVENTS_H_
