// PagedPool: Allocate with prefix reuse, loads from and stores to the lower
// tiers, eviction with offload, and restore.
#include <algorithm>
#include <cassert>
#include <string>
#include <tuple>

#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "pool/paged_pool.h"
#include "pool/stream_copy.h"

namespace kvtier::pool_internal {

// ---------------------------------------------------------------------------
// Allocate

Result<size_t> PagedPool::Allocate(uint64_t seq, std::span<const uint32_t> tokens) {
  KVTIER_ASSIGN_OR_RETURN(AllocateInfo info, AllocateAsync(seq, tokens));
  if (!info.load_pending) return info.matched_tokens;
  return WaitLoaded(seq);
}

Result<AllocateInfo> PagedPool::AllocateAsync(uint64_t id, std::span<const uint32_t> tokens) {
  const size_t t = geo_.block_tokens();
  const size_t cap = tokens.empty() ? 0 : tokens.size() - 1;
  // Only blocks that hold some of the first `cap` tokens are worth reusing.
  std::vector<BlockKey> keys = chain_.KeysFor(tokens);
  // A recurrent layer resumes only from a block's snapshot: only whole
  // blocks within the cap count.
  keys.resize(std::min(keys.size(), geo_.has_recurrent() ? cap / t : (cap + t - 1) / t));

  AllocateInfo info;
  std::optional<Offloaded> rec;
  size_t walked = 0;  // full blocks placed in the sequence so far
  std::vector<PendingStore> stores;
  {
    MutexLock lock(&mu_);
    auto it = seqs_.find(id);
    if (it != seqs_.end()) {
      Sequence& seq = it->second;
      if (seq.loading) {
        return Status::FailedPrecondition("sequence " + std::to_string(id) +
                                          " has a load in flight; call WaitLoaded");
      }
      const size_t target = std::min(CommonPrefix(seq.tokens, tokens), cap);
      const size_t held = HoldableLengthLocked(id, seq, target);
      if (held == target) {
        if (target < seq.tokens.size()) TruncateLocked(seq, target);
        seq.last_access = ++clock_;
        info.matched_tokens = target;
        return info;
      }
      // It no longer holds what `target` needs (a recurrent state between
      // snapshots, a freed window): start it again from the pool and the
      // tiers, which may hold more.
      ReleaseSlotsLocked(seq);
      seqs_.erase(it);
    }
    auto rit = offloaded_.find(id);
    if (rit != offloaded_.end()) {
      rec = TakeOffloadedLocked(rit);
      info.restored = true;
      ++stats_.restored_sequences;
    }
    Sequence& seq = seqs_[id];
    seq.order = next_order_++;
    seq.last_access = ++clock_;
    seq.priority = rec.has_value() ? rec->priority : 0;
    seq.loading = true;  // not evictable, not usable, until set up
    seq.written.assign(geo_.layers(), 0);
    InvalidatePackedLocked(seq);
    for (; walked < keys.size(); ++walked) {
      const BlockKey& key = keys[walked];
      auto ix = index_.find(key);
      if (ix != index_.end()) {
        const uint32_t slot = ix->second;
        Status s = alloc_.RefCount(slot) == 0 ? alloc_.Revive(slot) : alloc_.AddRef(slot);
        if (!s.ok()) break;
        seq.slots.push_back(slot);
        ++info.pool_blocks;
        continue;
      }
      if (!rec.has_value()) break;
      auto held = rec->held.find(key);
      if (held == rec->held.end()) break;
      Result<uint32_t> slot = AllocateSlotLocked(id);
      if (!slot.ok()) break;
      // The slot's own bytes, kept raw: one copy back, nothing to decode.
      RestoreCopy(arena_.Address(*slot), held->second->data(),
                  static_cast<size_t>(geo_.block_bytes()));
      IndexLocked(*slot, key);
      seq.slots.push_back(*slot);
      ++info.pool_blocks;
    }
    stores = TakePendingStoresLocked();
  }

  size_t tier_n = 0;
  if (options_.store != nullptr && walked < keys.size()) {
    tier_n = std::min(options_.store->Match(std::span<const BlockKey>(keys).subspan(walked)),
                      keys.size() - walked);
  }

  std::vector<uint32_t> tier_slots;
  std::vector<TensorMask> masks;
  std::shared_ptr<LoadJob> job;
  {
    MutexLock lock(&mu_);
    Sequence& seq = seqs_.at(id);
    // Slots for the tier blocks that hold a tensor the prefix needs; when
    // slots run out, fewer blocks (whose needs differ) are tried again.
    while (tier_n > 0) {
      const size_t len0 = std::min((walked + tier_n) * t, cap);
      masks.clear();
      for (size_t j = 0; j < tier_n; ++j) {
        TensorMask m = geo_.NeededTensors(walked + j, len0);
        if (std::all_of(m.begin(), m.end(), [](bool b) { return b; })) m.clear();
        masks.push_back(std::move(m));
      }
      size_t got = 0;
      bool out = false;
      for (size_t j = 0; j < tier_n; ++j) {
        const TensorMask& m = masks[j];
        if (!m.empty() && std::none_of(m.begin(), m.end(), [](bool b) { return b; })) {
          tier_slots.push_back(kFreedSlot);  // nothing of it is needed
          continue;
        }
        Result<uint32_t> slot = AllocateSlotLocked(id);
        if (!slot.ok()) {
          out = true;
          break;
        }
        tier_slots.push_back(*slot);
        ++got;
      }
      if (!out) break;
      for (uint32_t slot : tier_slots) {
        if (slot != kFreedSlot) ReleaseSlotLocked(slot, Release::kDropEntry);
      }
      tier_slots.clear();
      tier_n = std::min(tier_n - 1, got);
    }
    if (tier_n == 0) masks.clear();
    seq.slots.insert(seq.slots.end(), tier_slots.begin(), tier_slots.end());
    const size_t full = walked + tier_n;
    size_t cover = full * t;
    if (rec.has_value() && !rec->partial.empty() && full == rec->keys.size()) {
      // The evicted sequence's partial last block, from host memory. With a
      // recurrent layer, only whole: its state is the one after its end.
      const size_t partial_len =
          std::min({rec->tokens.size(), CommonPrefix(rec->tokens, tokens), cap});
      if (partial_len > cover && (!geo_.has_recurrent() || partial_len == rec->tokens.size())) {
        Result<uint32_t> slot = AllocateSlotLocked(id);
        if (slot.ok()) {
          RestoreCopy(arena_.Address(*slot), rec->partial.data(), rec->partial.size());
          seq.slots.push_back(*slot);
          cover = partial_len;
        }
      }
    }
    const size_t len = std::min(cover, cap);
    seq.tokens.assign(tokens.begin(), tokens.begin() + len);
    seq.keys.assign(keys.begin(), keys.begin() + std::min(keys.size(), len / t));
    seq.written.assign(geo_.layers(), len);
    info.matched_tokens = len;
    info.tier_blocks = tier_n;
    stats_.prefix_hit_blocks_pool += info.pool_blocks;
    stats_.prefix_hit_blocks_tier += tier_n;
    if (tier_n == 0) {
      seq.loading = false;
      loaded_cv_.SignalAll();
    } else {
      info.load_pending = true;
      job = std::make_shared<LoadJob>();
      job->seq = id;
      job->first_block = walked;
      job->keys.assign(keys.begin() + walked, keys.begin() + walked + tier_n);
      job->slots = std::move(tier_slots);
      job->masks = std::move(masks);
      job->arrived.assign(tier_n, 0);
      job->file_bytes.assign(tier_n, 0);
      // Chunks never move: the addresses stay valid without the lock.
      for (size_t j = 0; j < tier_n; ++j) {
        const uint32_t slot = job->slots[j];
        job->dst.push_back(slot == kFreedSlot ? nullptr : arena_.Address(slot));
        if (slot == kFreedSlot) {
          job->arrived[j] = 1;  // nothing to load: in place
          ++job->arrivals;
          continue;
        }
        job->load_index.push_back(j);
        stats_.load_tensor_bytes += geo_.MaskBytes(job->masks[j]);
      }
      while (job->ready < tier_n && job->arrived[job->ready] == 1) ++job->ready;
      seq.load = job;
      ++loads_in_flight_;
      if (job->load_index.empty()) {  // nothing needed from any of them
        FinishLoadLocked(*job);
        info.load_pending = false;
        job = nullptr;
        loaded_cv_.SignalAll();
      }
    }
    FreeOutOfWindowLocked(seq);
    auto more = TakePendingStoresLocked();
    stores.insert(stores.end(), std::make_move_iterator(more.begin()),
                  std::make_move_iterator(more.end()));
  }

  if (job != nullptr) {
    // Blocks may arrive before LoadTensors returns, on this thread. Only
    // the blocks with a needed tensor are asked for, each with its mask.
    std::vector<BlockKey> load_keys;
    std::vector<TensorMask> load_masks;
    bool any_mask = false;
    for (size_t j : job->load_index) {
      load_keys.push_back(job->keys[j]);
      load_masks.push_back(job->masks[j]);
      any_mask |= !job->masks[j].empty();
    }
    if (!any_mask) load_masks.clear();  // whole blocks
    options_.store->LoadTensors(load_keys, load_masks, [this, job](size_t i, SharedBlock file) {
      OnBlockArrived(job, i, std::move(file));
    });
  }
  FlushStores(std::move(stores));
  return info;
}

Result<size_t> PagedPool::WaitLoaded(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  while (it != seqs_.end() && it->second.loading) {
    loaded_cv_.Wait(&lock);
    it = seqs_.find(id);
  }
  if (it == seqs_.end()) return Status::NotFound("sequence " + std::to_string(id) + " not found");
  return it->second.tokens.size();
}

Result<size_t> PagedPool::WaitTokensLoaded(uint64_t id, size_t tokens) {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  ++prefix_waiters_;
  while (it != seqs_.end() && it->second.loading && ReadyTokensLocked(it->second) < tokens) {
    loaded_cv_.Wait(&lock);
    it = seqs_.find(id);
  }
  --prefix_waiters_;
  if (it == seqs_.end()) return NotFoundLocked(id);
  return ReadyTokensLocked(it->second);
}

// ---------------------------------------------------------------------------
// Loads

void PagedPool::OnBlockArrived(const std::shared_ptr<LoadJob>& job, size_t j, SharedBlock file) {
  if (j >= job->load_index.size()) return;  // a store bug: no such block
  const size_t i = job->load_index[j];
  // The slot is the loading sequence's alone: copy without the lock, on
  // whichever thread the block arrived on.
  const bool ok =
      file != nullptr && DecodeIntoSlot(*file, job->keys[i], job->masks[i], job->dst[i]);
  const uint64_t n = ok ? file->size() : 0;
  file.reset();  // unlocked: the buffer may go back to the store's pool
  MutexLock lock(&mu_);
  if (job->arrived[i] != 0) return;  // a store bug: called twice
  job->arrived[i] = ok ? 1 : 2;
  ++job->arrivals;
  job->file_bytes[i] = n;
  const size_t ready_before = job->ready;
  while (job->ready < job->keys.size() && job->arrived[job->ready] == 1) ++job->ready;
  if (job->arrivals == job->keys.size()) {
    FinishLoadLocked(*job);
    loaded_cv_.SignalAll();
  } else if (job->ready != ready_before && prefix_waiters_ > 0) {
    loaded_cv_.SignalAll();
  }
}

void PagedPool::FinishLoadLocked(LoadJob& job) {
  auto it = seqs_.find(job.seq);
  assert(it != seqs_.end());
  Sequence& seq = it->second;
  const size_t good = job.ready;
  size_t loaded = 0;
  for (size_t i = 0; i < good; ++i) {
    const uint32_t slot = job.slots[i];
    if (slot == kFreedSlot) continue;
    ++loaded;
    if (job.masks[i].empty() && index_.count(job.keys[i]) == 0) {
      IndexLocked(slot, job.keys[i]);
    } else {
      // Held elsewhere already, or only some tensors: not indexed.
      slots_[slot].keyed = true;
      slots_[slot].key = job.keys[i];
      slots_[slot].loaded = job.masks[i];
    }
    slots_[slot].stored = true;  // it came from the store
  }
  // Blocks after the first gap landed in vain: they do not count.
  uint64_t good_bytes = 0;
  for (size_t i = 0; i < good; ++i) good_bytes += job.file_bytes[i];
  stats_.loaded_blocks += loaded;
  if (good < job.keys.size()) {
    stats_.load_misses += job.keys.size() - good;
    stats_.prefix_hit_blocks_tier -= job.keys.size() - good;
    // The longest prefix of what landed that it can hold: a shorter one
    // needs other tensors (an earlier snapshot, an earlier window).
    const size_t keep_tokens =
        std::min(seq.tokens.size(), (job.first_block + good) * geo_.block_tokens());
    const size_t keep = HoldableLengthLocked(job.seq, seq, keep_tokens);
    if (keep < seq.tokens.size()) TruncateLocked(seq, keep);
  }
  stats_.loaded_bytes += good_bytes;
  seq.loading = false;
  FreeOutOfWindowLocked(seq);
  seq.load.reset();
  --loads_in_flight_;
}

bool PagedPool::DecodeIntoSlot(const BlockBuffer& file, const BlockKey& key, const TensorMask& mask,
                               std::byte* slot_addr) {
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature_;
  // The store verified the data where it entered the process (a disk or
  // network read); a second XXH3 pass here would double the cost of a
  // restore. The header is still checked: it is what says where the data
  // lies, and the verifier checks a header of a shape it has seen (a
  // restore's blocks share one) without a JSON parse, which would cost more
  // than the copy of a small block.
  opts.verify_checksum = false;
  // Bytes this pool checked before (the same shared buffer, as the host
  // tier hands it out on every restore) carry its note: for 4 KiB blocks
  // the header check took longer than the copy.
  std::span<const std::byte> data;
  if (std::optional<BlockBuffer::HeaderNote> note = file.HeaderNoteOf(decoder_id_);
      note && note->key == key) {
    data = file.span().subspan(note->data_offset, note->data_size);
  } else {
    Result<DecodedBlock> block = header_verifier_.Decode(file.span(), opts);
    if (!block.ok() || block->meta.token_count != geo_.block_tokens() ||
        block->data.size() != geo_.block_bytes()) {
      return false;
    }
    data = block->data;
    file.NoteHeader(
        {decoder_id_, key, static_cast<uint64_t>(data.data() - file.data()), data.size()});
  }
  if (mask.empty()) {
    RestoreCopy(slot_addr, data.data(), data.size());
    return true;
  }
  // Only what was asked for: the other tensors' bytes are unspecified.
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    for (const StateGeometry& g : geo_.layer(l)) {
      if (!mask[g.tensor]) continue;
      RestoreCopy(slot_addr + g.offset, data.data() + g.offset, static_cast<size_t>(g.bytes));
    }
  }
  return true;
}

