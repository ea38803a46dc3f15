// PagedPool: construction, appends, Advance/Rollback/Remove, views, stats
// and slot bookkeeping. Allocation, loads, stores and eviction are in
// paged_pool_tiers.cc.
#include "pool/paged_pool.h"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <string>

#include "kvtier/env.h"

namespace kvtier::pool_internal {

PagedPool::PagedPool(PoolOptions options, PoolGeometry geo, KeyChain chain)
    : PoolBase(std::move(geo)),
      options_(std::move(options)),
      chain_(std::move(chain)),
      signature_(options_.layout.Signature()),
      env_(options_.env != nullptr ? options_.env : Env::Default()),
      arena_memory_(options_.memory != nullptr ? options_.memory : NewHostSlotMemory()),
      packed_bin_(std::make_shared<PackedBufferBin>(geo_.tensor_count())),
      arena_(arena_memory_, geo_.block_bytes(), options_.total_blocks, options_.chunk_blocks),
      alloc_(options_.total_blocks),
      slots_(options_.total_blocks) {
  stats_.mode = PoolMode::kPaged;
}

PagedPool::~PagedPool() {
  // The store calls back into this pool until every block of every load
  // has arrived.
  MutexLock lock(&mu_);
  while (loads_in_flight_ != 0) loaded_cv_.Wait(&lock);
}

Status PagedPool::PrefaultSlots() {
  MutexLock lock(&mu_);
  return arena_.AllocateAll();
}

// ---------------------------------------------------------------------------
// Slot bookkeeping

Result<uint32_t> PagedPool::AllocateSlotLocked(uint64_t protect) {
  while (true) {
    std::optional<BlockAllocator::Allocation> a = alloc_.Allocate();
    if (a.has_value()) {
      if (a->was_cached) ForgetBlockLocked(a->slot);
      Status s = arena_.Ensure(a->slot);
      if (!s.ok()) {
        (void)alloc_.Free(a->slot);
        return s;
      }
      slots_[a->slot] = SlotInfo{};
      return a->slot;
    }
    if (!EvictOneLocked(protect)) {
      return Status::ResourceExhausted("out of blocks: all " +
                                       std::to_string(options_.total_blocks) +
                                       " slots are held and no inactive sequence can be evicted");
    }
  }
}

void PagedPool::ReleaseSlotLocked(uint32_t slot, Release mode) {
  Result<uint32_t> left = alloc_.Free(slot);
  assert(left.ok() && "refcount would go negative");
  if (!left.ok() || *left > 0) return;
  const SlotInfo& si = slots_[slot];
  if (!si.indexed || mode == Release::kDropEntry || !options_.retain_freed_blocks) {
    ForgetBlockLocked(slot);
  }
}

void PagedPool::IndexLocked(uint32_t slot, const BlockKey& key) {
  SlotInfo& si = slots_[slot];
  si.keyed = true;
  si.key = key;
  si.indexed = true;
  index_[key] = slot;
  alloc_.SetCached(slot, options_.retain_freed_blocks);
}

void PagedPool::ForgetBlockLocked(uint32_t slot) {
  SlotInfo& si = slots_[slot];
  if (si.indexed) {
    auto it = index_.find(si.key);
    if (it != index_.end() && it->second == slot) index_.erase(it);
  }
  si = SlotInfo{};
  alloc_.SetCached(slot, false);
}

Status PagedPool::MakeWritableLocked(uint64_t seq_id, Sequence& seq, size_t block) {
  const uint32_t slot = seq.slots[block];
  if (alloc_.RefCount(slot) == 1) {
    // Sole holder: the slot may change, so it no longer holds its block.
    if (slots_[slot].keyed) ForgetBlockLocked(slot);
    return Status::Ok();
  }
  KVTIER_ASSIGN_OR_RETURN(uint32_t copy, AllocateSlotLocked(seq_id));
  arena_.memory()->Copy(CopyDirection::kSlotToSlot,
                        Copy2D{arena_.Address(copy), 0, arena_.Address(slot), 0,
                               static_cast<size_t>(geo_.block_bytes()), 1});
  slots_[copy].loaded = slots_[slot].loaded;
  ReleaseSlotLocked(slot, Release::kKeepCached);
  seq.slots[block] = copy;
  ++stats_.copy_on_write_blocks;
  return Status::Ok();
}

Status PagedPool::EnsureWritableLocked(uint64_t seq_id, Sequence& seq, size_t block) {
  if (block < seq.slots.size()) return MakeWritableLocked(seq_id, seq, block);
  while (seq.slots.size() <= block) {
    KVTIER_ASSIGN_OR_RETURN(uint32_t slot, AllocateSlotLocked(seq_id));
    seq.slots.push_back(slot);
  }
  return Status::Ok();
}

void PagedPool::ReleaseSlotsLocked(Sequence& seq) {
  for (uint32_t slot : seq.slots) {
    if (slot != kFreedSlot) ReleaseSlotLocked(slot, Release::kKeepCached);
  }
  seq.slots.clear();
  seq.freed = 0;
}

Status PagedPool::CanHoldLocked(uint64_t id, const Sequence& seq, size_t length) const {
  if (length == 0 || length == seq.tokens.size()) return Status::Ok();
  // Only windows and recurrent layers make a length need less than every
  // tensor of its blocks (and make restores partial).
  if (!geo_.has_recurrent() && geo_.max_window() == 0) return Status::Ok();
  const size_t t = geo_.block_tokens();
  if (geo_.has_recurrent() && length % t != 0) {
    return Status::FailedPrecondition(
        SeqName(id) + " cannot hold " + std::to_string(length) +
        " tokens: a recurrent layer's state is kept only after each full block (every " +
        std::to_string(t) + " tokens) and after the last token");
  }
  const size_t blocks = (length + t - 1) / t;
  for (size_t b = 0; b < blocks && b < seq.slots.size(); ++b) {
    const uint32_t slot = seq.slots[b];
    if (slot != kFreedSlot && slots_[slot].loaded.empty()) continue;  // whole
    const TensorMask need = geo_.NeededTensors(b, length);
    for (size_t i = 0; i < need.size(); ++i) {
      if (!need[i]) continue;
      if (slot == kFreedSlot) {
        return Status::FailedPrecondition(SeqName(id) + " cannot hold " + std::to_string(length) +
                                          " tokens: block " + std::to_string(b) +
                                          " fell out of the sliding window and was freed");
      }
      if (!slots_[slot].loaded[i]) {
        return Status::FailedPrecondition(
            SeqName(id) + " cannot hold " + std::to_string(length) + " tokens: block " +
            std::to_string(b) + " was restored without tensor " + std::to_string(i) +
            (geo_.has_recurrent() ? " (a recurrent snapshot or a window)" : " (a window)"));
      }
    }
  }
  return Status::Ok();
}

size_t PagedPool::HoldableLengthLocked(uint64_t id, const Sequence& seq, size_t length) const {
  if (CanHoldLocked(id, seq, length).ok()) return length;
  const size_t t = geo_.block_tokens();
  for (size_t l = length / t * t; l > 0; l -= t) {
    if (l != length && CanHoldLocked(id, seq, l).ok()) return l;
  }
  return 0;
}

void PagedPool::FreeOutOfWindowLocked(Sequence& seq) {
  // A loading sequence's slots may still be written by its load.
  if (!geo_.all_per_token_sliding() || seq.loading) return;
  const size_t t = geo_.block_tokens(), len = seq.tokens.size(), w = geo_.max_window();
  // Blocks wholly before [len - w, len) of every sliding layer.
  const size_t out = len > w ? (len - w) / t : 0;
  for (; seq.freed < out && seq.freed < seq.slots.size(); ++seq.freed) {
    const uint32_t slot = seq.slots[seq.freed];
    if (slot == kFreedSlot) continue;
    if (options_.store_policy == StorePolicy::kOnSequenceEnd && options_.store != nullptr &&
        !slots_[slot].stored && seq.freed < seq.keys.size()) {
      QueueStoreLocked(slot, seq.freed, seq.keys, std::nullopt, Hold::kPinSlot);
    }
    ReleaseSlotLocked(slot, Release::kKeepCached);
    seq.slots[seq.freed] = kFreedSlot;
    ++stats_.window_freed_blocks;
  }
}

Status PagedPool::NotFoundLocked(uint64_t id) const {
  if (offloaded_.count(id) != 0) {
    return Status::NotFound(SeqName(id) + " was evicted; Allocate restores it");
  }
  return Status::NotFound(SeqName(id) + " not found");
}

Result<PagedPool::Sequence*> PagedPool::FindReadyLocked(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return NotFoundLocked(id);
  if (it->second.loading) {
    return Status::FailedPrecondition(SeqName(id) + " has a load in flight; call WaitLoaded");
  }
  return &it->second;
}

void PagedPool::TruncateLocked(Sequence& seq, size_t length) {
  const size_t t = geo_.block_tokens();
  const size_t keep = (length + t - 1) / t;
  while (seq.slots.size() > keep) {
    if (seq.slots.back() != kFreedSlot) ReleaseSlotLocked(seq.slots.back(), Release::kDropEntry);
    seq.slots.pop_back();
  }
  seq.freed = std::min(seq.freed, seq.slots.size());
  if (length % t != 0 && keep <= seq.slots.size() && seq.slots[keep - 1] != kFreedSlot) {
    // The last block becomes partial. If no one else holds it, it will be
    // written again: it leaves the index. Shared, it is copied on write.
    const uint32_t slot = seq.slots[keep - 1];
    if (slots_[slot].keyed && alloc_.RefCount(slot) == 1) ForgetBlockLocked(slot);
  }
  seq.tokens.resize(std::min(seq.tokens.size(), length));
  seq.keys.resize(std::min(seq.keys.size(), length / t));
  seq.written.assign(geo_.layers(), length);
  seq.snapshots.clear();
  for (RecurrentLive& r : seq.recurrent) r.pos = 0;  // pending states are discarded
  InvalidatePackedLocked(seq);
}

size_t PagedPool::ReadyTokensLocked(const Sequence& seq) const {
  if (!seq.loading || seq.load == nullptr) return seq.loading ? 0 : seq.tokens.size();
  const LoadJob& job = *seq.load;
  return std::min(seq.tokens.size(), (job.first_block + job.ready) * geo_.block_tokens());
}

void PagedPool::PublishLocked(Sequence& seq, size_t block, const BlockKey& key_in) {
  assert(seq.keys.size() == block);
  seq.keys.push_back(key_in);
  const BlockKey& key = seq.keys.back();
  uint32_t slot = seq.slots[block];
  auto it = index_.find(key);
  if (it != index_.end() && it->second != slot) {
    // The pool already holds this block: share it and free our copy.
    const uint32_t other = it->second;
    Status s = alloc_.RefCount(other) == 0 ? alloc_.Revive(other) : alloc_.AddRef(other);
    if (s.ok()) {
      ReleaseSlotLocked(slot, Release::kDropEntry);
      seq.slots[block] = other;
      return;
    }
    // A saturated refcount: keep our copy, unindexed.
    slots_[slot].keyed = true;
    slots_[slot].key = key;
  } else if (it == index_.end()) {
    IndexLocked(slot, key);
  }
  if (options_.store_policy == StorePolicy::kOnFill && options_.store != nullptr &&
      !slots_[slot].stored) {
    QueueStoreLocked(slot, block, seq.keys, std::nullopt, Hold::kPinSlot);
  }
}

void PagedPool::InvalidatePackedLocked(Sequence& seq) { seq.packed.assign(geo_.layers(), nullptr); }

// ---------------------------------------------------------------------------
// Appends

Status PagedPool::WriteAppend(uint64_t id, const AppendRequest& req) {
  Status status;
  std::vector<PendingStore> stores;
  {
    MutexLock lock(&mu_);
    KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
    KVTIER_RETURN_IF_ERROR(
        CheckAppendPosition(id, req, seq->tokens.size(), seq->written[req.layer]));
    const size_t t = geo_.block_tokens();
    const size_t end = req.pos + req.count;
    const size_t first = req.pos / t, last = (end - 1) / t;
    for (size_t b = first; b <= last && status.ok(); ++b) {
      if (b < seq->slots.size()) {
        status = MakeWritableLocked(id, *seq, b);
      } else {
        Result<uint32_t> slot = AllocateSlotLocked(id);
        status = slot.status();
        if (slot.ok()) seq->slots.push_back(*slot);
      }
    }
    if (status.ok()) {
      SlotMemory* mem = arena_.memory();
      const auto& states = geo_.layer(req.layer);
      for (size_t b = first; b <= last; ++b) {
        const size_t p0 = std::max(req.pos, b * t), p1 = std::min(end, (b + 1) * t);
        std::byte* base = arena_.Address(seq->slots[b]);
        for (uint32_t k = 0; k < states.size(); ++k) {
          const StateGeometry& g = states[k];
          std::byte* dst = base + g.offset + (p0 - b * t) * g.row_bytes;
          mem->Copy(CopyDirection::kHostToSlot,
                    AppendCopy(geo_, req, k, p0, p1 - p0, dst, t * g.row_bytes));
        }
      }
      seq->written[req.layer] = std::max(seq->written[req.layer], end);
      seq->last_access = ++clock_;
    }
    stores = TakePendingStoresLocked();
  }
  FlushStores(std::move(stores));
  return status;
}

// ---------------------------------------------------------------------------
// Recurrent layers

Status PagedPool::WriteRecurrent(uint64_t id, uint32_t layer, size_t pos,
                                 std::span<const std::span<const std::byte>> states) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
  if (pos <= seq->tokens.size()) {
    return Status::InvalidArgument(SeqName(id) + " layer " + std::to_string(layer) +
                                   ": a state after " + std::to_string(pos) +
                                   " tokens is committed (length " +
                                   std::to_string(seq->tokens.size()) + ")");
  }
  const size_t t = geo_.block_tokens();
  const auto& g = geo_.layer(layer);
  if (pos % t == 0) {
    // The block's snapshot: into its slot now, since a later state of the
    // same Advance replaces the live one.
    const size_t block = pos / t - 1;
    KVTIER_RETURN_IF_ERROR(EnsureWritableLocked(id, *seq, block));
    std::byte* base = arena_.Address(seq->slots[block]);
    for (size_t k = 0; k < g.size(); ++k) {
      arena_.memory()->Copy(CopyDirection::kHostToSlot,
                            Copy2D{base + g[k].offset, 0, states[k].data(), 0, g[k].bytes, 1});
    }
    if (seq->snapshots.size() <= block) seq->snapshots.resize(block + 1);
    seq->snapshots[block].resize(geo_.layers(), false);
    seq->snapshots[block][layer] = true;
  }
  if (seq->recurrent.size() != geo_.layers()) seq->recurrent.resize(geo_.layers());
  RecurrentLive& live = seq->recurrent[layer];
  if (live.state.size() < geo_.recurrent_bytes(layer)) {
    KVTIER_ASSIGN_OR_RETURN(live.state, BlockBuffer::Allocate(geo_.recurrent_bytes(layer)));
  }
  uint64_t at = 0;
  for (size_t k = 0; k < g.size(); ++k) {
    std::memcpy(live.state.data() + at, states[k].data(), g[k].bytes);
    at += g[k].bytes;
  }
  live.pos = pos;
  seq->written[layer] = std::max(seq->written[layer], pos);
  seq->last_access = ++clock_;
  return Status::Ok();
}

