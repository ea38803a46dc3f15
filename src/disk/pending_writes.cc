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
  space_cv_.notify_all();
  done_cv_.notify_all();
}

PendingWrites::AddOutcome PendingWrites::Enqueue(const BlockKey& key, SharedBlock block,
                                                 uint64_t wait_micros) {
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t size = block->size();
  auto admissible = [&] {
    return closed_ || by_key_.count(key) > 0 || bytes_ == 0 || bytes_ + size <= max_bytes_;
  };
  if (!admissible() && wait_micros > 0) {
    space_cv_.wait_for(lock, std::chrono::microseconds(wait_micros), admissible);
  }
  if (closed_) return AddOutcome::kClosed;
  if (by_key_.count(key) > 0) return AddOutcome::kDuplicate;
  if (!(bytes_ == 0 || bytes_ + size <= max_bytes_)) return AddOutcome::kFull;
  std::shared_ptr<PendingBlock> p = MakeLocked(key, std::move(block));
  p->queued = true;
  fifo_.push_back(std::move(p));
  work_cv_.notify_one();
  return AddOutcome::kQueued;
}

std::shared_ptr<PendingBlock> PendingWrites::AddUnqueued(const BlockKey& key, SharedBlock block,
                                                         bool* closed) {
  std::lock_guard<std::mutex> lock(mu_);
  *closed = closed_;
  if (closed_ || by_key_.count(key) > 0) return nullptr;
  return MakeLocked(key, std::move(block));
}

std::vector<std::shared_ptr<PendingBlock>> PendingWrites::NextBatchForWriter(uint64_t max_bytes,
                                                                             size_t max_blocks) {
  std::vector<std::shared_ptr<PendingBlock>> batch;
  std::unique_lock<std::mutex> lock(mu_);
  work_cv_.wait(lock, [&] { return closed_ || !fifo_.empty(); });
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
  if (!fifo_.empty()) work_cv_.notify_one();
  return batch;
}

bool PendingWrites::Retire(const std::shared_ptr<PendingBlock>& p) {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  ReleaseLocked(*p);
}

bool PendingWrites::IsCancelled(const PendingBlock& p) {
  std::lock_guard<std::mutex> lock(mu_);
  return p.cancelled;
}

SharedBlock PendingWrites::Find(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return nullptr;
  return it->second->block;
}

bool PendingWrites::Cancel(const BlockKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_key_.find(key);
  if (it == by_key_.end()) return false;
  std::shared_ptr<PendingBlock> p = std::move(it->second);
  by_key_.erase(it);
  p->cancelled = true;
  if (p->queued) {
    auto pos = std::find(fifo_.begin(), fifo_.end(), p);
    if (pos != fifo_.end()) fifo_.erase(pos);
    p->queued = false;
    ReleaseLocked(*p);
  }
  return true;
}

uint64_t PendingWrites::CancelAll() {
  std::lock_guard<std::mutex> lock(mu_);
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
  std::lock_guard<std::mutex> lock(mu_);
  return next_seq_;
}

void PendingWrites::WaitForAllBefore(uint64_t seq) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return outstanding_.empty() || *outstanding_.begin() >= seq; });
}

void PendingWrites::Close() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
  work_cv_.notify_all();
  space_cv_.notify_all();
}

uint64_t PendingWrites::bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

uint64_t PendingWrites::blocks() {
  std::lock_guard<std::mutex> lock(mu_);
  return outstanding_.size();
}

}  // namespace kvtier::disk
