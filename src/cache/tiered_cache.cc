#include "kvtier/tiered_cache.h"

#include <utility>

#include "cache/cache_core.h"
#include "cache/served_cache.h"

namespace kvtier {

TieredCache::TieredCache(std::unique_ptr<cache_internal::CacheCore> core)
    : core_(std::move(core)) {}

TieredCache::TieredCache(std::unique_ptr<cache_internal::ServedCache> served)
    : served_(std::move(served)) {}

TieredCache::~TieredCache() { (void)Close(); }

Result<std::unique_ptr<TieredCache>> TieredCache::Open(CacheOptions options, Env* env) {
  if (!options.server.empty()) {
    KVTIER_RETURN_IF_ERROR(options.Validate());
    KVTIER_ASSIGN_OR_RETURN(auto served, cache_internal::ServedCache::Open(options));
    return std::unique_ptr<TieredCache>(new TieredCache(std::move(served)));
  }
  KVTIER_ASSIGN_OR_RETURN(auto core, cache_internal::CacheCore::Open(std::move(options), env));
  return std::unique_ptr<TieredCache>(new TieredCache(std::move(core)));
}

MatchResult TieredCache::Match(std::span<const BlockKey> chain) const {
  if (served_) return served_->Match(chain);
  return core_->Match(chain);
}

CacheTier TieredCache::Contains(const BlockKey& key) const {
  if (served_) return served_->Contains(key);
  return core_->Contains(key);
}

Result<bool> TieredCache::Erase(const BlockKey& key) {
  if (served_) return served_->Erase(key);
  return core_->Erase(key);
}

Result<uint64_t> TieredCache::Clear() {
  if (served_) return served_->NotServed("Clear");
  return core_->Clear();
}

void TieredCache::HintDiskKeys(std::span<const BlockKey> keys) {
  if (served_) return;  // the daemon's disk tier answers its own matches
  core_->HintDiskKeys(keys);
}

Result<LoadFuture> TieredCache::Load(std::span<const BlockKey> keys,
                                     std::span<const std::span<std::byte>> dsts) {
  if (served_) return served_->Load(keys, dsts);
  return core_->Load(keys, dsts);
}

Result<LoadFuture> TieredCache::LoadShared(std::span<const BlockKey> keys,
                                           SharedLoadOptions options) {
  if (served_) return served_->LoadShared(keys, options);
  return core_->LoadShared(keys, std::move(options));
}

Result<uint64_t> TieredCache::PrefaultReadBuffers(const ModelLayout& layout, uint64_t count) {
  if (served_) return served_->NotServed("PrefaultReadBuffers");
  return core_->PrefaultReadBuffers(layout, count);
}

Result<size_t> TieredCache::Preload(std::span<const BlockKey> keys) {
  if (served_) return served_->NotServed("Preload");
  return core_->Preload(keys);
}

Status TieredCache::Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks,
                          const StoreOptions& options) {
  if (served_) return served_->Store(keys, blocks);
  return core_->Store(keys, blocks, options);
}

Status TieredCache::Flush() {
  // With a server the daemon writes back (on eviction and at SIGTERM).
  if (served_) return Status::Ok();
  return core_->Flush();
}

uint64_t TieredCache::ShrinkHost(uint64_t target_bytes, std::span<const BlockKey> protected_keys) {
  if (served_) return 0;
  return core_->ShrinkHost(target_bytes, protected_keys);
}

Status TieredCache::Close() {
  if (served_) return served_->Close();
  return core_->Close();
}

CacheStats TieredCache::Stats() const {
  if (served_) return served_->Stats();
  return core_->Stats();
}

std::string TieredCache::Prometheus() const { return Stats().ToPrometheus(); }

std::shared_ptr<SharedHostBudget> TieredCache::host_budget() const {
  if (served_) return nullptr;
  return core_->host_budget();
}

}  // namespace kvtier