void PagedPool::RestoreCopy(std::byte* slot_addr, const std::byte* src, size_t n) const {
  if (arena_memory_->kind() == MemoryKind::kHost) {
    StreamCopy(slot_addr, src, n);
  } else {
    arena_memory_->Copy(CopyDirection::kHostToSlot, Copy2D{slot_addr, 0, src, 0, n, 1});
  }
}

// ---------------------------------------------------------------------------
// Stores

Result<SharedBlock> PagedPool::EncodeBlockFile(const std::byte* data, const BlockKey& key,
                                               const BlockKey& parent) const {
  std::vector<std::span<const std::byte>> tensors;
  tensors.reserve(geo_.tensor_count());
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    for (const StateGeometry& g : geo_.layer(l)) tensors.emplace_back(data + g.offset, g.bytes);
  }
  EncodeRequest req;
  req.layout = &options_.layout;
  req.key = key;
  req.parent = parent;
  req.ns = chain_.ns();
  req.token_count = geo_.block_tokens();
  req.created_at = env_->NowUnixMicros() / 1000000;
  req.tensors = tensors;
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer file, EncodeBlock(req));
  return SharedBlock(std::make_shared<const BlockBuffer>(std::move(file)));
}

Result<SharedBlock> PagedPool::EncodePending(const PendingStore& p) const {
  if (p.raw != nullptr) return EncodeBlockFile(p.raw->data(), p.key, p.parent);
  // A pinned slot: published blocks are immutable, and the pin keeps the
  // slot from being reused, so it is read without the lock.
  const std::byte* base = p.slot_addr;
  BlockBuffer staging;
  if (arena_memory_->kind() != MemoryKind::kHost) {
    KVTIER_ASSIGN_OR_RETURN(staging, BlockBuffer::Allocate(geo_.block_bytes()));
    arena_memory_->Copy(CopyDirection::kSlotToHost,
                        Copy2D{staging.data(), 0, base, 0, staging.size(), 1});
    base = staging.data();
  }
  return EncodeBlockFile(base, p.key, p.parent);
}