Status PagedPool::CheckRecurrentLocked(uint64_t id, const Sequence& seq, size_t new_len) const {
  if (!geo_.has_recurrent()) return Status::Ok();
  const size_t t = geo_.block_tokens(), len = seq.tokens.size();
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    if (geo_.kind(l) != LayerKind::kRecurrent) continue;
    const size_t pos = l < seq.recurrent.size() ? seq.recurrent[l].pos : 0;
    if (pos != new_len) {
      return Status::FailedPrecondition(
          SeqName(id) + " layer " + std::to_string(l) + ": Advance to " + std::to_string(new_len) +
          " tokens needs the recurrent state after them (SetRecurrentState), have " +
          (pos > len ? "one after " + std::to_string(pos) : std::string("none")));
    }
    for (size_t b = len / t; (b + 1) * t <= new_len; ++b) {
      if (b >= seq.snapshots.size() || seq.snapshots[b].size() <= l || !seq.snapshots[b][l]) {
        return Status::FailedPrecondition(
            SeqName(id) + " layer " + std::to_string(l) + ": block " + std::to_string(b) +
            " fills, but no recurrent state after its last token (" +
            std::to_string((b + 1) * t) + ") was set: SetRecurrentState at every block boundary");
      }
    }
  }
  return Status::Ok();
}

