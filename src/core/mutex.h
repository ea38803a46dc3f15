// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable with
// clang thread-safety annotations, so that `GUARDED_BY(mu_)` and
// `REQUIRES(mu_)` are checked by the compiler (the `tsa` preset builds
// everything with clang -Wthread-safety -Werror). The Abseil/LevelDB pattern.
//
//   class Queue {
//     Mutex mu_;
//     CondVar cv_;
//     std::deque<int> items_ GUARDED_BY(mu_);
//     void PopLocked() REQUIRES(mu_);
//   };
//   MutexLock lock(&mu_);
//   while (items_.empty()) cv_.Wait(&lock);  // the analysis sees mu_ held
//
// Thread safety: as std::mutex. Not recursive.
#ifndef KVTIER_CORE_MUTEX_H_
#define KVTIER_CORE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "core/thread_annotations.h"

namespace kvtier {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the lock (no runtime check).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds a Mutex for its scope; Unlock()/Lock() release and retake it inside
// the scope (for work that must not run under the lock).
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() {
    if (held_) mu_->Unlock();
  }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() {
    held_ = false;
    mu_->Unlock();
  }
  void Lock() ACQUIRE() {
    mu_->Lock();
    held_ = true;
  }

 private:
  friend class CondVar;
  Mutex* const mu_;
  bool held_ = true;
};

// A condition variable used with a MutexLock that holds its mutex.
class CondVar {
 public:
  CondVar() = default;
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  // Waits until notified (spurious wake-ups possible). REQUIRES: `lock` holds.
  void Wait(MutexLock* lock) { WaitImpl(lock, nullptr); }
  // Waits until notified or `micros` have passed; false on timeout. A wait
  // longer than kMaxWaitMicros (~35 years) is cut to it: std::chrono would
  // turn a huge count into a negative or wrapped duration, an instant
  // timeout.
  bool WaitFor(MutexLock* lock, uint64_t micros) {
    micros = micros < kMaxWaitMicros ? micros : kMaxWaitMicros;
    return WaitImpl(lock, &micros);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

  static constexpr uint64_t kMaxWaitMicros = uint64_t{1} << 50;

 private:
  // The analysis cannot follow a std::mutex handed to std::unique_lock and
  // back; the caller's MutexLock holds the Mutex before and after.
  bool WaitImpl(MutexLock* lock, const uint64_t* micros) NO_THREAD_SAFETY_ANALYSIS {
    // Adopt the held std::mutex for the wait, then hand it back still held.
    std::unique_lock<std::mutex> ul(lock->mu_->mu_, std::adopt_lock);
    bool notified = true;
    if (micros == nullptr) {
      cv_.wait(ul);
    } else {
      notified = cv_.wait_for(ul, std::chrono::microseconds(*micros)) == std::cv_status::no_timeout;
    }
    ul.release();
    return notified;
  }
  std::condition_variable cv_;
};

}  // namespace kvtier

#endif  // KVTIER_CORE_MUTEX_H_
