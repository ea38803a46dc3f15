#include "pool/pool_geometry.h"

#include <algorithm>
#include <string>

namespace kvtier::pool_internal {

namespace {

std::string StateName(uint32_t layer, uint32_t state) {
  return "layers[" + std::to_string(layer) + "].states[" + std::to_string(state) + "]";
}

}  // namespace

Result<PoolGeometry> PoolGeometry::Create(const ModelLayout& layout) {
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext("layout"));
  PoolGeometry geo;
  geo.block_tokens_ = layout.block_tokens;
  uint64_t offset = 0;
  bool any_full = false, any_sliding = false;
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    const LayerSpec& spec_l = layout.layers[l];
    const bool recurrent = spec_l.IsRecurrent();
    std::vector<StateGeometry> states;
    uint64_t recurrent_bytes = 0;
    const auto& specs = spec_l.states;
    for (size_t k = 0; k < specs.size(); ++k) {
      const TensorSpec& spec = specs[k];
      if (!recurrent && spec.token_dim < 0) {
        return Status::InvalidArgument(
            "layout." + StateName(static_cast<uint32_t>(l), static_cast<uint32_t>(k)) +
            " has no token axis but the layer's other states do: the pool needs a layer to be "
            "per-token (every state has a token_dim) or recurrent (none has)");
      }
      StateGeometry g;
      g.offset = offset;
      g.bytes = spec.ByteSize();
      g.dtype = spec.dtype;
      g.shape = spec.shape;
      g.token_dim = recurrent ? -1 : spec.token_dim;
      g.tensor = geo.tensor_count_;
      if (recurrent) {
        g.a = 1;
        g.b = g.bytes / DTypeSize(spec.dtype);
        g.row_bytes = g.bytes;
        recurrent_bytes += g.bytes;
      } else {
        // Row-major [before..., T, after...] is [A, T, B].
        const size_t d = static_cast<size_t>(spec.token_dim);
        g.a = 1;
        g.b = 1;
        for (size_t i = 0; i < d; ++i) g.a *= spec.shape[i];
        for (size_t i = d + 1; i < spec.shape.size(); ++i) g.b *= spec.shape[i];
        g.row_bytes = g.b * DTypeSize(spec.dtype);
      }
      offset += g.bytes;
      states.push_back(std::move(g));
      ++geo.tensor_count_;
    }
    if (recurrent && spec_l.window != 0) {
      return Status::InvalidArgument("layout.layers[" + std::to_string(l) +
                                     "] is recurrent and has a window: a window applies to "
                                     "per-token (attention) states only");
    }
    LayerKind kind = recurrent ? LayerKind::kRecurrent
                               : (spec_l.window > 0 ? LayerKind::kSliding : LayerKind::kFull);
    any_full |= kind == LayerKind::kFull;
    any_sliding |= kind == LayerKind::kSliding;
    geo.has_recurrent_ |= recurrent;
    if (kind == LayerKind::kSliding) geo.max_window_ = std::max(geo.max_window_, spec_l.window);
    geo.kinds_.push_back(kind);
    geo.windows_.push_back(kind == LayerKind::kSliding ? spec_l.window : 0);
    geo.recurrent_bytes_.push_back(recurrent_bytes);
    geo.layers_.push_back(std::move(states));
  }
  geo.all_sliding_ = any_sliding && !any_full;
  geo.block_bytes_ = offset;
  return geo;
}

TensorMask PoolGeometry::NeededTensors(size_t block, size_t length) const {
  const size_t t = block_tokens_;
  TensorMask mask(tensor_count_, false);
  const size_t block_end = (block + 1) * t;
  for (uint32_t l = 0; l < layers(); ++l) {
    bool need = false;
    switch (kinds_[l]) {
      case LayerKind::kFull:
        need = true;
        break;
      case LayerKind::kSliding:
        // Overlaps [length - window, length).
        need = length <= windows_[l] || block_end > length - windows_[l];
        break;
      case LayerKind::kRecurrent:
        need = block_end == length;
        break;
    }
    if (!need) continue;
    for (const StateGeometry& g : layers_[l]) mask[g.tensor] = true;
  }
  return mask;
}

