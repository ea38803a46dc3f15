#include "core/fork_safe_mutex.h"

#include <pthread.h>

#include <algorithm>
#include <mutex>
#include <vector>

namespace kvtier {
namespace {

// Never destroyed: a ForkSafeMutex may outlive static destruction.
struct Registry {
  std::mutex mu;  // the list; held across fork() with every member
  std::vector<ForkSafeMutex*> members;
};

Registry& TheRegistry() {
  static Registry* registry = new Registry();
  return *registry;
}

void LockAllBeforeFork() NO_THREAD_SAFETY_ANALYSIS {
  Registry& r = TheRegistry();
  r.mu.lock();
  for (ForkSafeMutex* m : r.members) m->Lock();
}

void UnlockAllAfterFork() NO_THREAD_SAFETY_ANALYSIS {
  Registry& r = TheRegistry();
  for (auto it = r.members.rbegin(); it != r.members.rend(); ++it) (*it)->Unlock();
  r.mu.unlock();
}

}  // namespace

void ForkSafeMutex::InstallForkHandlers() {
  static const int installed =
      ::pthread_atfork(&LockAllBeforeFork, &UnlockAllAfterFork, &UnlockAllAfterFork);
  (void)installed;
}

ForkSafeMutex::ForkSafeMutex() {
  InstallForkHandlers();
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.members.push_back(this);
}

ForkSafeMutex::~ForkSafeMutex() {
  Registry& r = TheRegistry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.members.erase(std::remove(r.members.begin(), r.members.end(), this), r.members.end());
}

}  // namespace kvtier
