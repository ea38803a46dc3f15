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
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    std::vector<StateGeometry> states;
    const auto& specs = layout.layers[l].states;
    for (size_t k = 0; k < specs.size(); ++k) {
      const TensorSpec& spec = specs[k];
      if (spec.shape.size() != 3 || spec.shape[1] != layout.block_tokens) {
        return Status::InvalidArgument(
            "layout." + StateName(static_cast<uint32_t>(l), static_cast<uint32_t>(k)) +
            ".shape must be [A, block_tokens, B] for the block pool");
      }
      StateGeometry g;
      g.offset = offset;
      g.bytes = spec.ByteSize();
      g.dtype = spec.dtype;
      g.a = spec.shape[0];
      g.b = spec.shape[2];
      g.row_bytes = g.b * DTypeSize(spec.dtype);
      offset += g.bytes;
      states.push_back(g);
      ++geo.tensor_count_;
    }
    geo.layers_.push_back(std::move(states));
  }
  geo.block_bytes_ = offset;
  return geo;
}

Status ValidateAppend(const PoolGeometry& geo, AppendRequest* req) {
  if (req->layer >= geo.layers()) {
    return Status::InvalidArgument("layer " + std::to_string(req->layer) + " out of range (" +
                                   std::to_string(geo.layers()) + " layers)");
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
    t.shape = {g.a, length, g.b};
    t.data = std::span<const std::byte>(buf.data(), bytes);
    view->states.push_back(std::move(t));
    view->storage.push_back(std::move(buf));
  }
  return view;
}

}  // namespace kvtier::pool_internal
