// TieredBackingStore: TieredCache behind the BlockBackingStore interface.
#include "kvtier/tiered_backing_store.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

namespace kvtier {

namespace {

// Extra bytes over this writer's own block file, for headers a little
// longer (other meta states, longer numbers).
constexpr size_t kHeaderSlack = 4096;

}  // namespace

Result<std::unique_ptr<TieredBackingStore>> TieredBackingStore::Create(TieredCache* cache,
                                                                       const ModelLayout& layout) {
  if (cache == nullptr) return Status::InvalidArgument("TieredBackingStore: cache is null");
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  // The size of a block file of this layout as EncodeBlock writes it: encode
  // one with zero tensors and the widest numbers the header can hold.
  std::vector<std::vector<std::byte>> tensors;
  std::vector<std::span<const std::byte>> views;
  for (const LayerSpec& l : layout.layers) {
    for (const TensorSpec& t : l.states) {
      tensors.emplace_back(static_cast<size_t>(t.ByteSize()));
      views.emplace_back(tensors.back());
    }
  }
  EncodeRequest req;
  req.layout = &layout;
  req.created_at = INT64_MIN;
  req.tensors = views;
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer sample, EncodeBlock(req));
  const size_t max_bytes = 8 + kMaxBlockHeaderBytes + static_cast<size_t>(layout.BlockBytes());
  const size_t estimate = std::min(sample.size() + kHeaderSlack, max_bytes);
  return std::unique_ptr<TieredBackingStore>(new TieredBackingStore(cache, estimate, max_bytes));
}

TieredBackingStore::TieredBackingStore(TieredCache* cache, size_t estimate_bytes, size_t max_bytes)
    : cache_(cache), estimate_bytes_(estimate_bytes), max_bytes_(max_bytes) {}

size_t TieredBackingStore::Match(std::span<const BlockKey> keys) {
  counters_.match_calls.fetch_add(1, std::memory_order_relaxed);
  return cache_->Match(keys).blocks;
}

Status TieredBackingStore::Store(const BlockKey& key, SharedBlock block) {
  const BlockKey keys[1] = {key};
  const SharedBlock blocks[1] = {std::move(block)};
  Status s = cache_->Store(keys, blocks);
  (s.ok() ? counters_.stored_blocks : counters_.store_errors)
      .fetch_add(1, std::memory_order_relaxed);
  return s;
}

std::future<std::vector<SharedBlock>> TieredBackingStore::Load(std::vector<BlockKey> keys) {
  counters_.load_calls.fetch_add(1, std::memory_order_relaxed);
  std::vector<BlockBuffer> bufs;
  std::vector<std::span<std::byte>> dsts;
  bufs.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    Result<BlockBuffer> b = BlockBuffer::Allocate(estimate_bytes_);
    if (!b.ok()) break;
    bufs.push_back(std::move(b).value());
  }
  // Out of memory for some buffers: load what fits; the rest are misses.
  for (BlockBuffer& b : bufs) dsts.push_back(b.mutable_span());
  Result<LoadFuture> future =
      cache_->Load(std::span<const BlockKey>(keys.data(), bufs.size()), dsts);
  // Deferred: the pool's loader thread runs Finish when it waits on the
  // future, while the cache's load threads have been reading since now.
  return std::async(std::launch::deferred, [this, keys = std::move(keys), bufs = std::move(bufs),
                                            future = std::move(future)]() mutable {
    return Finish(std::move(keys), std::move(bufs), std::move(future));
  });
}

std::vector<SharedBlock> TieredBackingStore::Finish(std::vector<BlockKey> keys,
                                                    std::vector<BlockBuffer> bufs,
                                                    Result<LoadFuture> future) {
  std::vector<SharedBlock> out(keys.size());
  std::vector<LoadedBlock> got(keys.size());
  bool too_small = false;
  if (future.ok()) {
    Result<std::vector<LoadedBlock>> r = future->Get();
    if (r.ok()) {
      for (size_t i = 0; i < r->size() && i < got.size(); ++i) got[i] = (*r)[i];
    } else {
      // InvalidArgument: some buffer was too small; the other keys loaded.
      too_small = r.status().IsInvalidArgument();
      if (too_small) {
        // Get() gives no per-key outcomes with an error, so every key is
        // read again into a buffer that fits any block file of the layout.
        got.assign(keys.size(), LoadedBlock{});
      }
    }
  }
  Counters& c = counters_;
  if (too_small) {
    std::vector<BlockBuffer> big;
    std::vector<std::span<std::byte>> dsts;
    for (size_t i = 0; i < keys.size(); ++i) {
      Result<BlockBuffer> b = BlockBuffer::Allocate(max_bytes_);
      if (!b.ok()) break;
      big.push_back(std::move(b).value());
      dsts.push_back(big.back().mutable_span());
    }
    c.oversize_retries.fetch_add(big.size(), std::memory_order_relaxed);
    Result<LoadFuture> again =
        cache_->Load(std::span<const BlockKey>(keys.data(), big.size()), dsts);
    if (again.ok()) {
      Result<std::vector<LoadedBlock>> r = again->Get();
      if (r.ok()) {
        for (size_t i = 0; i < r->size(); ++i) got[i] = (*r)[i];
        bufs = std::move(big);
      }
    }
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= bufs.size() || got[i].tier == CacheTier::kNone) {
      c.load_misses.fetch_add(1, std::memory_order_relaxed);
      continue;
    }
    (got[i].tier == CacheTier::kHost ? c.loaded_host : c.loaded_disk)
        .fetch_add(1, std::memory_order_relaxed);
    c.loaded_bytes.fetch_add(got[i].bytes, std::memory_order_relaxed);
    bufs[i].Truncate(static_cast<size_t>(got[i].bytes));
    out[i] = std::make_shared<const BlockBuffer>(std::move(bufs[i]));
  }
  return out;
}

TieredBackingStoreCounters TieredBackingStore::counters() const {
  const Counters& c = counters_;
  TieredBackingStoreCounters out;
  out.match_calls = c.match_calls.load(std::memory_order_relaxed);
  out.stored_blocks = c.stored_blocks.load(std::memory_order_relaxed);
  out.store_errors = c.store_errors.load(std::memory_order_relaxed);
  out.load_calls = c.load_calls.load(std::memory_order_relaxed);
  out.loaded_host = c.loaded_host.load(std::memory_order_relaxed);
  out.loaded_disk = c.loaded_disk.load(std::memory_order_relaxed);
  out.load_misses = c.load_misses.load(std::memory_order_relaxed);
  out.loaded_bytes = c.loaded_bytes.load(std::memory_order_relaxed);
  out.oversize_retries = c.oversize_retries.load(std::memory_order_relaxed);
  return out;
}

}  // namespace kvtier
