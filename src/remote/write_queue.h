// WriteQueue: blocks waiting for a RemoteTier's writer threads, bounded in
// bytes.
//
// Push() never waits: a block that does not fit is refused (the caller
// drops and counts it), a block larger than the bound is accepted only into
// an empty queue, and a key already queued or being written is not queued
// twice. Writers take batches (PopBatch) and report them finished (Done).
// Each block gets a sequence number so that Flush can wait for everything
// pushed before it without waiting for later pushes (WaitFor).
//
// Thread safety: all methods are safe from any thread (one mutex, mu_).
#ifndef KVTIER_REMOTE_WRITE_QUEUE_H_
#define KVTIER_REMOTE_WRITE_QUEUE_H_

#include <cstdint>
#include <deque>
#include <set>
#include <unordered_set>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"

namespace kvtier::remote {

struct QueuedBlock {
  BlockKey key;
  SharedBlock block;
  uint64_t seq = 0;
};

class WriteQueue {
 public:
  enum class PushResult : uint8_t { kQueued, kDuplicate, kFull, kClosed };

  // `env` is the clock of WaitFor()'s timeout.
  WriteQueue(uint64_t max_bytes, Env* env) : max_bytes_(max_bytes), env_(env) {}

  PushResult Push(const BlockKey& key, SharedBlock block);
  // Takes up to `max_blocks` blocks (at least one, then while their bytes
  // stay within `max_bytes`), waiting for one. Empty once the queue is
  // closed and drained, or aborted.
  std::vector<QueuedBlock> PopBatch(size_t max_blocks, uint64_t max_bytes);
  // The blocks of a PopBatch() are written or dropped.
  void Done(const std::vector<QueuedBlock>& batch);

  // The sequence number the next pushed block will get.
  uint64_t NextSeq();
  // Waits until every block with a sequence number below `seq` is done.
  // False if `timeout_micros` passed first; 0 = no timeout (and so is any
  // timeout too large to elapse).
  bool WaitFor(uint64_t seq, uint64_t timeout_micros);

  // Refuses new blocks; writers drain what is queued.
  void Close();
  // Removes every queued (not in-flight) block and returns them; PopBatch()
  // returns empty from now on.
  std::vector<QueuedBlock> Abort();

  uint64_t bytes();
  uint64_t blocks();

 private:
  bool DoneBeforeLocked(uint64_t seq) REQUIRES(mu_);

  const uint64_t max_bytes_;
  Env* const env_;
  Mutex mu_;
  CondVar work_cv_;  // a block was pushed, or closed
  CondVar done_cv_;  // a block finished
  bool closed_ GUARDED_BY(mu_) = false;
  bool aborted_ GUARDED_BY(mu_) = false;
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;  // queued and in flight
  std::deque<QueuedBlock> fifo_ GUARDED_BY(mu_);
  std::unordered_set<BlockKey, BlockKeyHash> keys_ GUARDED_BY(mu_);  // queued and in flight
  std::set<uint64_t> outstanding_ GUARDED_BY(mu_);                   // seqs not done
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_WRITE_QUEUE_H_
