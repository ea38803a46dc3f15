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
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return false;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

void TaskPool::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    std::deque<Task> cancelled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
      cancelled.swap(queue_);
    }
    cv_.notify_all();
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
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task.run();
  }
}

}  // namespace kvtier::cache_internal