Status PagedPool::CommitRecurrentLocked(uint64_t id, Sequence& seq, size_t new_len) {
  const size_t t = geo_.block_tokens();
  if (!geo_.has_recurrent() || new_len % t == 0) return Status::Ok();
  const size_t block = new_len / t;
  KVTIER_RETURN_IF_ERROR(EnsureWritableLocked(id, seq, block));
  std::byte* base = arena_.Address(seq.slots[block]);
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    if (geo_.kind(l) != LayerKind::kRecurrent) continue;
    const auto& g = geo_.layer(l);
    uint64_t at = 0;
    for (const StateGeometry& s : g) {
      arena_.memory()->Copy(
          CopyDirection::kHostToSlot,
          Copy2D{base + s.offset, 0, seq.recurrent[l].state.data() + at, 0, s.bytes, 1});
      at += s.bytes;
    }
  }
  return Status::Ok();
}

Result<std::shared_ptr<const PackedLayerView>> PagedPool::RecurrentState(uint64_t id,
                                                                         uint32_t layer) {
  if (layer >= geo_.layers() || geo_.kind(layer) != LayerKind::kRecurrent) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " is not recurrent");
  }
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
  const size_t len = seq->tokens.size();
  const bool pending = layer < seq->recurrent.size() && seq->recurrent[layer].pos > len;
  if (!pending && len == 0) {
    return Status::FailedPrecondition(SeqName(id) + " layer " + std::to_string(layer) +
                                      " has no recurrent state yet");
  }
  std::shared_ptr<PackedLayerView> view(new PackedLayerView, [bin = packed_bin_](PackedLayerView* v) {
    for (BlockBuffer& b : v->storage) bin->Give(std::move(b));
    delete v;
  });
  view->layer = layer;
  view->length = pending ? seq->recurrent[layer].pos : len;
  const std::byte* slot =
      pending ? nullptr : arena_.Address(seq->slots[(len - 1) / geo_.block_tokens()]);
  uint64_t at = 0;
  for (const StateGeometry& g : geo_.layer(layer)) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, packed_bin_->Take(g.bytes));
    if (pending) {
      std::memcpy(buf.data(), seq->recurrent[layer].state.data() + at, g.bytes);
    } else {
      arena_.memory()->Copy(CopyDirection::kSlotToHost,
                            Copy2D{buf.data(), 0, slot + g.offset, 0, g.bytes, 1});
    }
    at += g.bytes;
    view->states.push_back(PackedTensor{g.dtype, g.shape, {buf.data(), g.bytes}});
    view->storage.push_back(std::move(buf));
  }
  return std::shared_ptr<const PackedLayerView>(std::move(view));
}

