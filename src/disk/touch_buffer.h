// TouchBuffer: last-access times waiting to be written to the index.
//
// A hit must not cost a SQLite write, so Load() records the access here and
// the tier's maintenance thread writes the batch in one transaction every
// touch_flush_interval_ms (and on Flush/Close). Only the latest time per key
// is kept. Losing a batch (crash, busy index) only makes the LRU order less
// exact.
//
// Thread safety: all methods are safe from any thread.
#ifndef KVTIER_DISK_TOUCH_BUFFER_H_
#define KVTIER_DISK_TOUCH_BUFFER_H_

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_key.h"

namespace kvtier::disk {

class TouchBuffer {
 public:
  // Records an access at `unix_us`; returns the number of keys buffered.
  size_t Touch(const BlockKey& key, int64_t unix_us);
  void Forget(const BlockKey& key);
  void Clear();
  // Takes every buffered access.
  std::vector<std::pair<BlockKey, int64_t>> Drain();

 private:
  Mutex mu_;
  std::unordered_map<BlockKey, int64_t, BlockKeyHash> times_ GUARDED_BY(mu_);
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_TOUCH_BUFFER_H_
