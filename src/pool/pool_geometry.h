// PoolGeometry: where each state tensor of a block lies, and the copies that
// appends and packed views turn into. Shared by the paged and dense pools.
//
// A per-token state tensor has a per-block shape with its token axis
// (TensorSpec::token_dim) anywhere; row-major, it is [A, T, B] with A the
// product of the dimensions before the token axis and B of those after it
// (T = block_tokens). One token's row of one "head" (one index of A) is B
// elements ("row bytes"). In a slot, the state starts at `offset` and head
// h's rows for tokens 0..T-1 are contiguous; in a dense tensor of capacity C
// the same holds with C instead of T.
//
// A recurrent layer (every state has token_dim -1: SSM, linear attention,
// convolution window) has states of constant size; a block's copy is the
// layer's state after the block's last token (DESIGN.md §4).
//
// Thread safety: immutable after Create().
#ifndef KVTIER_POOL_POOL_GEOMETRY_H_
#define KVTIER_POOL_POOL_GEOMETRY_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_pool.h"
#include "kvtier/layout.h"
#include "kvtier/slot_memory.h"
#include "kvtier/status.h"

namespace kvtier::pool_internal {

struct StateGeometry {
  uint64_t offset = 0;  // in the slot (and in a block file's data section)
  uint64_t bytes = 0;   // A × T × B × dtype size; a recurrent state's size
  DType dtype = DType::kF16;
  uint64_t a = 0, b = 0;   // recurrent: 1 and the state's elements
  uint64_t row_bytes = 0;  // B × dtype size; recurrent: `bytes`
  std::vector<uint64_t> shape;  // the layout's per-block shape
  int32_t token_dim = -1;       // its token axis, -1 for a recurrent state
  size_t tensor = 0;            // index in file order (TensorMask element)
};

// What a layer keeps, for restores, window freeing and the append calls.
enum class LayerKind : uint8_t {
  kFull,       // per-token states, attention over every token
  kSliding,    // per-token states, attention over the last `window` tokens
  kRecurrent,  // constant-size states, set with SetRecurrentState
};

class PoolGeometry {
 public:
  PoolGeometry() = default;
  // kInvalidArgument unless the layout is valid and every layer is either
  // per-token (every state has a token axis) or recurrent (none has), and
  // no recurrent layer has a window.
  static Result<PoolGeometry> Create(const ModelLayout& layout);

  uint32_t block_tokens() const { return block_tokens_; }
  uint64_t block_bytes() const { return block_bytes_; }
  uint32_t layers() const { return static_cast<uint32_t>(layers_.size()); }
  const std::vector<StateGeometry>& layer(uint32_t l) const { return layers_[l]; }
  size_t tensor_count() const { return tensor_count_; }
  LayerKind kind(uint32_t l) const { return kinds_[l]; }
  uint32_t window(uint32_t l) const { return windows_[l]; }
  // Bytes of a recurrent layer's states together (0 for other layers).
  uint64_t recurrent_bytes(uint32_t l) const { return recurrent_bytes_[l]; }
  bool has_recurrent() const { return has_recurrent_; }
  // True when every per-token layer is sliding (and there is one): only
  // then can a slot, which holds every layer of a block, fall out of use
  // as a sequence grows.
  bool all_per_token_sliding() const { return all_sliding_; }
  // The largest window of a sliding layer (0 if none).
  uint32_t max_window() const { return max_window_; }

  // Which tensors a reader holding tokens [0, length) of a sequence needs
  // from block `block` (block < ceil(length / T)): every per-token tensor of
  // a full-attention layer, a sliding layer's where the block overlaps
  // [length - window, length), a recurrent layer's when the block ends at
  // `length`. Element i is tensor i in file order.
  TensorMask NeededTensors(size_t block, size_t length) const;
  // Bytes of the tensors `mask` selects (empty = all).
  uint64_t MaskBytes(const TensorMask& mask) const;

 private:
  uint32_t block_tokens_ = 0;
  uint64_t block_bytes_ = 0;
  size_t tensor_count_ = 0;
  std::vector<std::vector<StateGeometry>> layers_;
  std::vector<LayerKind> kinds_;
  std::vector<uint32_t> windows_;
  std::vector<uint64_t> recurrent_bytes_;
  bool has_recurrent_ = false;
  bool all_sliding_ = false;
  uint32_t max_window_ = 0;
};

// One append call, checked against the geometry.
enum class AppendKind : uint8_t { kToken, kHeadRange, kLayer };

struct AppendRequest {
  AppendKind kind = AppendKind::kToken;
  uint32_t layer = 0;
  uint32_t head = 0;  // kHeadRange
  size_t pos = 0;     // first position written
  size_t count = 0;   // positions written (derived for kToken / kHeadRange)
  std::span<const std::span<const std::byte>> states;
};

// Checks layer, head and every state's byte size, and fills req->count.
// kInvalidArgument naming what is wrong (also for a recurrent layer, which
// takes SetRecurrentState instead).
Status ValidateAppend(const PoolGeometry& geo, AppendRequest* req);

// Checks a SetRecurrentState call: `layer` is recurrent and state k holds
// exactly its bytes. kInvalidArgument naming what is wrong.
Status ValidateRecurrent(const PoolGeometry& geo, uint32_t layer,
                         std::span<const std::span<const std::byte>> states);

// The copy that writes positions [p, p + n) of state `k` of `req`, where
// `dst` is the address of head 0's row for position p and `head_pitch` the
// distance between heads' rows in the destination.
// REQUIRES: req validated, [p, p + n) within [req.pos, req.pos + req.count).
Copy2D AppendCopy(const PoolGeometry& geo, const AppendRequest& req, uint32_t k, size_t p, size_t n,
                  std::byte* dst, size_t head_pitch);

// Buffers of packed views that nobody holds any more, kept for the next
// views so that a view per decode step does not cost fresh memory (page
// faults). Holds at most `max_buffers`; a buffer is reused for a request of
// at most its size and at least half of it (any request, for a page).
//
// Thread safety: thread-safe; its mutex is taken after the pool's (never
// the other way round) or alone, by a view's last owner.
class PackedBufferBin {
 public:
  explicit PackedBufferBin(size_t max_buffers) : max_buffers_(max_buffers) {}
  // A buffer whose size() is at least `bytes`, or kResourceExhausted.
  Result<BlockBuffer> Take(size_t bytes);
  void Give(BlockBuffer buffer);

 private:
  const size_t max_buffers_;
  Mutex mu_;
  std::vector<BlockBuffer> free_ GUARDED_BY(mu_);
};

// Builds a packed view of `layer` for `length` tokens with its buffers
// allocated from `bin` (not filled): write through storage[k].data(). When
// its last owner drops it, the buffers go back to `bin`.
// kResourceExhausted if allocation fails.
Result<std::shared_ptr<PackedLayerView>> NewPackedView(const PoolGeometry& geo, uint32_t layer,
                                                       size_t length,
                                                       const std::shared_ptr<PackedBufferBin>& bin);

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_POOL_GEOMETRY_H_