// ---------------------------------------------------------------------------
// Advance, Rollback, Remove

Status PagedPool::Advance(uint64_t id, std::span<const uint32_t> tokens) {
  const size_t t = geo_.block_tokens();
  // What hashing the filled blocks needs, read under the lock...
  size_t len = 0;
  BlockKey parent;
  std::vector<uint32_t> pending;  // the partial block's tokens, then `tokens`
  {
    MutexLock lock(&mu_);
    KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
    if (tokens.empty()) return Status::Ok();
    KVTIER_RETURN_IF_ERROR(CheckRecurrentLocked(id, *seq, seq->tokens.size() + tokens.size()));
    KVTIER_RETURN_IF_ERROR(CheckWritten(id, seq->written, seq->tokens.size() + tokens.size()));
    len = seq->tokens.size();
    parent = seq->keys.empty() ? chain_.ns() : seq->keys.back();
    pending.assign(seq->tokens.begin() + static_cast<ptrdiff_t>(len / t * t), seq->tokens.end());
  }
  // ...and the SHA-256 work done without it.
  pending.insert(pending.end(), tokens.begin(), tokens.end());
  std::vector<BlockKey> filled;
  for (size_t b = 0; (b + 1) * t <= pending.size(); ++b) {
    parent = chain_.Next(parent, std::span<const uint32_t>(pending).subspan(b * t, t));
    filled.push_back(parent);
  }

  std::vector<PendingStore> stores;
  {
    MutexLock lock(&mu_);
    // Calls for one sequence are serialized by the caller, so only an
    // eviction (another thread needing slots) can have changed it.
    KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
    if (seq->tokens.size() != len || seq->keys.size() != len / t) {
      return Status::FailedPrecondition(SeqName(id) + " changed during Advance");
    }
    KVTIER_RETURN_IF_ERROR(CheckRecurrentLocked(id, *seq, len + tokens.size()));
    KVTIER_RETURN_IF_ERROR(CheckWritten(id, seq->written, len + tokens.size()));
    KVTIER_RETURN_IF_ERROR(CommitRecurrentLocked(id, *seq, len + tokens.size()));
    seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
    for (size_t b = len / t, k = 0; k < filled.size(); ++b, ++k) PublishLocked(*seq, b, filled[k]);
    seq->snapshots.clear();  // every block they were for is committed
    FreeOutOfWindowLocked(*seq);
    InvalidatePackedLocked(*seq);
    seq->last_access = ++clock_;
    stores = TakePendingStoresLocked();
  }
  FlushStores(std::move(stores));
  return Status::Ok();
}

