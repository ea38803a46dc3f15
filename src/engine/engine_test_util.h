// Helpers for src/engine tests: a temporary folder, a small model config,
// and the serving stack (TieredCache on a folder → TieredBackingStore →
// BlockPool → Engine) that tests open, close and reopen.
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_ENGINE_ENGINE_TEST_UTIL_H_
#define KVTIER_ENGINE_ENGINE_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "kvtier/block_pool.h"
#include "kvtier/env.h"
#include "kvtier/tiered_backing_store.h"
#include "kvtier/tiered_cache.h"
#include "testing/temp_dir.h"

namespace kvtier::engine::testing {

using TempDir = ::kvtier::testing::TempDir;

// Small enough for ASan: 2 layers, hidden 48, 4 query heads over 2 KV heads.
inline ModelConfig SmallConfig(DType kv_dtype = DType::kF16, uint64_t seed = 7) {
  ModelConfig c;
  c.layers = 2;
  c.heads = 4;
  c.kv_heads = 2;
  c.head_dim = 8;
  c.hidden = 48;
  c.ffn = 96;
  c.vocab = 64;
  c.seed = seed;
  c.kv_dtype = kv_dtype;
  return c;
}

// A pool with no tiers and no reuse across sequences: what "without the
// cache" means.
inline std::unique_ptr<BlockPool> NoCachePool(const ModelLayout& layout, uint32_t blocks = 64) {
  PoolOptions o;
  o.layout = layout;
  o.key_namespace.model_id = "no-cache";
  o.total_blocks = blocks;
  o.chunk_blocks = 16;
  o.eviction = EvictionPolicy::kNone;
  o.store_policy = StorePolicy::kNever;
  o.retain_freed_blocks = false;
  auto pool = BlockPool::Create(std::move(o));
  return pool.ok() ? std::move(pool).value() : nullptr;
}

// TieredCache (host + disk in `dir`) → adapter → pool → engine.
struct Stack {
  std::unique_ptr<TieredCache> cache;
  std::unique_ptr<TieredBackingStore> store;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Engine> engine;

  // Engine, pool, adapter, then the cache (dirty blocks go to disk).
  Status Close() {
    engine.reset();
    pool.reset();
    store.reset();
    Status s = cache != nullptr ? cache->Close() : Status::Ok();
    cache.reset();
    return s;
  }
  ~Stack() { (void)Close(); }
};

inline Result<std::unique_ptr<Stack>> OpenStack(const Model* model, const ModelLayout& layout,
                                                const std::string& dir, uint32_t blocks = 64,
                                                std::string model_id = "engine-test") {
  auto s = std::make_unique<Stack>();
  CacheOptions co;
  co.layout_signature = layout.Signature();
  co.host.capacity_bytes = 64ull << 20;
  co.load_threads = 1;
  DiskTierOptions disk;
  disk.dir = dir;
  disk.writer_threads = 1;
  disk.read_threads = 1;
  co.disk = std::move(disk);
  KVTIER_ASSIGN_OR_RETURN(s->cache, TieredCache::Open(std::move(co), Env::Default()));
  KVTIER_ASSIGN_OR_RETURN(s->store, TieredBackingStore::Create(s->cache.get()));
  PoolOptions po;
  po.layout = layout;
  po.key_namespace.model_id = std::move(model_id);
  po.total_blocks = blocks;
  po.chunk_blocks = 16;
  po.store = s->store.get();
  KVTIER_ASSIGN_OR_RETURN(s->pool, BlockPool::Create(std::move(po)));
  KVTIER_ASSIGN_OR_RETURN(s->engine, Engine::Create(model, s->pool.get()));
  return s;
}

// Token ids 0..vocab-1 from a simple recurrence, distinct per `salt`.
inline std::vector<uint32_t> Tokens(size_t n, uint32_t vocab, uint32_t salt) {
  std::vector<uint32_t> t(n);
  uint32_t x = salt * 2654435761u + 12345u;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    t[i] = (x >> 8) % vocab;
  }
  return t;
}

}  // namespace kvtier::engine::testing

#endif  // KVTIER_ENGINE_ENGINE_TEST_UTIL_H_
