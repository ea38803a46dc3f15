// ParallelRunner: a small fixed pool of threads that runs the items of a
// batch (LoadMany) in parallel, with the calling thread helping.
//
// Ownership: the runner owns its threads and joins them in its destructor.
// Thread safety: Run() may be called from many threads at once; each call
// returns when all of its items are done.
#ifndef KVTIER_DISK_PARALLEL_RUNNER_H_
#define KVTIER_DISK_PARALLEL_RUNNER_H_

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/env.h"

namespace kvtier::disk {

class ParallelRunner {
 public:
  // Starts `threads` threads through `env` (0 = Run() works on the caller).
  ParallelRunner(Env* env, uint32_t threads);
  ~ParallelRunner();
  ParallelRunner(const ParallelRunner&) = delete;
  ParallelRunner& operator=(const ParallelRunner&) = delete;

  // Calls fn(i) once for every i in [0, n).
  void Run(size_t n, const std::function<void(size_t)>& fn);
  // How many calls of fn one Run() makes at once at most: the threads and
  // the caller.
  size_t lanes() const { return threads_.size() + 1; }

 private:
  struct Job {
    const std::function<void(size_t)>* fn = nullptr;
    size_t n = 0;
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
  };
  // Runs items of `job` until none is left; true if this call finished the
  // last one.
  static bool Drain(Job* job);
  void WorkerLoop();

  Mutex mu_;
  CondVar work_cv_;
  CondVar done_cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::deque<std::shared_ptr<Job>> jobs_ GUARDED_BY(mu_);
  std::vector<std::thread> threads_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_PARALLEL_RUNNER_H_