Status PagedPool::Rollback(uint64_t id, size_t length) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
  if (length > seq->tokens.size()) {
    return Status::InvalidArgument("cannot roll " + SeqName(id) + " back to " +
                                   std::to_string(length) + " tokens: it has " +
                                   std::to_string(seq->tokens.size()));
  }
  KVTIER_RETURN_IF_ERROR(CanHoldLocked(id, *seq, length));
  TruncateLocked(*seq, length);
  seq->last_access = ++clock_;
  return Status::Ok();
}

Status PagedPool::Remove(uint64_t id) {
  std::vector<PendingStore> stores;
  {
    MutexLock lock(&mu_);
    auto it = seqs_.find(id);
    while (it != seqs_.end() && it->second.loading) {
      loaded_cv_.Wait(&lock);
      it = seqs_.find(id);
    }
    if (it != seqs_.end()) {
      Sequence& seq = it->second;
      if (options_.store_policy == StorePolicy::kOnSequenceEnd && options_.store != nullptr) {
        for (size_t b = 0; b < seq.keys.size(); ++b) {
          if (seq.slots[b] != kFreedSlot && !slots_[seq.slots[b]].stored) {
            QueueStoreLocked(seq.slots[b], b, seq.keys, std::nullopt, Hold::kPinSlot);
          }
        }
      }
      ReleaseSlotsLocked(seq);
      seqs_.erase(it);
    } else {
      auto rit = offloaded_.find(id);
      if (rit == offloaded_.end()) return Status::NotFound(SeqName(id) + " not found");
      (void)TakeOffloadedLocked(rit);
    }
    stores = TakePendingStoresLocked();
  }
  FlushStores(std::move(stores));
  return Status::Ok();
}

