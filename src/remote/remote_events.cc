#include "remote/remote_events.h"

namespace kvtier::remote {
namespace {

std::string Seconds(uint64_t micros) {
  if (micros % 1'000'000 == 0) return std::to_string(micros / 1'000'000) + " s";
  return std::to_string(micros / 1000) + " ms";
}

}  // namespace

void RemoteEvents::BreakerChanged(const std::string& address, BreakerChange change,
                                  uint64_t open_micros) {
  switch (change) {
    case BreakerChange::kOpened:
      log_.Emit(kDown, LogLevel::kWarning, [&] {
        return "remote: redis " + address + " is down or failing (" +
               std::to_string(failure_threshold_) +
               " failed calls in a row, or no answer at open): its circuit breaker is open, "
               "loads from it are misses and copies to it are dropped; next try in " +
               Seconds(open_micros);
      });
      return;
    case BreakerChange::kReopened:
      log_.Emit(kStillDown, LogLevel::kDebug, [&] {
        return "remote: redis " + address + " is still down; next try in " + Seconds(open_micros);
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

void RemoteEvents::BadValue() {
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
