// LoadState: what a LoadFuture and the parts of the load running it share.
//
// A load runs in parts: the host part on the caller's thread, then any of
// these, each on a load thread or the caller's: deliveries of host hits
// (LoadShared with many large ones) and the lower part (disk, then remote). `parts_left` counts
// the parts not finished; the part that brings it to zero publishes the
// result (Finish), after which no part touches the state.
//
// Thread safety: `cancelled` and `parts_left` are atomic; `done`,
// `status`, `first_error` and `closed` are guarded by `mu`. Each entry of
// `out` is written by the one part that handles its key; the future reads
// the other fields only after it saw `done` (which orders them).
#ifndef KVTIER_CACHE_LOAD_STATE_H_
#define KVTIER_CACHE_LOAD_STATE_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

struct LoadState {
  // How blocks reach the caller.
  enum class Mode : uint8_t {
    kCopy,   // Load: copied into dsts
    kShare,  // LoadShared: handed out as SharedBlocks
  };

  Mode mode = Mode::kCopy;
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> dsts;  // kCopy: one per key
  LoadedBlockCallback on_block;            // kShare: may be empty
  bool uncounted = false;                  // SharedLoadOptions::uncounted
  std::vector<TensorMask> masks;           // SharedLoadOptions::tensor_masks
  std::vector<LoadedBlock> out;            // one per key
  std::vector<size_t> lower_todo;          // positions the host tier did not have
  uint64_t start_micros = 0;
  std::atomic<bool> cancelled{false};
  std::atomic<uint32_t> parts_left{0};

  mutable Mutex mu;
  mutable CondVar cv;
  bool done GUARDED_BY(mu) = false;
  Status status GUARDED_BY(mu);
  Status first_error GUARDED_BY(mu);  // the first per-key error (a small buffer)
  Status closed GUARDED_BY(mu);       // set when Close cancelled the lower part

  void Finish(Status s) {
    {
      MutexLock lock(&mu);
      status = std::move(s);
      done = true;
    }
    cv.SignalAll();
  }
  void Wait() const {
    MutexLock lock(&mu);
    while (!done) cv.Wait(&lock);
  }
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_LOAD_STATE_H_
