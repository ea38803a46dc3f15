#include "pool/slot_arena.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

namespace kvtier::pool_internal {

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

Status SlotArena::EnsureChunk(size_t c) {
  if (chunks_[c] != nullptr) return Status::Ok();
  KVTIER_ASSIGN_OR_RETURN(chunks_[c], memory_->Allocate(ChunkBytes(c)));
  return Status::Ok();
}

Status SlotArena::Ensure(uint32_t slot) {
  if (slot >= total_slots_) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range (" +
                                   std::to_string(total_slots_) + " slots)");
  }
  return EnsureChunk(slot / chunk_slots_);
}

Status SlotArena::AllocateAll() {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const bool fresh = chunks_[c] == nullptr;
    KVTIER_RETURN_IF_ERROR(EnsureChunk(c));
    // Writing every page now moves the page faults out of the first
    // loads and appends.
    if (fresh && memory_->kind() == MemoryKind::kHost) std::memset(chunks_[c], 0, ChunkBytes(c));
  }
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

}  // namespace kvtier::pool_internal
