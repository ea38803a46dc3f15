// DensePoolImpl: the DensePool (see include/kvtier/block_pool.h).
//
// Each live sequence owns one host tensor per layer and state, shaped
// [A, capacity, B], which grows (doubling, re-laid out per head) up to
// dense_max_tokens. Removed sequences' tensors go to a free list of at most
// dense_free_list_cap entries for reuse; past the cap they are freed. There
// is no sharing between sequences, no prefix reuse, no eviction and no lower
// tier: Allocate of a new id returns 0.
//
// Thread safety: as DensePool; one mutex guards everything.
#ifndef KVTIER_POOL_DENSE_POOL_H_
#define KVTIER_POOL_DENSE_POOL_H_

#include <memory>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_pool.h"
#include "pool/pool_base.h"
#include "pool/pool_geometry.h"

namespace kvtier::pool_internal {

class DensePoolImpl final : public PoolBase<DensePool> {
 public:
  // REQUIRES: options validated; geo from options.layout.
  DensePoolImpl(DensePoolOptions options, PoolGeometry geo);

  Result<size_t> Allocate(uint64_t seq, std::span<const uint32_t> tokens) override;
  Status Advance(uint64_t seq, std::span<const uint32_t> tokens) override;
  Status Rollback(uint64_t seq, size_t length) override;
  Status Remove(uint64_t seq) override;
  bool HasSequence(uint64_t seq) const override;
  Result<size_t> Length(uint64_t seq) const override;
  Result<std::shared_ptr<const PackedLayerView>> PackedLayer(uint64_t seq, uint32_t layer) override;
  // A dense pool has no recurrent layer (Create refuses them): always
  // kInvalidArgument.
  Result<std::shared_ptr<const PackedLayerView>> RecurrentState(uint64_t seq,
                                                                uint32_t layer) override;
  PoolStats GetStats() const override;

 private:
  // The tensors of one sequence: [layer][state], each [A, capacity, B].
  struct Storage {
    size_t capacity = 0;  // tokens
    std::vector<std::vector<BlockBuffer>> tensors;
    uint64_t Bytes(const PoolGeometry& geo) const;
  };
  struct Sequence {
    Storage storage;
    std::vector<uint32_t> tokens;
    std::vector<size_t> written;  // per layer
    std::vector<std::shared_ptr<const PackedLayerView>> packed;
  };

  Result<Storage> NewStorage(size_t capacity) const;
  // Grows `s` to hold at least `tokens` positions, keeping its contents.
  Status GrowLocked(Storage& s, size_t tokens) REQUIRES(mu_);
  Result<Sequence*> FindLocked(uint64_t seq) REQUIRES(mu_);
  void TruncateLocked(Sequence& seq, size_t length) REQUIRES(mu_);
  Status WriteAppend(uint64_t seq, const AppendRequest& req) override;
  Status WriteRecurrent(uint64_t seq, uint32_t layer, size_t pos,
                        std::span<const std::span<const std::byte>> states) override;

  const DensePoolOptions options_;

  // Lock order: mu_, then packed_bin_'s own mutex.
  const std::shared_ptr<PackedBufferBin> packed_bin_;
  mutable Mutex mu_;
  std::unordered_map<uint64_t, Sequence> seqs_ GUARDED_BY(mu_);
  std::vector<Storage> free_list_ GUARDED_BY(mu_);
};

}  // namespace kvtier::pool_internal

#endif  // KVTIER_POOL_DENSE_POOL_H_
