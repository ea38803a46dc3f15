#include "disk/pending_writes.h"

#include <algorithm>
#include <chrono>

namespace kvtier::disk {

std::shared_ptr<PendingBlock> PendingWrites::MakeLocked(const BlockKey& key, SharedBlock block) {
  auto p = std::make_shared<PendingBlock>();
  p->key = key;
  p->block = std::move(block);
  p->seq = next_seq_++;
  bytes_ += p->block->size();
  by_key_[key] = p;
  outstanding_.insert(p->seq);
  return p;
}

void PendingWrites::ReleaseLocked(const PendingBlock& p) {
  if (outstanding_.erase(p.seq) == 0) return;  // already released
  bytes_ -= std::min<uint64_t>(bytes_, p.block->size());
  space_cv_.SignalAll();
  done_cv_.SignalAll();
}

PendingWrites::AddOutcome PendingWrites::Enqueue(const BlockKey& key, SharedBlock block,
                                                 uint64_t wait_micros) {
  MutexLock lock(&mu_);
  const uint64_t size = block->size();
  auto admissible = [&]() REQUIRES(mu_) {
    return closed_ || by_key_.count(key) > 0 || bytes_ == 0 || bytes_ + size <= max_bytes_;
  };
  if (!admissible() && wait_micros > 0) {
    // As std::condition_variable::wait_for with a predicate: the deadline is
    // on the steady clock the wait itself uses, capped like CondVar's.
    using Clock = std::chrono::steady_clock;
    const uint64_t capped = std::min<uint64_t>(wait_micros, CondVar::kMaxWaitMicros);
    const Clock::time_point deadline = Clock::now() + std::chrono::microseconds(capped);
    while (!admissible()) {
      const Clock::time_point now = Clock::now();
      if (now >= deadline) break;
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - now);
      space_cv_.WaitFor(&lock, static_cast<uint64_t>(left.count()) + 1);
    }
  }
  if (closed_) return AddOutcome::kClosed;
  if (by_key_.count(key) > 0) return AddOutcome::kDuplicate;
  if (!(bytes_ == 0 || bytes_ + size <= max_bytes_)) return AddOutcome::kFull;
  std::shared_ptr<PendingBlock> p = MakeLocked(key, std::move(block));
  p->queued = true;
  fifo_.push_back(std::move(p));
  work_cv_.Signal();
  return AddOutcome::kQueued;
}

std::shared_ptr<PendingBlock> PendingWrites::AddUnqueued(const BlockKey& key, SharedBlock block,
                                                         bool* closed) {
  MutexLock lock(&mu_);
  *closed = closed_;
  if (closed_ || by_key_.count(key) > 0) return nullptr;
  return MakeLocked(key, std::move(block));
}

std::vector<std::shared_ptr<PendingBlock>> PendingWrites::NextBatchForWriter(uint64_t max_bytes,
                                                                             size_t max_blocks) {
  std::vector<std::shared_ptr<PendingBlock>> batch;
  MutexLock lock(&mu_);
  while (!(closed_ || !fifo_.empty())) work_cv_.Wait(&lock);
  uint64_t bytes = 0;
  while (!fifo_.empty() && batch.size() < std::max<size_t>(max_blocks, 1)) {
    const uint64_t size = fifo_.front()->block->size();
    if (!batch.empty() && bytes + size > max_bytes) break;
    bytes += size;
    batch.push_back(std::move(fifo_.front()));
    fifo_.pop_front();
    batch.back()->queued = false;
  }
  // Others may still be waiting while blocks remain (one notify per block).
  if (!fifo_.empty()) work_cv_.Signal();
  return batch;
}

bool PendingWrites::Retire(const std::shared_ptr<PendingBlock>& p) {
  MutexLock lock(&mu_);
  bool superseded = false;
  auto it = by_key_.find(p->key);
  if (it != by_key_.end()) {
    if (it->second == p) {
      by_key_.erase(it);
    } else {
      superseded = true;
    }
  }
  return p->cancelled && !superseded;
}

void PendingWrites::Release(const std::shared_ptr<PendingBlock>& p) {
  MutexLock lock(&mu_);
  ReleaseLocked(*p);
}

bool PendingWrites::IsCancelled(const PendingBlock& p) {
  MutexLock lock(&mu_);
  return p.cancelled;
}

SharedBlock PendingWrites::Find(const BlockKey& key) {
  MutexLock lock(&mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  return it->second->block;
}

std::shared_ptr<PendingBlock> PendingWrites::CancelLocked(const BlockKey& key) {
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  std::shared_ptr<PendingBlock> p = std::move(it->second);
  by_key_.erase(it);
  p->cancelled = true;
  if (p->queued) {
    auto pos = std::find(fifo_.begin(), fifo_.end(), p);
    if (pos != fifo_.end()) fifo_.erase(pos);
    p->queued = false;
    ReleaseLocked(*p);
  }
  return p;
}

bool PendingWrites::Cancel(const BlockKey& key) {
  MutexLock lock(&mu_);
  return CancelLocked(key) != nullptr;
}

bool PendingWrites::CancelAndWait(const BlockKey& key) {
  MutexLock lock(&mu_);
  std::shared_ptr<PendingBlock> p = CancelLocked(key);
  if (p == nullptr) return false;
  while (outstanding_.count(p->seq) > 0) done_cv_.Wait(&lock);
  return true;
}

uint64_t PendingWrites::CancelAll() {
  MutexLock lock(&mu_);
  uint64_t n = by_key_.size();
  for (auto& [key, p] : by_key_) p->cancelled = true;
  by_key_.clear();
  for (auto& p : fifo_) {
    p->queued = false;
    ReleaseLocked(*p);
  }
  fifo_.clear();
  return n;
}

uint64_t PendingWrites::NextSeq() {
  MutexLock lock(&mu_);
  return next_seq_;
}

void PendingWrites::WaitForAllBefore(uint64_t seq) {
  MutexLock lock(&mu_);
  while (!(outstanding_.empty() || *outstanding_.begin() >= seq)) done_cv_.Wait(&lock);
}

void PendingWrites::Close() {
  MutexLock lock(&mu_);
  closed_ = true;
  work_cv_.SignalAll();
  space_cv_.SignalAll();
}

uint64_t PendingWrites::bytes() {
  MutexLock lock(&mu_);
  return bytes_;
}

uint64_t PendingWrites::blocks() {
  MutexLock lock(&mu_);
  return outstanding_.size();
}

}  // namespace kvtier::disk
