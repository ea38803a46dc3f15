// PendingWrites: the write queue of a DiskTier and the buffer that serves
// blocks still being written.
//
// Every accepted store becomes a PendingBlock that stays readable (Find)
// from the moment it is accepted until its writer calls Retire() — after the
// index row is committed, or the write failed. Blocks waiting for a writer sit
// in a FIFO. The bytes of all pending blocks (queued or being written) are
// bounded by `max_bytes`; a block is admitted when it fits or when nothing is
// pending. Flush support: each accepted block gets a sequence number and
// WaitForAllBefore() waits until every earlier block is finished.
//
// Ownership: PendingBlocks are shared between this buffer, the FIFO and the
// writer working on them.
//
// Thread safety: all methods are safe from any thread.
#ifndef KVTIER_DISK_PENDING_WRITES_H_
#define KVTIER_DISK_PENDING_WRITES_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"

namespace kvtier::disk {

struct PendingBlock {
  BlockKey key;
  SharedBlock block;
  uint64_t seq = 0;
  bool cancelled = false;  // guarded by PendingWrites::mu_
  bool queued = false;     // in the FIFO; guarded by PendingWrites::mu_
};

class PendingWrites {
 public:
  enum class AddOutcome {
    kQueued,     // in the FIFO for a background writer
    kDuplicate,  // the key is already pending
    kFull,       // no room within the wait
    kClosed,     // Close() was called
  };

  explicit PendingWrites(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Queues `block` for the writers, waiting up to `wait_micros` for room.
  AddOutcome Enqueue(const BlockKey& key, SharedBlock block, uint64_t wait_micros);
  // Registers `block` as pending without queueing it (an inline write by the
  // caller) regardless of the byte bound. nullptr if the key is already
  // pending or the buffer is closed (`*closed` tells which).
  std::shared_ptr<PendingBlock> AddUnqueued(const BlockKey& key, SharedBlock block, bool* closed);

  // The next queued blocks, waiting for one: the first, then more in FIFO
  // order while they add up to at most `max_bytes` and `max_blocks`. Empty
  // once closed and drained.
  std::vector<std::shared_ptr<PendingBlock>> NextBatchForWriter(uint64_t max_bytes,
                                                                size_t max_blocks);
  // Finishing a written block takes two calls, so that a writer can clean up
  // after a cancellation before Flush() waiters are released:
  // Retire() stops `p` being readable (unless a newer block took its key)
  // and returns true if `p` was cancelled while in flight and no newer
  // pending block has its key: the writer should remove what it wrote.
  bool Retire(const std::shared_ptr<PendingBlock>& p);
  // Release() frees `p`'s bytes and counts it as finished.
  void Release(const std::shared_ptr<PendingBlock>& p);
  bool IsCancelled(const PendingBlock& p);

  // The pending block for `key`, if any.
  SharedBlock Find(const BlockKey& key);

  // Cancels the pending block of `key`: a queued one is dropped at once, one
  // being written is finished by its writer, which then removes its file.
  // True if there was one.
  bool Cancel(const BlockKey& key);
  // Cancel(key), and if its block was being written, waits until its writer
  // has finished it (Release(): its file and row removed), so that nothing
  // of it is readable when this returns.
  bool CancelAndWait(const BlockKey& key);
  // Cancels every pending block; returns how many.
  uint64_t CancelAll();

  // The sequence number the next accepted block will get.
  uint64_t NextSeq();
  // Waits until every block accepted with a sequence number below `seq` is
  // finished or cancelled.
  void WaitForAllBefore(uint64_t seq);

  // Refuses new blocks; writers drain the FIFO, then NextBatchForWriter()
  // returns nothing.
  void Close();

  uint64_t bytes();
  uint64_t blocks();
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  std::shared_ptr<PendingBlock> MakeLocked(const BlockKey& key, SharedBlock block) REQUIRES(mu_);
  // Cancel's work: the cancelled block (null if none), still in flight
  // unless it was queued.
  std::shared_ptr<PendingBlock> CancelLocked(const BlockKey& key) REQUIRES(mu_);
  void ReleaseLocked(const PendingBlock& p) REQUIRES(mu_);

  const uint64_t max_bytes_;
  Mutex mu_;
  CondVar work_cv_;   // a block was queued, or closed
  CondVar space_cv_;  // bytes were released
  CondVar done_cv_;   // a block finished
  bool closed_ GUARDED_BY(mu_) = false;
  uint64_t next_seq_ GUARDED_BY(mu_) = 0;
  uint64_t bytes_ GUARDED_BY(mu_) = 0;
  std::unordered_map<BlockKey, std::shared_ptr<PendingBlock>, BlockKeyHash> by_key_ GUARDED_BY(mu_);
  std::deque<std::shared_ptr<PendingBlock>> fifo_ GUARDED_BY(mu_);
  std::set<uint64_t> outstanding_ GUARDED_BY(mu_);  // seqs not finished
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_PENDING_WRITES_H_
