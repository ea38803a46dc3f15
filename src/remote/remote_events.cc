#include "remote/remote_events.h"

namespace kvtier::remote {
namespace {

std::string Seconds(uint64_t micros) {
  if (micros % 1'000'000 == 0) return std::to_string(micros / 1'000'000) + " s";
  return std::to_string(micros / 1000) + " ms";
}

bool Contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

// "CAUSE: MESSAGE" ("MESSAGE" when its cause has no name), "" without one.
std::string Because(std::string_view message) {
  if (message.empty()) return "";
  const std::string_view cause = FailureCause(message);
  const std::string text(message.substr(0, 300));
  return cause.empty() ? text : std::string(cause) + ": " + text;
}

}  // namespace

std::string_view FailureCause(std::string_view m) {
  // TLS first: "TLS handshake timed out" is a handshake failure.
  if (Contains(m, "TLS handshake")) return "TLS handshake failed";
  if (Contains(m, "Connection refused")) return "connection refused";
  if (Contains(m, "Name or service not known") || Contains(m, "name resolution") ||
      Contains(m, "nodename nor servname") || Contains(m, "No address associated") ||
      Contains(m, "Can't resolve")) {
    return "name resolution failed";
  }
  if (Contains(m, "timed out") || Contains(m, "Timeout") || Contains(m, "timeout")) {
    return "timed out";
  }
  return "";
}

void RemoteEvents::BreakerChanged(const std::string& address, BreakerChange change,
                                  uint64_t open_micros, std::string_view cause) {
  switch (change) {
    case BreakerChange::kOpened:
      log_.Emit(kDown, LogLevel::kWarning, [&] {
        const std::string why = Because(cause);
        return "remote: redis " + address + " is down or failing (" +
               (why.empty() ? "" : why + "; ") + std::to_string(failure_threshold_) +
               " failed calls in a row, or no answer at open): its circuit breaker is open, "
               "loads from it are misses and copies to it are dropped; next try in " +
               Seconds(open_micros);
      });
      return;
    case BreakerChange::kReopened:
      log_.Emit(kStillDown, LogLevel::kDebug, [&] {
        const std::string why = Because(cause);
        return "remote: redis " + address + " is still down" +
               (why.empty() ? "" : " (" + why + ")") + "; next try in " + Seconds(open_micros);
      });
      return;
    case BreakerChange::kClosed:
      log_.Emit(kUp, LogLevel::kInfo,
                [&] { return "remote: redis " + address + " is back up"; });
      return;
  }
}

void RemoteEvents::QueueFull(uint64_t queue_max_bytes) {
  log_.Emit(kQueueFull, LogLevel::kWarning, [&] {
    return "remote: the write queue (" + std::to_string(queue_max_bytes >> 20) +
           " MiB) is full: copies to Redis are dropped (the local tiers keep the blocks); "
           "Redis is slower than the stores";
  });
}

void RemoteEvents::OutOfMemory() {
  log_.Emit(kOom, LogLevel::kWarning, [] {
    return std::string(
        "remote: redis refused a write with -OOM (maxmemory reached and its policy evicts "
        "nothing): copies are dropped; set maxmemory-policy allkeys-lru (docs/remote-tier.md)");
  });
}

void RemoteEvents::BadValue(bool missing_parts) {
  if (missing_parts) {
    log_.Emit(kMissingParts, LogLevel::kWarning, [] {
      return std::string(
          "remote: a value in redis is missing parts (evicted by the server's maxmemory-policy, "
          "or its writer stopped mid-write): it is a miss and its other parts are deleted");
    });
    return;
  }
  log_.Emit(kBadValue, LogLevel::kWarning, [] {
    return std::string(
        "remote: a value in redis failed verification (damaged, written for another layout, or "
        "poisoned by another writer): it is a miss and is deleted");
  });
}

void RemoteEvents::MacFailure(const std::string& key_hex, std::string_view why) {
  log_.Emit(kMacFailure, LogLevel::kWarning, [&] {
    return "remote: block " + key_hex.substr(0, 16) + "... in redis has " + std::string(why) +
           ": not served (a miss, recomputed) and deleted; a writer without this host's "
           "remote_mac_keys, or a poisoning attempt (docs/remote-tier.md, Security)";
  });
}

}  // namespace kvtier::remote

namespace kvtier::remote {

void RemoteEvents::SlotMapChanged(const std::string& from, uint32_t moved) {
  log_.Emit(kSlotMap, LogLevel::kInfo, [&] {
    return "remote: the cluster's slot map was reloaded from " + from + ": " +
           std::to_string(moved) + " slots have a new master (a failover or resharding)";
  });
}

}  // namespace kvtier::remote
