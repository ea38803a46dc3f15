#include "pool/dense_pool.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace kvtier::pool_internal {

namespace {

std::string SeqName(uint64_t id) { return "sequence " + std::to_string(id); }

size_t CommonPrefix(std::span<const uint32_t> a, std::span<const uint32_t> b) {
  size_t n = std::min(a.size(), b.size());
  return static_cast<size_t>(std::mismatch(a.begin(), a.begin() + n, b.begin()).first - a.begin());
}

}  // namespace

uint64_t DensePool::Storage::Bytes(const PoolGeometry& geo) const {
  uint64_t total = 0;
  for (uint32_t l = 0; l < geo.layers(); ++l) {
    for (const StateGeometry& g : geo.layer(l)) total += g.a * capacity * g.row_bytes;
  }
  return total;
}

DensePool::DensePool(PoolOptions options, PoolGeometry geo)
    : options_(std::move(options)),
      geo_(std::move(geo)),
      packed_bin_(std::make_shared<PackedBufferBin>(geo_.tensor_count())) {}

Result<DensePool::Storage> DensePool::NewStorage(size_t capacity) const {
  Storage s;
  s.capacity = capacity;
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    std::vector<BlockBuffer> states;
    for (const StateGeometry& g : geo_.layer(l)) {
      KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, BlockBuffer::Allocate(g.a * capacity * g.row_bytes));
      states.push_back(std::move(buf));
    }
    s.tensors.push_back(std::move(states));
  }
  return s;
}

Status DensePool::GrowLocked(Storage& s, size_t tokens) {
  if (tokens <= s.capacity) return Status::Ok();
  if (tokens > options_.dense_max_tokens) {
    return Status::ResourceExhausted("sequence needs " + std::to_string(tokens) +
                                     " tokens, more than dense_max_tokens " +
                                     std::to_string(options_.dense_max_tokens));
  }
  const size_t cap = std::min<size_t>(std::bit_ceil(tokens), options_.dense_max_tokens);
  KVTIER_ASSIGN_OR_RETURN(Storage grown, NewStorage(cap));
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    const auto& states = geo_.layer(l);
    for (size_t k = 0; k < states.size(); ++k) {
      const StateGeometry& g = states[k];
      for (uint64_t h = 0; h < g.a; ++h) {
        std::memcpy(grown.tensors[l][k].data() + h * cap * g.row_bytes,
                    s.tensors[l][k].data() + h * s.capacity * g.row_bytes,
                    s.capacity * g.row_bytes);
      }
    }
  }
  s = std::move(grown);
  return Status::Ok();
}

Result<DensePool::Sequence*> DensePool::FindLocked(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  return &it->second;
}

void DensePool::TruncateLocked(Sequence& seq, size_t length) {
  seq.tokens.resize(std::min(seq.tokens.size(), length));
  seq.written.assign(geo_.layers(), length);
  seq.packed.assign(geo_.layers(), nullptr);
}

Result<size_t> DensePool::Allocate(uint64_t seq, std::span<const uint32_t> tokens) {
  KVTIER_ASSIGN_OR_RETURN(AllocateInfo info, AllocateAsync(seq, tokens));
  return info.matched_tokens;
}

Result<AllocateInfo> DensePool::AllocateAsync(uint64_t id, std::span<const uint32_t> tokens) {
  const size_t cap = tokens.empty() ? 0 : tokens.size() - 1;
  AllocateInfo info;
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it != seqs_.end()) {
    const size_t target = std::min(CommonPrefix(it->second.tokens, tokens), cap);
    if (target < it->second.tokens.size()) TruncateLocked(it->second, target);
    info.matched_tokens = target;
    return info;
  }
  Sequence seq;
  if (!free_list_.empty()) {
    seq.storage = std::move(free_list_.back());
    free_list_.pop_back();
  } else {
    KVTIER_ASSIGN_OR_RETURN(seq.storage, NewStorage(options_.dense_initial_tokens));
  }
  TruncateLocked(seq, 0);
  seqs_.emplace(id, std::move(seq));
  return info;
}

Result<size_t> DensePool::WaitLoaded(uint64_t id) { return Length(id); }

// No tiers: every token of a dense sequence is always in place.
Result<size_t> DensePool::WaitTokensLoaded(uint64_t id, size_t tokens) { return Length(id); }

Status DensePool::Append(uint64_t id, AppendRequest req) {
  KVTIER_RETURN_IF_ERROR(ValidateAppend(geo_, &req));
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  const size_t len = seq->tokens.size();
  if (req.pos < len) {
    return Status::InvalidArgument("position " + std::to_string(req.pos) + " of " + SeqName(id) +
                                   " is committed (length " + std::to_string(len) + ")");
  }
  if (req.pos > seq->written[req.layer]) {
    return Status::InvalidArgument("position " + std::to_string(req.pos) + " is past layer " +
                                   std::to_string(req.layer) + "'s written end " +
                                   std::to_string(seq->written[req.layer]) + " of " + SeqName(id) +
                                   " (appends must be contiguous)");
  }
  if (req.count > SIZE_MAX - req.pos) return Status::InvalidArgument("position overflows");
  const size_t end = req.pos + req.count;
  KVTIER_RETURN_IF_ERROR(GrowLocked(seq->storage, end));
  const auto& states = geo_.layer(req.layer);
  for (uint32_t k = 0; k < states.size(); ++k) {
    const StateGeometry& g = states[k];
    std::byte* dst = seq->storage.tensors[req.layer][k].data() + req.pos * g.row_bytes;
    Copy2D c =
        AppendCopy(geo_, req, k, req.pos, req.count, dst, seq->storage.capacity * g.row_bytes);
    for (size_t r = 0; r < c.rows; ++r) {
      std::memcpy(c.dst + r * c.dst_pitch, c.src + r * c.src_pitch, c.width);
    }
  }
  seq->written[req.layer] = std::max(seq->written[req.layer], end);
  return Status::Ok();
}

