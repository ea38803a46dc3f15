#include "core/mutex.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "core/fork_safe_mutex.h"
#include "testing/forked_child.h"

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

// A thread holds a ForkSafeMutex while another forks: fork() waits for it,
// and the child finds it free (a plain Mutex would stay held there for
// ever). The child's exit code says whether it could take it.
TEST(ForkSafeMutexTest, TheChildOfAForkFindsItFree) {
  static auto* mu = new ForkSafeMutex();  // process-wide, as meant
  std::atomic<bool> held{false};
  std::thread holder([&] {
    MutexLock lock(mu);
    held = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  while (!held) std::this_thread::yield();
  const pid_t pid = fork();
  if (pid == 0) {
    const bool took = mu->TryLock();
    testing::ExitForkedChild(took ? 0 : 1);
  }
  ASSERT_GT(pid, 0);
  holder.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(FreeForOthers(mu));
}

}  // namespace
}  // namespace kvtier
