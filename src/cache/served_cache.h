// ServedCache: TieredCache's calls answered by the host's `kvtier serve`
// through a ServerClient (CacheOptions::server), for the engines and
// bindings that only know the TieredCache API. Hits are copied out of the
// daemon's arena (verified by the client) and reported as host hits;
// counters are the client's, mapped onto CacheStats. LoadShared's blocks
// are copied into buffers of a BufferPool (read_buffer_pool_bytes), which
// come back when the caller drops them, so a restore into a BlockPool or
// load_many_tensors does not fault in fresh memory per block.
//
// Thread safety: as TieredCache (ServerClient serializes its calls); Close()
// sets a flag the other calls check, the client lives until destruction.
#ifndef KVTIER_CACHE_SERVED_CACHE_H_
#define KVTIER_CACHE_SERVED_CACHE_H_

#include <atomic>
#include <memory>
#include <span>

#include "cache/buffer_pool.h"
#include "cache/load_state.h"
#include "kvtier/server_client.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

class ServedCache {
 public:
  static Result<std::unique_ptr<ServedCache>> Open(const CacheOptions& options);

  MatchResult Match(std::span<const BlockKey> chain) const;
  CacheTier Contains(const BlockKey& key) const;
  Result<bool> Erase(const BlockKey& key);
  Result<LoadFuture> Load(std::span<const BlockKey> keys,
                          std::span<const std::span<std::byte>> dsts);
  Result<LoadFuture> LoadShared(std::span<const BlockKey> keys, const SharedLoadOptions& options);
  Status Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks);
  Status Close();
  CacheStats Stats() const;
  // Calls the daemon does not serve through this API.
  Status NotServed(std::string_view call) const;
  bool closed() const { return closed_.load(std::memory_order_acquire); }

 private:
  ServedCache(std::unique_ptr<ServerClient> client, std::shared_ptr<BufferPool> buffers);
  // A future that is ready at once with `out` (or `status`).
  static LoadFuture Ready(LoadState::Mode mode, std::vector<LoadedBlock> out, Status status);
  std::unique_ptr<ServerClient> client_;
  std::shared_ptr<BufferPool> buffers_;
  std::atomic<bool> closed_{false};
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_SERVED_CACHE_H_