Result<std::shared_ptr<const BlockBuffer>> PagedPool::CopySlotLocked(uint32_t slot) {
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer raw, BlockBuffer::Allocate(geo_.block_bytes()));
  arena_.memory()->Copy(CopyDirection::kSlotToHost,
                        Copy2D{raw.data(), 0, arena_.Address(slot), 0, raw.size(), 1});
  return std::shared_ptr<const BlockBuffer>(std::make_shared<const BlockBuffer>(std::move(raw)));
}

void PagedPool::QueueStoreLocked(uint32_t slot, size_t block, const std::vector<BlockKey>& keys,
                                 std::optional<uint64_t> offloaded_seq, Hold hold) {
  PendingStore p;
  p.key = keys[block];
  p.parent = block == 0 ? chain_.ns() : keys[block - 1];
  p.slot = slot;
  p.offloaded_seq = offloaded_seq;
  if (hold == Hold::kPinSlot && alloc_.AddRef(slot).ok()) {
    p.pinned = true;
    p.slot_addr = arena_.Address(slot);
  } else {
    // Eviction needs the slot now (or its refcount is saturated): keep a
    // copy of the bytes, which is cheaper than encoding them here.
    Result<std::shared_ptr<const BlockBuffer>> raw = CopySlotLocked(slot);
    if (!raw.ok()) {
      ++stats_.store_errors;
      return;
    }
    p.raw = *std::move(raw);
  }
  slots_[slot].stored = true;
  pending_stores_.push_back(std::move(p));
}

