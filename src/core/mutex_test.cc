#include "core/mutex.h"

#include <gtest/gtest.h>

#include <limits>
#include <thread>

namespace kvtier {
namespace {

// Whether another thread can take `mu` right now.
bool FreeForOthers(Mutex* mu) {
  bool took = false;
  std::thread t([&] {
    if (mu->TryLock()) {
      took = true;
      mu->Unlock();
    }
  });
  t.join();
  return took;
}

TEST(MutexTest, MutexLockReleasesAndRetakesInsideItsScope) {
  Mutex mu;
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(FreeForOthers(&mu));
    lock.Unlock();
    EXPECT_TRUE(FreeForOthers(&mu));
    lock.Lock();
    EXPECT_FALSE(FreeForOthers(&mu));
  }
  EXPECT_TRUE(FreeForOthers(&mu));
  {
    MutexLock lock(&mu);
    lock.Unlock();
  }  // the destructor does not unlock twice
  EXPECT_TRUE(FreeForOthers(&mu));
}

// The waiter holds the lock from setting `waiting` until the wait releases
// it, so once the signaller sees `waiting` under the lock the waiter waits.
struct Handshake {
  Mutex mu;
  CondVar cv;        // to the waiter: `signalled`
  CondVar ready_cv;  // to the signaller: `waiting`
  bool waiting GUARDED_BY(mu) = false;
  bool signalled GUARDED_BY(mu) = false;

  void SignalOnceWaiting() {
    MutexLock lock(&mu);
    while (!waiting) ready_cv.Wait(&lock);
    signalled = true;
    cv.Signal();
  }
};

TEST(MutexTest, HugeWaitForWaitsForTheSignal) {
  // std::chrono::microseconds(UINT64_MAX) is -1 µs: without the cap every
  // such wait timed out at once.
  for (uint64_t micros :
       {std::numeric_limits<uint64_t>::max(), uint64_t{1} << 63, CondVar::kMaxWaitMicros + 1}) {
    Handshake h;
    std::thread signaller([&] { h.SignalOnceWaiting(); });
    bool every_wait_notified = true;
    {
      MutexLock lock(&h.mu);
      h.waiting = true;
      h.ready_cv.Signal();
      while (!h.signalled) every_wait_notified &= h.cv.WaitFor(&lock, micros);
    }
    signaller.join();
    EXPECT_TRUE(every_wait_notified) << micros;
  }
}

TEST(MutexTest, WaitForTimesOutWithoutASignal) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  // A spurious wake-up also returns true: retry until one times out.
  while (cv.WaitFor(&lock, 1000)) {
  }
  EXPECT_FALSE(FreeForOthers(&mu));  // held again after the wait
}

}  // namespace
}  // namespace kvtier
