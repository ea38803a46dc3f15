#include "cache/served_cache.h"

#include <utility>
#include <vector>


namespace kvtier::cache_internal {
namespace {

CacheTier TierOf(ServerTier t) {
  switch (t) {
    case ServerTier::kArena:
      return CacheTier::kHost;
    case ServerTier::kDisk:
      return CacheTier::kDisk;
    case ServerTier::kRemote:
      return CacheTier::kRemote;
    case ServerTier::kNone:
      break;
  }
  return CacheTier::kNone;
}

}  // namespace

LoadFuture ServedCache::Ready(LoadState::Mode mode, std::vector<LoadedBlock> out, Status status) {
  auto state = std::make_shared<LoadState>();
  state->mode = mode;
  state->out = std::move(out);
  state->Finish(std::move(status));
  return LoadFuture(std::move(state));
}

Result<std::unique_ptr<ServedCache>> ServedCache::Open(const CacheOptions& options) {
  ServerClientOptions o;
  o.server = options.server;
  o.layout_signature = options.layout_signature;
  o.timeout_ms = options.server_timeout_ms;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ServerClient> client, ServerClient::Open(std::move(o)));
  // Connected and the arena's published pages read now, at the engine's
  // start-up, rather than in its first loads. A daemon that is down (or
  // refuses the layout) is what the calls report, as without this.
  (void)client->Connect();
  return std::unique_ptr<ServedCache>(
      new ServedCache(std::move(client), BufferPool::Create(options.read_buffer_pool_bytes)));
}

ServedCache::ServedCache(std::unique_ptr<ServerClient> client, std::shared_ptr<BufferPool> buffers)
    : client_(std::move(client)), buffers_(std::move(buffers)) {}

Status ServedCache::NotServed(std::string_view call) const {
  return Status::FailedPrecondition("TieredCache::" + std::string(call) +
                                    ": not available with the server option (the daemon owns "
                                    "the tiers; docs/server.md)");
}

MatchResult ServedCache::Match(std::span<const BlockKey> chain) const {
  MatchResult m;
  if (closed()) return m;
  for (ServerTier t : client_->Match(chain)) {
    const CacheTier tier = TierOf(t);
    m.tiers.push_back(tier);
    m.host_blocks += tier == CacheTier::kHost;
    m.disk_blocks += tier == CacheTier::kDisk;
    m.remote_blocks += tier == CacheTier::kRemote;
  }
  m.blocks = m.tiers.size();
  return m;
}

CacheTier ServedCache::Contains(const BlockKey& key) const {
  if (closed()) return CacheTier::kNone;
  return TierOf(client_->Contains(key));
}

Result<bool> ServedCache::Erase(const BlockKey& key) {
  if (closed()) return Status::FailedPrecondition("TieredCache::Erase: the cache is closed");
  return client_->Erase(key);
}

Result<LoadFuture> ServedCache::Load(std::span<const BlockKey> keys,
                                     std::span<const std::span<std::byte>> dsts) {
  if (closed()) return Status::FailedPrecondition("TieredCache::Load: the cache is closed");
  if (keys.size() != dsts.size()) {
    return Status::InvalidArgument("TieredCache::Load: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(dsts.size()) + " buffers");
  }
  Result<std::vector<uint64_t>> lens = client_->Load(keys, dsts);
  std::vector<LoadedBlock> out(keys.size());
  if (lens.ok()) {
    for (size_t i = 0; i < keys.size(); ++i) {
      out[i].bytes = (*lens)[i];
      out[i].tier = (*lens)[i] > 0 ? CacheTier::kHost : CacheTier::kNone;
    }
  }
  // A buffer too small is the future's InvalidArgument, as in-process.
  return Ready(LoadState::Mode::kCopy, std::move(out), lens.status());
}

Result<LoadFuture> ServedCache::LoadShared(std::span<const BlockKey> keys,
                                           const SharedLoadOptions& options) {
  if (closed()) return Status::FailedPrecondition("TieredCache::LoadShared: the cache is closed");
  std::vector<LoadedBlock> out(keys.size());
  client_->LoadBlocks(
      keys,
      [&](size_t i, std::optional<BlockBuffer> b) {
        if (b) {
          out[i].tier = CacheTier::kHost;
          out[i].bytes = b->size();
          out[i].block = std::make_shared<const BlockBuffer>(std::move(*b));
        }
        if (options.on_block) {
          options.on_block(i, out[i]);
          out[i].block.reset();  // the callback had it: Get() reports tier and bytes
        }
      },
      [this](size_t size) { return buffers_->Take(size); });
  return Ready(LoadState::Mode::kShare, std::move(out), Status::Ok());
}

Status ServedCache::Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks) {
  if (closed()) return Status::FailedPrecondition("TieredCache::Store: the cache is closed");
  if (keys.size() != blocks.size()) {
    return Status::InvalidArgument("TieredCache::Store: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(blocks.size()) + " blocks");
  }
  std::vector<std::span<const std::byte>> spans;
  spans.reserve(blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i] == nullptr || blocks[i]->size() == 0) {
      return Status::InvalidArgument("TieredCache::Store: block " + std::to_string(i) +
                                     " is empty");
    }
    spans.emplace_back(blocks[i]->data(), blocks[i]->size());
  }
  return client_->Store(keys, spans);
}

Status ServedCache::Close() {
  closed_.store(true, std::memory_order_release);
  return Status::Ok();
}

CacheStats ServedCache::Stats() const {
  const ServerClientStats c = client_->Stats();
  CacheStats s;
  s.lookups = c.lookups;
  s.hits_host = c.hits;
  s.misses = c.misses;
  s.stores = c.stores;
  s.store_errors = c.store_errors;
  s.bytes_loaded_host = c.bytes_loaded;
  s.bytes_stored = c.bytes_stored;
  const BufferPoolStats b = buffers_->Stats();
  s.read_buffers = b.takes;
  s.read_buffers_reused = b.reused;
  s.read_buffer_fresh_bytes = b.fresh_bytes;
  s.read_buffer_free_bytes = b.free_bytes;
  s.hit_ratio = c.lookups == 0 ? 0.0 : static_cast<double>(c.hits) / static_cast<double>(c.lookups);
  return s;
}

}  // namespace kvtier::cache_internal