Status DensePool::AppendToken(uint64_t seq, uint32_t layer, size_t pos,
                              std::span<const std::span<const std::byte>> states) {
  return Append(seq, AppendRequest{AppendKind::kToken, layer, 0, pos, 1, states});
}

Status DensePool::AppendHeadRange(uint64_t seq, uint32_t layer, uint32_t head, size_t pos,
                                  std::span<const std::span<const std::byte>> states) {
  return Append(seq, AppendRequest{AppendKind::kHeadRange, layer, head, pos, 0, states});
}

Status DensePool::AppendLayer(uint64_t seq, uint32_t layer, size_t pos, size_t count,
                              std::span<const std::span<const std::byte>> states) {
  return Append(seq, AppendRequest{AppendKind::kLayer, layer, 0, pos, count, states});
}

Status DensePool::Advance(uint64_t id, std::span<const uint32_t> tokens) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  const size_t new_len = seq->tokens.size() + tokens.size();
  for (uint32_t l = 0; l < geo_.layers(); ++l) {
    if (seq->written[l] < new_len) {
      return Status::FailedPrecondition(
          "cannot advance " + SeqName(id) + " to " + std::to_string(new_len) + " tokens: layer " +
          std::to_string(l) + " has K/V for " + std::to_string(seq->written[l]));
    }
  }
  if (tokens.empty()) return Status::Ok();
  seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
  seq->packed.assign(geo_.layers(), nullptr);
  return Status::Ok();
}

Status DensePool::Rollback(uint64_t id, size_t length) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  if (length > seq->tokens.size()) {
    return Status::InvalidArgument("cannot roll " + SeqName(id) + " back to " +
                                   std::to_string(length) + " tokens: it has " +
                                   std::to_string(seq->tokens.size()));
  }
  TruncateLocked(*seq, length);
  return Status::Ok();
}

Status DensePool::Remove(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  if (free_list_.size() < options_.dense_free_list_cap) {
    free_list_.push_back(std::move(it->second.storage));
  }
  seqs_.erase(it);
  return Status::Ok();
}

void DensePool::SetActiveSequences(std::span<const uint64_t> seqs) {
  MutexLock lock(&mu_);
  active_.clear();
  active_.insert(seqs.begin(), seqs.end());
}

Status DensePool::SetPriority(uint64_t id, uint8_t priority) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  seq->priority = priority;
  return Status::Ok();
}

Status DensePool::Evict(uint64_t seq) {
  return Status::FailedPrecondition("dense mode does not evict");
}

bool DensePool::HasSequence(uint64_t id) const {
  MutexLock lock(&mu_);
  return seqs_.count(id) != 0;
}

Result<size_t> DensePool::Length(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  return it->second.tokens.size();
}

Result<std::vector<uint32_t>> DensePool::BlockTable(uint64_t seq) const {
  return Status::FailedPrecondition("dense mode has no block table");
}

Result<std::byte*> DensePool::SlotAddress(uint32_t slot) const {
  return Status::FailedPrecondition("dense mode has no slots");
}

SlotTensorGeometry DensePool::TensorGeometry(uint32_t layer, uint32_t state) const {
  if (layer >= geo_.layers() || state >= geo_.layer(layer).size()) return {};
  const StateGeometry& g = geo_.layer(layer)[state];
  return SlotTensorGeometry{g.offset, g.bytes, g.dtype, g.a, g.b};
}

Result<std::shared_ptr<const PackedLayerView>> DensePool::PackedLayer(uint64_t id, uint32_t layer) {
  if (layer >= geo_.layers()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(geo_.layers()) + " layers)");
  }
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  if (seq->packed[layer] != nullptr) return seq->packed[layer];
  const size_t len = seq->tokens.size();
  KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<PackedLayerView> view,
                          NewPackedView(geo_, layer, len, packed_bin_));
  const auto& states = geo_.layer(layer);
  for (size_t k = 0; k < states.size(); ++k) {
    const StateGeometry& g = states[k];
    for (uint64_t h = 0; h < g.a; ++h) {
      std::memcpy(view->storage[k].data() + h * len * g.row_bytes,
                  seq->storage.tensors[layer][k].data() + h * seq->storage.capacity * g.row_bytes,
                  len * g.row_bytes);
    }
  }
  seq->packed[layer] = view;
  return std::shared_ptr<const PackedLayerView>(std::move(view));
}

PoolStats DensePool::GetStats() const {
  MutexLock lock(&mu_);
  PoolStats s;
  s.mode = PoolMode::kDense;
  for (const auto& [id, seq] : seqs_) {
    s.bytes_used += seq.storage.Bytes(geo_);
    for (const auto& p : seq.packed) s.packed_layers += p != nullptr ? 1 : 0;
  }
  s.bytes_capacity = s.bytes_used;
  for (const Storage& st : free_list_) s.bytes_capacity += st.Bytes(geo_);
  s.sequences = seqs_.size();
  return s;
}

}  // namespace kvtier::pool_internal
