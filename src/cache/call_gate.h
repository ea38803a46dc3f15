// CallGate: lets calls into an object run concurrently until the object
// closes, then refuses new ones and lets Close wait for those in progress.
//
// Enter() is two atomic operations on the fast path (no lock), so the
// hottest calls (TieredCache::Match) pay almost nothing for it.
//
// Thread safety: all methods may be called from any thread.
#ifndef KVTIER_CACHE_CALL_GATE_H_
#define KVTIER_CACHE_CALL_GATE_H_

#include <atomic>
#include <cstdint>

#include "core/mutex.h"

namespace kvtier::cache_internal {

class CallGate {
 public:
  // True if the call may proceed; then Exit() must follow.
  bool Enter() {
    active_.fetch_add(1);
    if (closing_.load()) {
      Exit();
      return false;
    }
    return true;
  }
  void Exit() {
    if (active_.fetch_sub(1) == 1 && closing_.load()) {
      MutexLock lock(&mu_);
      idle_cv_.SignalAll();
    }
  }
  // Refuses new calls and waits until every call that entered has exited.
  // Returns false if the gate was already closing (another Close ran).
  bool CloseAndWait() {
    const bool first = !closing_.exchange(true);
    MutexLock lock(&mu_);
    while (active_.load() != 0) idle_cv_.Wait(&lock);
    return first;
  }
  bool closed() const { return closing_.load(); }

 private:
  // Sequentially consistent on purpose: Enter's increment-then-check and
  // Close's set-then-check must not both miss each other.
  std::atomic<uint64_t> active_{0};
  std::atomic<bool> closing_{false};
  Mutex mu_;  // only for the wait in CloseAndWait
  CondVar idle_cv_;
};

// Enters a gate for a scope.
class GateScope {
 public:
  explicit GateScope(CallGate& gate) : gate_(gate), entered_(gate.Enter()) {}
  ~GateScope() {
    if (entered_) gate_.Exit();
  }
  GateScope(const GateScope&) = delete;
  GateScope& operator=(const GateScope&) = delete;
  bool entered() const { return entered_; }

 private:
  CallGate& gate_;
  const bool entered_;
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_CALL_GATE_H_
