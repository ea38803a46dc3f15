// RemoteEvents: what a RemoteTier tells its Logger (RemoteTierOptions::
// info_log, DESIGN.md §7), rate-limited per kind (core/event_log.h): a node
// down (its breaker opened), still down (a probe failed; debug), back up (a
// probe succeeded), a full write queue dropping copies, a server refusing
// writes with -OOM, values that fail verification (poisoned, damaged or of
// another layout) and values not signed by the tier's MAC keys.
//
// Thread safety: every method from any thread, after Attach(); the Logger
// is called with no lock held.
#ifndef KVTIER_REMOTE_REMOTE_EVENTS_H_
#define KVTIER_REMOTE_REMOTE_EVENTS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "core/event_log.h"
#include "kvtier/env.h"
#include "kvtier/logger.h"
#include "remote/circuit_breaker.h"

namespace kvtier::remote {

// What a failure's message says its cause was, in a few words: "connection
// refused", "name resolution failed", "TLS handshake failed", "timed out",
// or "" when it is none of these.
std::string_view FailureCause(std::string_view message);

class RemoteEvents {
 public:
  // REQUIRES: before any other call; `env` outlives this object.
  void Attach(Logger* logger, Env* env, uint32_t failure_threshold) {
    log_.Attach(logger, env);
    failure_threshold_ = failure_threshold;
  }

  // The breaker of the node at `address` ("host:port") changed; `cause`:
  // the message of the failure that changed it ("" if none).
  void BreakerChanged(const std::string& address, BreakerChange change, uint64_t open_micros,
                      std::string_view cause = {});
  // A Cluster's slot map was reloaded from `from` after a node went down
  // (or a MOVED, or CLUSTERDOWN): `moved` slots changed owner.
  void SlotMapChanged(const std::string& from, uint32_t moved);
  // A Put found the write queue full (queue_max_bytes) and dropped its copy.
  void QueueFull(uint64_t queue_max_bytes);
  // A SET was answered -OOM: the copy is dropped.
  void OutOfMemory();
  // A value read failed verification (`missing_parts`: some of its parts
  // were absent, as when the server's LRU evicts a part): a miss, deleted.
  void BadValue(bool missing_parts = false);
  // A value read was not signed by one of the tier's keys (`why`:
  // VerdictText): a miss, deleted.
  void MacFailure(const std::string& key_hex, std::string_view why);

 private:
  enum Kind : size_t {
    kDown,
    kStillDown,
    kUp,
    kQueueFull,
    kOom,
    kBadValue,
    kMissingParts,
    kMacFailure,
    kSlotMap,
  };

  EventLog log_;
  uint32_t failure_threshold_ = 0;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_REMOTE_EVENTS_H_
