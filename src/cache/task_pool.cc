#include "cache/task_pool.h"

#include <utility>

namespace kvtier::cache_internal {

TaskPool::TaskPool(Env* env, uint32_t threads) {
  threads_.reserve(threads);
  for (uint32_t i = 0; i < threads; ++i) {
    threads_.push_back(env->StartThread([this] { WorkerLoop(); }));
  }
}

TaskPool::~TaskPool() { Shutdown(); }

bool TaskPool::Submit(Task task) {
  {
    MutexLock lock(&mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.Signal();
  return true;
}

void TaskPool::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    std::deque<Task> cancelled;
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      cancelled.swap(queue_);
    }
    cv_.SignalAll();
    for (Task& t : cancelled) {
      if (t.cancel) t.cancel();
    }
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  });
}

void TaskPool::WorkerLoop() {
  for (;;) {
    Task task;
    {
      MutexLock lock(&mu_);
      while (!stopping_ && queue_.empty()) cv_.Wait(&lock);
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.run();
  }
}

}  // namespace kvtier::cache_internal
