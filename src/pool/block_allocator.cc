#include "pool/block_allocator.h"

#include <cassert>
#include <string>

namespace kvtier::pool_internal {

BlockAllocator::BlockAllocator(uint32_t total_slots)
    : ref_(total_slots, 0),
      cached_(total_slots, 0),
      plain_pos_(total_slots, kNil),
      prev_(total_slots, kNil),
      next_(total_slots, kNil) {
  // Highest id at the bottom of the stack so slot 0 is handed out first and
  // the arena grows one chunk at a time.
  plain_.reserve(total_slots);
  for (uint32_t i = total_slots; i-- > 0;) {
    plain_pos_[i] = static_cast<uint32_t>(plain_.size());
    plain_.push_back(i);
  }
}

std::optional<BlockAllocator::Allocation> BlockAllocator::Allocate() {
  Allocation a;
  if (!plain_.empty()) {
    a.slot = plain_.back();
    plain_.pop_back();
    plain_pos_[a.slot] = kNil;
  } else if (head_ != kNil) {
    a.slot = head_;
    UnlinkCached(a.slot);
    cached_[a.slot] = 0;
    a.was_cached = true;
  } else {
    return std::nullopt;
  }
  ref_[a.slot] = 1;
  return a;
}

Status BlockAllocator::AddRef(uint32_t slot) {
  if (slot >= ref_.size()) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range");
  }
  if (ref_[slot] == 0) {
    return Status::FailedPrecondition("AddRef on free slot " + std::to_string(slot));
  }
  if (ref_[slot] == UINT32_MAX) {
    return Status::ResourceExhausted("refcount of slot " + std::to_string(slot) + " saturated");
  }
  ++ref_[slot];
  return Status::Ok();
}

Result<uint32_t> BlockAllocator::Free(uint32_t slot) {
  if (slot >= ref_.size()) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range");
  }
  if (ref_[slot] == 0) {
    return Status::FailedPrecondition("Free of free slot " + std::to_string(slot));
  }
  if (--ref_[slot] == 0) {
    if (cached_[slot]) {
      LinkCachedTail(slot);
    } else {
      plain_pos_[slot] = static_cast<uint32_t>(plain_.size());
      plain_.push_back(slot);
    }
  }
  return ref_[slot];
}

uint32_t BlockAllocator::RefCount(uint32_t slot) const {
  return slot < ref_.size() ? ref_[slot] : 0;
}

void BlockAllocator::SetCached(uint32_t slot, bool cached) {
  if (slot >= ref_.size() || (cached_[slot] != 0) == cached) return;
  cached_[slot] = cached ? 1 : 0;
  if (ref_[slot] != 0) return;  // in use: only the flag changes
  if (cached) {
    RemovePlain(slot);
    LinkCachedTail(slot);
  } else {
    UnlinkCached(slot);
    plain_pos_[slot] = static_cast<uint32_t>(plain_.size());
    plain_.push_back(slot);
  }
}

bool BlockAllocator::IsCached(uint32_t slot) const {
  return slot < ref_.size() && cached_[slot] != 0;
}

Status BlockAllocator::Revive(uint32_t slot) {
  if (slot >= ref_.size() || cached_[slot] == 0 || ref_[slot] != 0) {
    return Status::FailedPrecondition("Revive of slot " + std::to_string(slot) +
                                      " that is not a free cached slot");
  }
  UnlinkCached(slot);
  ref_[slot] = 1;
  return Status::Ok();
}

void BlockAllocator::LinkCachedTail(uint32_t slot) {
  prev_[slot] = tail_;
  next_[slot] = kNil;
  if (tail_ != kNil) {
    next_[tail_] = slot;
  } else {
    head_ = slot;
  }
  tail_ = slot;
  ++cached_count_;
}

void BlockAllocator::UnlinkCached(uint32_t slot) {
  uint32_t p = prev_[slot], n = next_[slot];
  if (p != kNil) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNil) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[slot] = next_[slot] = kNil;
  --cached_count_;
}

void BlockAllocator::RemovePlain(uint32_t slot) {
  uint32_t pos = plain_pos_[slot];
  assert(pos != kNil);
  uint32_t last = plain_.back();
  plain_[pos] = last;
  plain_pos_[last] = pos;
  plain_.pop_back();
  plain_pos_[slot] = kNil;
}

}  // namespace kvtier::pool_internal
