#include "remote/write_queue.h"

#include <algorithm>

namespace kvtier::remote {

WriteQueue::PushResult WriteQueue::Push(const BlockKey& key, SharedBlock block) {
  MutexLock lock(&mu_);
  if (closed_) return PushResult::kClosed;
  if (keys_.count(key) > 0) return PushResult::kDuplicate;
  const uint64_t size = block->size();
  if (bytes_ > 0 && bytes_ + size > max_bytes_) return PushResult::kFull;
  const uint64_t seq = next_seq_++;
  bytes_ += size;
  keys_.insert(key);
  outstanding_.insert(seq);
  fifo_.push_back({key, std::move(block), seq});
  work_cv_.Signal();
  return PushResult::kQueued;
}

std::vector<QueuedBlock> WriteQueue::PopBatch(size_t max_blocks, uint64_t max_bytes) {
  MutexLock lock(&mu_);
  while (!closed_ && !aborted_ && fifo_.empty()) work_cv_.Wait(&lock);
  std::vector<QueuedBlock> batch;
  if (aborted_) return batch;
  uint64_t bytes = 0;
  while (!fifo_.empty() && batch.size() < max_blocks &&
         (batch.empty() || bytes + fifo_.front().block->size() <= max_bytes)) {
    bytes += fifo_.front().block->size();
    batch.push_back(std::move(fifo_.front()));
    fifo_.pop_front();
  }
  return batch;
}

void WriteQueue::Done(const std::vector<QueuedBlock>& batch) {
  MutexLock lock(&mu_);
  for (const QueuedBlock& b : batch) {
    if (outstanding_.erase(b.seq) == 0) continue;
    bytes_ -= std::min<uint64_t>(bytes_, b.block->size());
    keys_.erase(b.key);
  }
  done_cv_.SignalAll();
}

uint64_t WriteQueue::NextSeq() {
  MutexLock lock(&mu_);
  return next_seq_;
}

bool WriteQueue::DoneBeforeLocked(uint64_t seq) {
  return outstanding_.empty() || *outstanding_.begin() >= seq;
}

bool WriteQueue::WaitFor(uint64_t seq, uint64_t timeout_micros) {
  MutexLock lock(&mu_);
  // Elapsed time against the timeout rather than a deadline: start +
  // timeout could wrap for a huge timeout.
  const uint64_t start = env_->NowMicros();
  while (!DoneBeforeLocked(seq)) {
    if (timeout_micros == 0) {
      done_cv_.Wait(&lock);
      continue;
    }
    const uint64_t waited = env_->NowMicros() - start;
    if (waited >= timeout_micros) return false;
    done_cv_.WaitFor(&lock, timeout_micros - waited);
  }
  return true;
}

void WriteQueue::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  work_cv_.SignalAll();
}

std::vector<QueuedBlock> WriteQueue::Abort() {
  MutexLock lock(&mu_);
  aborted_ = true;
  closed_ = true;
  std::vector<QueuedBlock> dropped(std::make_move_iterator(fifo_.begin()),
                                   std::make_move_iterator(fifo_.end()));
  fifo_.clear();
  for (const QueuedBlock& b : dropped) {
    outstanding_.erase(b.seq);
    bytes_ -= std::min<uint64_t>(bytes_, b.block->size());
    keys_.erase(b.key);
  }
  work_cv_.SignalAll();
  done_cv_.SignalAll();
  return dropped;
}

uint64_t WriteQueue::bytes() {
  MutexLock lock(&mu_);
  return bytes_;
}

uint64_t WriteQueue::blocks() {
  MutexLock lock(&mu_);
  return outstanding_.size();
}

}  // namespace kvtier::remote
