#include "kvtier/tiered_cache.h"

#include <utility>

#include "cache/cache_core.h"

namespace kvtier {

TieredCache::TieredCache(std::unique_ptr<cache_internal::CacheCore> core)
    : core_(std::move(core)) {}

TieredCache::~TieredCache() { (void)core_->Close(); }

Result<std::unique_ptr<TieredCache>> TieredCache::Open(CacheOptions options, Env* env) {
  KVTIER_ASSIGN_OR_RETURN(auto core, cache_internal::CacheCore::Open(std::move(options), env));
  return std::unique_ptr<TieredCache>(new TieredCache(std::move(core)));
}

MatchResult TieredCache::Match(std::span<const BlockKey> chain) const {
  return core_->Match(chain);
}

CacheTier TieredCache::Contains(const BlockKey& key) const { return core_->Contains(key); }

Result<bool> TieredCache::Erase(const BlockKey& key) { return core_->Erase(key); }

Result<uint64_t> TieredCache::Clear() { return core_->Clear(); }

void TieredCache::HintDiskKeys(std::span<const BlockKey> keys) { core_->HintDiskKeys(keys); }

Result<LoadFuture> TieredCache::Load(std::span<const BlockKey> keys,
                                     std::span<const std::span<std::byte>> dsts) {
  return core_->Load(keys, dsts);
}

Result<LoadFuture> TieredCache::LoadShared(std::span<const BlockKey> keys,
                                           SharedLoadOptions options) {
  return core_->LoadShared(keys, std::move(options));
}

Result<uint64_t> TieredCache::PrefaultReadBuffers(const ModelLayout& layout, uint64_t count) {
  return core_->PrefaultReadBuffers(layout, count);
}

Result<size_t> TieredCache::Preload(std::span<const BlockKey> keys) { return core_->Preload(keys); }

Status TieredCache::Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks,
                          const StoreOptions& options) {
  return core_->Store(keys, blocks, options);
}

Status TieredCache::Flush() { return core_->Flush(); }

uint64_t TieredCache::ShrinkHost(uint64_t target_bytes, std::span<const BlockKey> protected_keys) {
  return core_->ShrinkHost(target_bytes, protected_keys);
}

Status TieredCache::Close() { return core_->Close(); }

CacheStats TieredCache::Stats() const { return core_->Stats(); }

std::string TieredCache::Prometheus() const { return core_->Stats().ToPrometheus(); }

std::shared_ptr<SharedHostBudget> TieredCache::host_budget() const { return core_->host_budget(); }

}  // namespace kvtier
