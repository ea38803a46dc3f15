// VerifyGroup and VerifyPool: the CPU work a read can do off its socket
// thread — the HMAC-SHA256 of a signed value (ValueMac), which costs more
// per byte than reading it (DESIGN.md §7 makes it one hash over the whole
// block file, so one value's hash cannot be split, but different values'
// hashes can run at once).
//
// A read (GetOps) gives each value it finished reading to its VerifyGroup
// (Add) and posts the group to the tier's VerifyPool, whose workers pick up
// the task while the read thread reads the next value. Wait() runs the
// tasks no worker has started yet on the caller's thread, then waits for
// the ones running: a call never waits behind another call's queue, and
// with every worker busy (or the pool closed) it does the hashing itself,
// as a read without a pool would. No task runs after Wait() returns.
//
// The pool knows nothing of deadlines or breakers: its tasks are pure CPU
// work on bytes already read, so a slow or stalled server is noticed by
// the reading thread exactly as without it.
//
// Thread safety: every method from any thread. VerifyGroup: one mutex,
// mu_ (its unstarted tasks and the count running). VerifyPool: one mutex,
// mu_ (the groups posted, closed_, the threads). A group's mutex is never
// taken under the pool's.
#ifndef KVTIER_REMOTE_VERIFY_POOL_H_
#define KVTIER_REMOTE_VERIFY_POOL_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"

namespace kvtier::remote {

class VerifyGroup {
 public:
  VerifyGroup() = default;
  VerifyGroup(const VerifyGroup&) = delete;
  VerifyGroup& operator=(const VerifyGroup&) = delete;

  // Queues `task` (it must not throw).
  void Add(std::function<void()> task);
  // Runs one task nobody has started; false if there is none.
  bool RunOne();
  // Runs the unstarted tasks here, then waits for the running ones. Every
  // task's writes are visible to the caller afterwards.
  void Wait();

 private:
  Mutex mu_;
  CondVar idle_cv_;  // running_ fell to 0
  std::deque<std::function<void()>> todo_ GUARDED_BY(mu_);
  size_t running_ GUARDED_BY(mu_) = 0;
};

class VerifyPool {
 public:
  // The workers a tier starts: one core is the reading thread's, the rest
  // hash (at most 4: a hash runs at about 2 GB/s a core with SHA
  // extensions, a socket at a few GB/s), at least 1.
  static uint32_t DefaultThreads();

  // Starts `threads` workers through `env`.
  VerifyPool(uint32_t threads, Env* env);
  ~VerifyPool() { Close(); }
  VerifyPool(const VerifyPool&) = delete;
  VerifyPool& operator=(const VerifyPool&) = delete;

  // Tells a worker that `group` has a task to run. After Close() nothing
  // happens: the group's Wait() runs it.
  void Post(std::shared_ptr<VerifyGroup> group);
  // Stops the workers (once the groups posted so far are looked at) and
  // joins them. Idempotent.
  void Close();

 private:
  void WorkerLoop();

  Mutex mu_;
  CondVar work_cv_;
  std::deque<std::shared_ptr<VerifyGroup>> posted_ GUARDED_BY(mu_);
  bool closed_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_ GUARDED_BY(mu_);
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_VERIFY_POOL_H_
