#include "disk/parallel_runner.h"

#include <algorithm>

namespace kvtier::disk {

ParallelRunner::ParallelRunner(Env* env, uint32_t threads) {
  threads_.reserve(threads);
  for (uint32_t i = 0; i < threads; ++i) {
    threads_.push_back(env->StartThread([this] { WorkerLoop(); }));
  }
}

ParallelRunner::~ParallelRunner() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  work_cv_.SignalAll();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

bool ParallelRunner::Drain(Job* job) {
  bool finished_last = false;
  while (true) {
    size_t i = job->next.fetch_add(1, std::memory_order_relaxed);
    if (i >= job->n) break;
    (*job->fn)(i);
    if (job->done.fetch_add(1, std::memory_order_acq_rel) + 1 == job->n) finished_last = true;
  }
  return finished_last;
}

void ParallelRunner::WorkerLoop() {
  while (true) {
    std::shared_ptr<Job> job;
    {
      MutexLock lock(&mu_);
      while (!(stop_ || !jobs_.empty())) work_cv_.Wait(&lock);
      if (jobs_.empty()) return;  // stopping
      job = jobs_.front();
      // Every item is claimed once `next` passes n; later workers skip it.
      if (job->next.load(std::memory_order_relaxed) >= job->n) {
        jobs_.pop_front();
        continue;
      }
    }
    if (Drain(job.get())) {
      MutexLock lock(&mu_);
      done_cv_.SignalAll();
    }
  }
}

void ParallelRunner::Run(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (threads_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  {
    MutexLock lock(&mu_);
    jobs_.push_back(job);
  }
  work_cv_.SignalAll();
  Drain(job.get());
  MutexLock lock(&mu_);
  while (!(job->done.load(std::memory_order_acquire) == n)) done_cv_.Wait(&lock);
  auto it = std::find(jobs_.begin(), jobs_.end(), job);
  if (it != jobs_.end()) jobs_.erase(it);
}

}  // namespace kvtier::disk