std::vector<PagedPool::PendingStore> PagedPool::TakePendingStoresLocked() {
  std::vector<PendingStore> out;
  out.swap(pending_stores_);
  return out;
}

void PagedPool::FlushStores(std::vector<PendingStore> stores) {
  if (stores.empty()) return;
  std::vector<Status> results;
  std::vector<uint64_t> sizes(stores.size(), 0);
  results.reserve(stores.size());
  for (size_t i = 0; i < stores.size(); ++i) {
    Result<SharedBlock> file = EncodePending(stores[i]);
    if (!file.ok()) {
      results.push_back(file.status());
      continue;
    }
    sizes[i] = (*file)->size();
    results.push_back(options_.store->Store(stores[i].key, *std::move(file)));
  }
  MutexLock lock(&mu_);
  for (size_t i = 0; i < stores.size(); ++i) {
    const PendingStore& p = stores[i];
    if (p.pinned) ReleaseSlotLocked(p.slot, Release::kKeepCached);
    auto rit = p.offloaded_seq.has_value() ? offloaded_.find(*p.offloaded_seq) : offloaded_.end();
    if (results[i].ok()) {
      ++stats_.stored_blocks;
      stats_.stored_bytes += sizes[i];
      // The store holds it now; the offload record need not.
      if (rit != offloaded_.end()) rit->second.held.erase(p.key);
    } else {
      ++stats_.store_errors;
      SlotInfo& si = slots_[p.slot];
      if (si.keyed && si.key == p.key) si.stored = false;
    }
  }
}