// ---------------------------------------------------------------------------
// Eviction controls

void PagedPool::SetActiveSequences(std::span<const uint64_t> seqs) {
  MutexLock lock(&mu_);
  active_.clear();
  active_.insert(seqs.begin(), seqs.end());
}

Status PagedPool::SetPriority(uint64_t id, uint8_t priority) {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it != seqs_.end()) {
    it->second.priority = priority;
    return Status::Ok();
  }
  auto rit = offloaded_.find(id);
  if (rit != offloaded_.end()) {
    rit->second.priority = priority;
    return Status::Ok();
  }
  return Status::NotFound(SeqName(id) + " not found");
}

Status PagedPool::Evict(uint64_t id) {
  std::vector<PendingStore> stores;
  {
    MutexLock lock(&mu_);
    KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
    OffloadLocked(id, *seq);
    seqs_.erase(id);
    stores = TakePendingStoresLocked();
  }
  FlushStores(std::move(stores));
  return Status::Ok();
}

std::vector<uint64_t> PagedPool::DrainEvicted() {
  MutexLock lock(&mu_);
  std::vector<uint64_t> out;
  out.swap(evicted_ids_);
  return out;
}

// ---------------------------------------------------------------------------
// Views

bool PagedPool::HasSequence(uint64_t id) const {
  MutexLock lock(&mu_);
  return seqs_.count(id) != 0;
}

