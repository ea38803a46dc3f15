// PoolBase: what the paged and dense pools share below their interfaces.
//
// The three append calls (and SetRecurrentState) become one AppendRequest, checked against the
// geometry, here and only here; each pool writes the checked request
// (WriteAppend) into its own storage. The checks on an append's position
// and on Advance, which both pools make under their own lock, are the
// functions below.
//
// Thread safety: PoolBase holds only the immutable geometry; the pools'
// own contracts apply.
#ifndef KVTIER_POOL_POOL_BASE_H_
#define KVTIER_POOL_POOL_BASE_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/status.h"
#include "pool/pool_geometry.h"

namespace kvtier::pool_internal {

// `Interface` is BlockPool or DensePool.
template <typename Interface>
class PoolBase : public Interface {
 public:
  Status AppendToken(uint64_t seq, uint32_t layer, size_t pos,
                     std::span<const std::span<const std::byte>> states) final {
    return Append(seq, AppendRequest{AppendKind::kToken, layer, 0, pos, 1, states});
  }
  Status AppendHeadRange(uint64_t seq, uint32_t layer, uint32_t head, size_t pos,
                         std::span<const std::span<const std::byte>> states) final {
    return Append(seq, AppendRequest{AppendKind::kHeadRange, layer, head, pos, 0, states});
  }
  Status AppendLayer(uint64_t seq, uint32_t layer, size_t pos, size_t count,
                     std::span<const std::span<const std::byte>> states) final {
    return Append(seq, AppendRequest{AppendKind::kLayer, layer, 0, pos, count, states});
  }
  Status SetRecurrentState(uint64_t seq, uint32_t layer, size_t pos,
                           std::span<const std::span<const std::byte>> states) final {
    KVTIER_RETURN_IF_ERROR(ValidateRecurrent(geo_, layer, states));
    return WriteRecurrent(seq, layer, pos, states);
  }

 protected:
  explicit PoolBase(PoolGeometry geo) : geo_(std::move(geo)) {}

  // Writes `req` (layer, head and sizes checked, count filled) into `seq`.
  virtual Status WriteAppend(uint64_t seq, const AppendRequest& req) = 0;
  // Writes a recurrent layer's state (layer and sizes checked).
  virtual Status WriteRecurrent(uint64_t seq, uint32_t layer, size_t pos,
                                std::span<const std::span<const std::byte>> states) = 0;

  const PoolGeometry geo_;

 private:
  Status Append(uint64_t seq, AppendRequest req) {
    KVTIER_RETURN_IF_ERROR(ValidateAppend(geo_, &req));
    return WriteAppend(seq, req);
  }
};

inline std::string SeqName(uint64_t id) { return "sequence " + std::to_string(id); }

// Length of the common prefix of `a` and `b`.
size_t CommonPrefix(std::span<const uint32_t> a, std::span<const uint32_t> b);

// kInvalidArgument unless `req` starts at or past `length` (committed tokens
// are immutable), at or before `written` (the layer's K/V end: appends are
// contiguous), and its end does not overflow.
Status CheckAppendPosition(uint64_t id, const AppendRequest& req, size_t length, size_t written);

// kFailedPrecondition unless every layer has K/V for `new_len` tokens
// (`written` per layer), as Advance requires.
Status CheckWritten(uint64_t id, std::span<const size_t> written, size_t new_len);

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_POOL_BASE_H_