uint64_t PoolGeometry::MaskBytes(const TensorMask& mask) const {
  if (mask.empty()) return block_bytes_;
  uint64_t n = 0;
  for (const auto& states : layers_) {
    for (const StateGeometry& g : states) n += mask[g.tensor] ? g.bytes : 0;
  }
  return n;
}

Status ValidateRecurrent(const PoolGeometry& geo, uint32_t layer,
                         std::span<const std::span<const std::byte>> states) {
  if (layer >= geo.layers()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " out of range (" +
                                   std::to_string(geo.layers()) + " layers)");
  }
  if (geo.kind(layer) != LayerKind::kRecurrent) {
    return Status::InvalidArgument("layer " + std::to_string(layer) +
                                   " is not recurrent: its K/V go through the Append calls");
  }
  const auto& g = geo.layer(layer);
  if (states.size() != g.size()) {
    return Status::InvalidArgument("layer " + std::to_string(layer) + " has " +
                                   std::to_string(g.size()) + " state tensors, got " +
                                   std::to_string(states.size()) + " buffers");
  }
  for (size_t k = 0; k < g.size(); ++k) {
    if (states[k].size() != g[k].bytes) {
      return Status::InvalidArgument("layer " + std::to_string(layer) + " state " +
                                     std::to_string(k) + ": a recurrent state is " +
                                     std::to_string(g[k].bytes) + " bytes, got " +
                                     std::to_string(states[k].size()));
    }
  }
  return Status::Ok();
}

Status ValidateAppend(const PoolGeometry& geo, AppendRequest* req) {
  if (req->layer >= geo.layers()) {
    return Status::InvalidArgument("layer " + std::to_string(req->layer) + " out of range (" +
                                   std::to_string(geo.layers()) + " layers)");
  }
  if (geo.kind(req->layer) == LayerKind::kRecurrent) {
    return Status::InvalidArgument("layer " + std::to_string(req->layer) +
                                   " is recurrent: its state goes through SetRecurrentState");
  }
  const auto& states = geo.layer(req->layer);
  if (req->states.size() != states.size()) {
    return Status::InvalidArgument("layer " + std::to_string(req->layer) + " has " +
                                   std::to_string(states.size()) + " state tensors, got " +
                                   std::to_string(req->states.size()) + " buffers");
  }
  if (req->kind == AppendKind::kHeadRange && req->head >= states[0].a) {
    // Heads are checked per state below; the first state's A names the range.
    return Status::InvalidArgument("head " + std::to_string(req->head) + " out of range (" +
                                   std::to_string(states[0].a) + " heads)");
  }
  size_t count = 0;
  for (size_t k = 0; k < states.size(); ++k) {
    const StateGeometry& g = states[k];
    const size_t got = req->states[k].size();
    // Built only for an error message: appends are the hot path.
    auto what = [&] {
      return "layer " + std::to_string(req->layer) + " state " + std::to_string(k);
    };
    switch (req->kind) {
      case AppendKind::kToken:
        if (got != g.a * g.row_bytes) {
          return Status::InvalidArgument(what() + ": token row must be " +
                                         std::to_string(g.a * g.row_bytes) + " bytes, got " +
                                         std::to_string(got));
        }
        count = 1;
        break;
      case AppendKind::kHeadRange: {
        if (req->head >= g.a) {
          return Status::InvalidArgument(what() + ": head " + std::to_string(req->head) +
                                         " out of range (" + std::to_string(g.a) + " heads)");
        }
        if (got == 0 || got % g.row_bytes != 0) {
          return Status::InvalidArgument(what() + ": head range must be a non-empty multiple of " +
                                         std::to_string(g.row_bytes) + " bytes, got " +
                                         std::to_string(got));
        }
        size_t n = got / g.row_bytes;
        if (k > 0 && n != count) {
          return Status::InvalidArgument(what() + ": holds " + std::to_string(n) +
                                         " positions, state 0 holds " + std::to_string(count));
        }
        count = n;
        break;
      }
      case AppendKind::kLayer: {
        if (req->count == 0) return Status::InvalidArgument("layer append of 0 positions");
        uint64_t want = g.a * g.row_bytes;
        if (want != 0 && req->count > UINT64_MAX / want) {
          return Status::InvalidArgument(what() + ": count overflows");
        }
        want *= req->count;
        if (got != want) {
          return Status::InvalidArgument(what() + ": [A, count, B] must be " +
                                         std::to_string(want) + " bytes, got " +
                                         std::to_string(got));
        }
        count = req->count;
        break;
      }
    }
  }
  req->count = count;
  return Status::Ok();
}

