#include "remote/verify_pool.h"

#include <algorithm>
#include <utility>

namespace kvtier::remote {

void VerifyGroup::Add(std::function<void()> task) {
  MutexLock lock(&mu_);
  todo_.push_back(std::move(task));
}

bool VerifyGroup::RunOne() {
  std::function<void()> task;
  {
    MutexLock lock(&mu_);
    if (todo_.empty()) return false;
    task = std::move(todo_.front());
    todo_.pop_front();
    ++running_;
  }
  task();
  MutexLock lock(&mu_);
  if (--running_ == 0) idle_cv_.SignalAll();
  return true;
}

void VerifyGroup::Wait() {
  while (RunOne()) {
  }
  MutexLock lock(&mu_);
  while (running_ > 0) idle_cv_.Wait(&lock);
}

uint32_t VerifyPool::DefaultThreads() {
  const uint32_t cores = std::thread::hardware_concurrency();
  return std::clamp<uint32_t>(cores > 1 ? cores - 1 : 1, 1, 4);
}

VerifyPool::VerifyPool(uint32_t threads, Env* env) {
  MutexLock lock(&mu_);
  for (uint32_t i = 0; i < threads; ++i) {
    threads_.push_back(env->StartThread([this] { WorkerLoop(); }));
  }
}

void VerifyPool::Post(std::shared_ptr<VerifyGroup> group) {
  MutexLock lock(&mu_);
  if (closed_ || threads_.empty()) return;
  posted_.push_back(std::move(group));
  work_cv_.Signal();
}

void VerifyPool::Close() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    closed_ = true;
    // A posted group's tasks are run by its own Wait().
    posted_.clear();
    threads.swap(threads_);
    work_cv_.SignalAll();
  }
  for (std::thread& t : threads) t.join();
}

void VerifyPool::WorkerLoop() {
  while (true) {
    std::shared_ptr<VerifyGroup> group;
    {
      MutexLock lock(&mu_);
      while (!closed_ && posted_.empty()) work_cv_.Wait(&lock);
      if (closed_) return;
      group = std::move(posted_.front());
      posted_.pop_front();
    }
    // The group may have run the task itself meanwhile: then nothing to do.
    group->RunOne();
  }
}

}  // namespace kvtier::remote
