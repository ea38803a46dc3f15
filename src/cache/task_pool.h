// TaskPool: a fixed set of threads (started through the Env) running
// submitted tasks in order of submission.
//
// Each task has a run function and a cancel function; Shutdown() calls the
// cancel function of every task still queued instead of running it, then
// joins the threads after the tasks in progress finish.
//
// Thread safety: Submit and Shutdown may be called from any thread. Task
// functions run without the pool's lock held.
#ifndef KVTIER_CACHE_TASK_POOL_H_
#define KVTIER_CACHE_TASK_POOL_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>  // std::once_flag
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"

namespace kvtier::cache_internal {

class TaskPool {
 public:
  struct Task {
    std::function<void()> run;
    std::function<void()> cancel;
  };

  // REQUIRES: threads > 0, env outlives the pool.
  TaskPool(Env* env, uint32_t threads);
  ~TaskPool();  // Shutdown()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Queues the task. False (and nothing queued) after Shutdown().
  bool Submit(Task task);
  // Cancels the queued tasks, waits for running ones, joins. Idempotent.
  void Shutdown();

 private:
  void WorkerLoop();

  Mutex mu_;
  CondVar cv_;
  std::deque<Task> queue_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;  // written only by the constructor and Shutdown
  std::once_flag shutdown_once_;
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_TASK_POOL_H_
