#include "pool/dense_pool.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>

namespace kvtier::pool_internal {

uint64_t DensePoolImpl::Storage::Bytes(const PoolGeometry& geo) const {
  uint64_t total = 0;
  for (uint32_t l = 0; l < geo.layers(); ++l) {
    for (const StateGeometry& g : geo.layer(l)) total += g.a * capacity * g.row_bytes;
  }
  return total;
}

DensePoolImpl::DensePoolImpl(DensePoolOptions options, PoolGeometry geo)
    : PoolBase(std::move(geo)),
      options_(std::move(options)),
      packed_bin_(std::make_shared<PackedBufferBin>(geo_.tensor_count())) {}

Result<DensePoolImpl::Storage> DensePoolImpl::NewStorage(size_t capacity) const {
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

Status DensePoolImpl::GrowLocked(Storage& s, size_t tokens) {
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

Result<DensePoolImpl::Sequence*> DensePoolImpl::FindLocked(uint64_t id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  return &it->second;
}

void DensePoolImpl::TruncateLocked(Sequence& seq, size_t length) {
  seq.tokens.resize(std::min(seq.tokens.size(), length));
  seq.written.assign(geo_.layers(), length);
  seq.packed.assign(geo_.layers(), nullptr);
}

Result<size_t> DensePoolImpl::Allocate(uint64_t id, std::span<const uint32_t> tokens) {
  const size_t cap = tokens.empty() ? 0 : tokens.size() - 1;
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it != seqs_.end()) {
    const size_t target = std::min(CommonPrefix(it->second.tokens, tokens), cap);
    if (target < it->second.tokens.size()) TruncateLocked(it->second, target);
    return target;
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
  return size_t{0};
}

Status DensePoolImpl::WriteAppend(uint64_t id, const AppendRequest& req) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  KVTIER_RETURN_IF_ERROR(CheckAppendPosition(id, req, seq->tokens.size(), seq->written[req.layer]));
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

Status DensePoolImpl::Advance(uint64_t id, std::span<const uint32_t> tokens) {
  MutexLock lock(&mu_);
  KVTIER_ASSIGN_OR_RETURN(Sequence * seq, FindLocked(id));
  KVTIER_RETURN_IF_ERROR(CheckWritten(id, seq->written, seq->tokens.size() + tokens.size()));
  if (tokens.empty()) return Status::Ok();
  seq->tokens.insert(seq->tokens.end(), tokens.begin(), tokens.end());
  seq->packed.assign(geo_.layers(), nullptr);
  return Status::Ok();
}

Status DensePoolImpl::Rollback(uint64_t id, size_t length) {
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

Status DensePoolImpl::Remove(uint64_t id) {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  if (free_list_.size() < options_.dense_free_list_cap) {
    free_list_.push_back(std::move(it->second.storage));
  }
  seqs_.erase(it);
  return Status::Ok();
}

bool DensePoolImpl::HasSequence(uint64_t id) const {
  MutexLock lock(&mu_);
  return seqs_.count(id) != 0;
}

Result<size_t> DensePoolImpl::Length(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return Status::NotFound(SeqName(id) + " not found");
  return it->second.tokens.size();
}

Result<std::shared_ptr<const PackedLayerView>> DensePoolImpl::PackedLayer(uint64_t id,
                                                                          uint32_t layer) {
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

Status DensePoolImpl::WriteRecurrent(uint64_t, uint32_t layer, size_t,
                                     std::span<const std::span<const std::byte>>) {
  // Unreachable: Create refuses recurrent layers, so ValidateRecurrent
  // refuses every layer first.
  return Status::InvalidArgument("layer " + std::to_string(layer) +
                                 ": the dense pool has no recurrent layers");
}

Result<std::shared_ptr<const PackedLayerView>> DensePoolImpl::RecurrentState(uint64_t,
                                                                             uint32_t layer) {
  return Status::InvalidArgument("layer " + std::to_string(layer) +
                                 " is not recurrent: the dense pool has no recurrent layers");
}

PoolStats DensePoolImpl::GetStats() const {
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
