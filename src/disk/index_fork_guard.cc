#include "disk/index_fork_guard.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <new>
#include <vector>

#include "core/fork_safe_mutex.h"
#include "disk/disk_index.h"

namespace kvtier::disk {
namespace {

// std::mutex rather than Mutex: the fork handlers hold it from the one to
// the other, which no scoped lock can say. Never destroyed: an index may
// outlive static destruction.
struct GuardState {
  std::mutex mu;
  std::condition_variable cv;  // a pass ended (while forking), or a fork ended
  uint64_t out = 0;
  bool forking = false;
  uint64_t forks_with_passes_out = 0;
  std::vector<DiskIndex*> indexes;
};

GuardState& State() {
  static GuardState* state = new GuardState();
  return *state;
}

// Passes this thread holds (a pass ended on another thread than the one
// that took it is counted off there, at zero at most).
thread_local uint64_t t_passes = 0;

}  // namespace

void IndexForkGuard::InstallHandlers() {
  // After ForkSafeMutex's: this before-fork handler runs first, while a
  // thread with a pass can still take those mutexes.
  ForkSafeMutex::InstallForkHandlers();
  static const int installed =
      ::pthread_atfork(&IndexForkGuard::BeforeFork, &IndexForkGuard::AfterForkInParent,
                       &IndexForkGuard::AfterForkInChild);
  (void)installed;
}

void IndexForkGuard::BeforeFork() {
  GuardState& s = State();
  std::unique_lock<std::mutex> lock(s.mu);
  s.forking = true;
  // The forking thread's own passes cannot end: not waited for. The wait
  // is counted in steps, not read from a clock.
  constexpr uint64_t kStepMicros = 100'000;
  uint64_t timeouts = 0;
  while (s.out > t_passes && timeouts < kForkWaitMicros / kStepMicros) {
    if (s.cv.wait_for(lock, std::chrono::microseconds(kStepMicros)) == std::cv_status::timeout) {
      ++timeouts;
    }
  }
  if (s.out > t_passes) ++s.forks_with_passes_out;
  for (DiskIndex* index : s.indexes) index->HoldAcrossFork();
  lock.release();  // held across fork(), released by the handlers below
}

void IndexForkGuard::AfterForkInParent() {
  GuardState& s = State();
  for (DiskIndex* index : s.indexes) index->ReleaseAfterFork(/*in_child=*/false);
  s.forking = false;
  s.mu.unlock();
  s.cv.notify_all();
}

void IndexForkGuard::AfterForkInChild() {
  GuardState& s = State();
  for (DiskIndex* index : s.indexes) index->ReleaseAfterFork(/*in_child=*/true);
  // The passes of the parent's other threads ended with them; threads that
  // waited on `cv` are not here either.
  s.out = t_passes;
  s.forking = false;
  new (&s.cv) std::condition_variable();
  s.mu.unlock();
}

IndexForkGuard::Pass& IndexForkGuard::Pass::operator=(Pass&& other) noexcept {
  if (this != &other) {
    End();
    held_ = other.held_;
    other.held_ = false;
  }
  return *this;
}

void IndexForkGuard::Pass::End() {
  if (!held_) return;
  held_ = false;
  GuardState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  --s.out;
  if (t_passes > 0) --t_passes;
  if (s.forking) s.cv.notify_all();
}

IndexForkGuard::Pass IndexForkGuard::Enter() {
  GuardState& s = State();
  std::unique_lock<std::mutex> lock(s.mu);
  if (t_passes == 0) s.cv.wait(lock, [&] { return !s.forking; });
  ++s.out;
  ++t_passes;
  Pass pass;
  pass.held_ = true;
  return pass;
}

void IndexForkGuard::Register(DiskIndex* index) {
  InstallHandlers();
  GuardState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.indexes.push_back(index);
}

void IndexForkGuard::Unregister(DiskIndex* index) {
  GuardState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  s.indexes.erase(std::remove(s.indexes.begin(), s.indexes.end(), index), s.indexes.end());
}

uint64_t IndexForkGuard::PassesOut() {
  GuardState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.out;
}

uint64_t IndexForkGuard::ForksWithPassesOut() {
  GuardState& s = State();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.forks_with_passes_out;
}

}  // namespace kvtier::disk