// ---------------------------------------------------------------------------
// Eviction and offload

bool PagedPool::EvictOneLocked(uint64_t protect) {
  if (options_.eviction == EvictionPolicy::kNone) return false;
  using Rank = std::tuple<uint64_t, uint64_t, uint64_t>;  // lower is evicted first
  std::optional<Rank> best;
  uint64_t victim = 0;
  for (const auto& [id, seq] : seqs_) {
    if (id == protect || seq.loading || seq.slots.empty() || active_.count(id) != 0) continue;
    Rank r;
    switch (options_.eviction) {
      case EvictionPolicy::kFifo:
        r = {seq.order, 0, id};
        break;
      case EvictionPolicy::kPriority:
        r = {seq.priority, seq.last_access, id};
        break;
      default:
        r = {seq.last_access, 0, id};
        break;
    }
    if (!best.has_value() || r < *best) {
      best = r;
      victim = id;
    }
  }
  if (!best.has_value()) return false;
  auto it = seqs_.find(victim);
  OffloadLocked(victim, it->second);
  seqs_.erase(it);
  return true;
}

void PagedPool::OffloadLocked(uint64_t id, Sequence& seq) {
  const size_t t = geo_.block_tokens();
  Offloaded rec;
  rec.tokens = seq.tokens;
  rec.keys = seq.keys;
  rec.priority = seq.priority;
  for (size_t b = 0; b < seq.keys.size(); ++b) {
    const uint32_t slot = seq.slots[b];
    if (slot == kFreedSlot) continue;  // out of every window: stored or dropped
    if (options_.store == nullptr) {
      // No tiers: the bytes wait here, raw, for the restore.
      Result<std::shared_ptr<const BlockBuffer>> raw = CopySlotLocked(slot);
      if (raw.ok()) rec.held.emplace(seq.keys[b], *std::move(raw));
    } else if (!slots_[slot].stored) {
      const size_t before = pending_stores_.size();
      QueueStoreLocked(slot, b, seq.keys, id, Hold::kCopySlot);
      // Held until the store succeeds, so a restore in between finds it.
      if (pending_stores_.size() > before)
        rec.held.emplace(seq.keys[b], pending_stores_.back().raw);
    }
  }
  const size_t len = seq.tokens.size();
  if (len % t != 0 && len / t < seq.slots.size()) {
    rec.partial.resize(geo_.block_bytes());
    arena_.memory()->Copy(CopyDirection::kSlotToHost,
                          Copy2D{rec.partial.data(), 0, arena_.Address(seq.slots[len / t]), 0,
                                 rec.partial.size(), 1});
  }
  for (uint32_t slot : seq.slots) stats_.evicted_blocks += slot != kFreedSlot ? 1 : 0;
  ReleaseSlotsLocked(seq);
  ++stats_.evicted_sequences;
  ++stats_.offloaded_sequences;
  stats_.offloaded_blocks += rec.keys.size() + (rec.partial.empty() ? 0 : 1);
  evicted_ids_.push_back(id);
  offloaded_[id] = std::move(rec);
}

PagedPool::Offloaded PagedPool::TakeOffloadedLocked(
    std::unordered_map<uint64_t, Offloaded>::iterator it) {
  Offloaded rec = std::move(it->second);
  offloaded_.erase(it);
  stats_.offloaded_blocks -= rec.keys.size() + (rec.partial.empty() ? 0 : 1);
  --stats_.offloaded_sequences;
  return rec;
}

}  // namespace kvtier::pool_internal