Copy2D AppendCopy(const PoolGeometry& geo, const AppendRequest& req, uint32_t k, size_t p, size_t n,
                  std::byte* dst, size_t head_pitch) {
  const StateGeometry& g = geo.layer(req.layer)[k];
  const std::byte* src = req.states[k].data();
  const size_t row = g.row_bytes;
  const size_t skip = p - req.pos;  // positions of the source already written
  Copy2D c;
  switch (req.kind) {
    case AppendKind::kToken:  // src [A, B]
      c = {dst, head_pitch, src, row, row, g.a};
      break;
    case AppendKind::kHeadRange:  // src [n, B] of one head
      c = {dst + req.head * head_pitch, 0, src + skip * row, 0, n * row, 1};
      break;
    case AppendKind::kLayer:  // src [A, count, B]
      c = {dst, head_pitch, src + skip * row, req.count * row, n * row, g.a};
      break;
  }
  return c;
}

Result<BlockBuffer> PackedBufferBin::Take(size_t bytes) {
  {
    MutexLock lock(&mu_);
    size_t best = free_.size();
    for (size_t i = 0; i < free_.size(); ++i) {
      const size_t have = free_[i].size();
      if (have >= bytes && have <= std::max<size_t>(2 * bytes, 4096) &&
          (best == free_.size() || have < free_[best].size())) {
        best = i;
      }
    }
    if (best != free_.size()) {
      BlockBuffer out = std::move(free_[best]);
      free_[best] = std::move(free_.back());
      free_.pop_back();
      return out;
    }
  }
  // Room for 1/8 more (and the rest of the last page, which the allocation
  // has anyway), so a view that grows by a token per step reuses it.
  const size_t paged = (bytes + 4095) / 4096 * 4096;
  return BlockBuffer::Allocate(std::max(bytes + bytes / 8, paged));
}

void PackedBufferBin::Give(BlockBuffer buffer) {
  MutexLock lock(&mu_);
  if (free_.size() < max_buffers_) free_.push_back(std::move(buffer));
}

Result<std::shared_ptr<PackedLayerView>> NewPackedView(
    const PoolGeometry& geo, uint32_t layer, size_t length,
    const std::shared_ptr<PackedBufferBin>& bin) {
  std::shared_ptr<PackedLayerView> view(new PackedLayerView, [bin](PackedLayerView* v) {
    for (BlockBuffer& b : v->storage) bin->Give(std::move(b));
    delete v;
  });
  view->layer = layer;
  view->length = length;
  for (const StateGeometry& g : geo.layer(layer)) {
    const size_t bytes = g.a * length * g.row_bytes;
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer buf, bin->Take(bytes));
    PackedTensor t;
    t.dtype = g.dtype;
    t.shape = g.shape;  // the layout's shape with `length` on the token axis
    t.shape[static_cast<size_t>(g.token_dim)] = length;
    t.data = std::span<const std::byte>(buf.data(), bytes);
    view->states.push_back(std::move(t));
    view->storage.push_back(std::move(buf));
  }
  return view;
}

}  // namespace kvtier::pool_internal
