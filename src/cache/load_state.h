// LoadState: what a LoadFuture and the load task running it share.
//
// The task owns everything but `done`/`status` until it calls Finish();
// Finish publishes them under `mu`, after which the task touches nothing.
//
// Thread safety: `cancelled` is atomic; `done` and `status` are guarded by
// `mu`; the other fields are written by the task only, and read by the
// future only after it saw `done` (which orders them).
#ifndef KVTIER_CACHE_LOAD_STATE_H_
#define KVTIER_CACHE_LOAD_STATE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/thread_annotations.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

struct LoadState {
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> dsts;
  std::vector<LoadedBlock> out;   // one per key
  std::vector<size_t> disk_todo;  // positions the host tier did not have
  Status first_error;             // the first per-key error (a small buffer)
  uint64_t start_micros = 0;
  std::atomic<bool> cancelled{false};

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);

  void Finish(Status s) {
    {
      std::lock_guard<std::mutex> lock(mu);
      status = std::move(s);
      done = true;
    }
    cv.notify_all();
  }
  void Wait() const {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [this]() REQUIRES(mu) { return done; });
  }
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_LOAD_STATE_H_