Result<size_t> PagedPool::Length(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return NotFoundLocked(id);
  return it->second.tokens.size();
}

Result<std::vector<uint32_t>> PagedPool::BlockTable(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return NotFoundLocked(id);
  // Also while loading: an engine may start on the blocks already in place
  // (WaitTokensLoaded).
  return it->second.slots;
}

Result<std::byte*> PagedPool::SlotAddress(uint32_t slot) const {
  MutexLock lock(&mu_);
  if (slot >= options_.total_blocks) {
    return Status::InvalidArgument("slot " + std::to_string(slot) + " out of range (" +
                                   std::to_string(options_.total_blocks) + " slots)");
  }
  if (alloc_.RefCount(slot) == 0) {
    return Status::FailedPrecondition("slot " + std::to_string(slot) + " is free");
  }
  return arena_.Address(slot);
}

SlotTensorGeometry PagedPool::TensorGeometry(uint32_t layer, uint32_t state) const {
  if (layer >= geo_.layers() || state >= geo_.layer(layer).size()) return {};
  const StateGeometry& g = geo_.layer(layer)[state];
  return SlotTensorGeometry{g.offset, g.bytes, g.dtype, g.a, g.b};
}

Result<std::shared_ptr<const PackedLayerView>> PagedPool::PackedLayer(uint64_t id, uint32_t layer) {
  if (layer >= geo_.layers()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(geo_.layers()) + " layers)");
  }
  if (geo_.kind(layer) == LayerKind::kRecurrent) {
    return Status::InvalidArgument("layer " + std::to_string(layer) +
                                   " is recurrent: its state is RecurrentState");
  }
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindReadyLocked(id));
  if (seq->packed[layer] != nullptr) return seq->packed[layer];
  const size_t len = seq->tokens.size(), t = geo_.block_tokens();
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<PackedLayerView> view,
                          NewPackedView(geo_, layer, len, packed_bin_));
  SlotMemory* mem = arena_.memory();
  const auto& states = geo_.layer(layer);
  for (size_t b = 0; b * t < len; ++b) {
    const size_t n = std::min(t, len - b * t);
    const uint32_t slot = seq->slots[b];
    const std::byte* base = slot == kFreedSlot ? nullptr : arena_.Address(slot);
    for (size_t k = 0; k < states.size(); ++k) {
      const StateGeometry& g = states[k];
      if (base == nullptr || (!slots_[slot].loaded.empty() && !slots_[slot].loaded[g.tensor])) {
        // Not held (out of the window): zeros, never another block's bytes.
        for (uint64_t h = 0; h < g.a; ++h) {
          std::memset(view->storage[k].data() + (h * len + b * t) * g.row_bytes, 0,
                      n * g.row_bytes);
        }
        continue;
      }
      mem->Copy(
          CopyDirection::kSlotToHost,
          Copy2D{view->storage[k].data() + b * t * g.row_bytes, len * g.row_bytes, base + g.offset,
                 t * g.row_bytes, n * g.row_bytes, static_cast<size_t>(g.a)});
    }
  }
  seq->packed[layer] = view;
  return std::shared_ptr<const PackedLayerView>(std::move(view));
}

uint32_t PagedPool::RefCount(uint32_t slot) const {
  MutexLock lock(&mu_);
  return alloc_.RefCount(slot);
}

size_t PagedPool::FreeCount() const {
  MutexLock lock(&mu_);
  return alloc_.FreeCount();
}

PoolStats PagedPool::GetStats() const {
  MutexLock lock(&mu_);
  PoolStats s = stats_;
  s.blocks_total = options_.total_blocks;
  s.blocks_free = alloc_.FreeCount();
  s.blocks_cached = alloc_.CachedFreeCount();
  s.bytes_used = (s.blocks_total - s.blocks_free) * geo_.block_bytes();
  s.bytes_capacity = arena_.capacity_bytes();
  s.sequences = seqs_.size();
  s.packed_layers = 0;
  for (const auto& [id, seq] : seqs_) {
    for (const auto& p : seq.packed) s.packed_layers += p != nullptr ? 1 : 0;
  }
  return s;
}

}  // namespace kvtier::pool_internal
