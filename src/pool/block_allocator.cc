#include "kvtier/block_allocator.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <new>
#include <string>

namespace kvtier {

namespace {

constexpr size_t kSlotAlignment = 256;

class HostSlotMemory final : public SlotMemory {
 public:
  MemoryKind kind() const override { return MemoryKind::kHost; }

  Result<std::byte*> Allocate(size_t bytes) override {
    void* p = ::operator new(bytes, std::align_val_t(kSlotAlignment), std::nothrow);
    if (p == nullptr) {
      return Status::ResourceExhausted("cannot allocate " + std::to_string(bytes) +
                                       " bytes of slot memory");
    }
    return static_cast<std::byte*>(p);
  }

  void Deallocate(std::byte* p, size_t bytes) override {
    ::operator delete(p, std::align_val_t(kSlotAlignment));
  }

  void Copy(CopyDirection dir, const Copy2D& c) override {
    if (c.width == 0 || c.rows == 0) return;
    if (c.rows == 1 || (c.dst_pitch == c.width && c.src_pitch == c.width)) {
      std::memcpy(c.dst, c.src, c.width * c.rows);
      return;
    }
    for (size_t r = 0; r < c.rows; ++r) {
      std::memcpy(c.dst + r * c.dst_pitch, c.src + r * c.src_pitch, c.width);
    }
  }
};

}  // namespace

std::shared_ptr<SlotMemory> NewHostSlotMemory() { return std::make_shared<HostSlotMemory>(); }

// ---------------------------------------------------------------------------
// SlotArena

SlotArena::SlotArena(std::shared_ptr<SlotMemory> memory, size_t slot_bytes, uint32_t total_slots,
                     uint32_t chunk_slots)
    : memory_(std::move(memory)),
      slot_stride_((slot_bytes + kSlotAlignment - 1) / kSlotAlignment * kSlotAlignment),
      total_slots_(total_slots),
      chunk_slots_(chunk_slots) {
  assert(memory_ != nullptr && slot_bytes > 0 && total_slots > 0 && chunk_slots > 0);
  chunks_.assign((static_cast<size_t>(total_slots) + chunk_slots - 1) / chunk_slots, nullptr);
}

SlotArena::~SlotArena() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c] != nullptr) memory_->Deallocate(chunks_[c], ChunkBytes(c));
  }
}

size_t SlotArena::ChunkBytes(size_t chunk) const {
  size_t first = chunk * chunk_slots_;
  size_t slots = std::min<size_t>(chunk_slots_, total_slots_ - first);
  return slots * slot_stride_;
}

Status SlotArena::Ensure(uint32_t slot) {
  if (slot >= total_slots_) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range (" +
                                   std::to_string(total_slots_) + " slots)");
  }
  size_t c = slot / chunk_slots_;
  if (chunks_[c] != nullptr) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(chunks_[c], memory_->Allocate(ChunkBytes(c)));
  return Status::Ok();
}

bool SlotArena::IsBacked(uint32_t slot) const {
  return slot < total_slots_ && chunks_[slot / chunk_slots_] != nullptr;
}

std::byte* SlotArena::Address(uint32_t slot) const {
  assert(IsBacked(slot));
  return chunks_[slot / chunk_slots_] + static_cast<size_t>(slot % chunk_slots_) * slot_stride_;
}

uint64_t SlotArena::capacity_bytes() const {
  uint64_t total = 0;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (chunks_[c] != nullptr) total += ChunkBytes(c);
  }
  return total;
}

// ---------------------------------------------------------------------------
// BlockAllocator

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

}  // namespace kvtier
