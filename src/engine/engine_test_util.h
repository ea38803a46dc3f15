// Helpers for src/engine tests: a temporary folder, a small model config,
// the serving stack (TieredCache on a folder → TieredBackingStore →
// BlockPool → Engine) that tests open, close and reopen, no-cache
// reference logits, and the fixture of the cached-prefix tests (two
// prompts sharing a prefix, served and checked bit for bit).
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_ENGINE_ENGINE_TEST_UTIL_H_
#define KVTIER_ENGINE_ENGINE_TEST_UTIL_H_

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "engine/engine.h"
#include "engine/model.h"
#include "kvtier/block_pool.h"
#include "kvtier/env.h"
#include "kvtier/tiered_backing_store.h"
#include "kvtier/tiered_cache.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::engine::testing {

using TempDir = ::kvtier::testing::TempDir;

// Tokens per block of the engine tests' pools.
inline constexpr uint32_t kBlockTokens = 8;

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

// A pool of 64 blocks for `layout` under OpenStack's model id (so it finds
// what OpenStack's pool stored) over `store`, or no store; it keeps freed
// blocks for reuse.
inline PoolOptions EnginePoolOptions(const ModelLayout& layout,
                                     BlockBackingStore* store = nullptr) {
  PoolOptions po;
  po.layout = layout;
  po.key_namespace.model_id = "engine-test";
  po.total_blocks = 64;
  po.store = store;
  return po;
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

// Model::Create(c); null (and a failed expectation) when it fails.
inline std::unique_ptr<const Model> MakeModel(const ModelConfig& c) {
  auto m = Model::Create(c);
  EXPECT_THAT(m, ::kvtier::testing::IsOk());
  return m.ok() ? std::move(m).value() : nullptr;
}

// Logits after the prompt `tokens` and after each of `decode` fed one by
// one, on a fresh no-cache pool, the prompt computed in chunks of `chunk`
// tokens.
inline std::vector<std::vector<float>> Reference(const Model& model,
                                                 std::span<const uint32_t> tokens,
                                                 std::span<const uint32_t> decode = {},
                                                 uint32_t chunk = 256) {
  using ::kvtier::testing::IsOk;
  auto pool = NoCachePool(model.config().KvLayout(kBlockTokens));
  EngineOptions eo;
  eo.prefill_chunk = chunk;
  auto engine = Engine::Create(&model, pool.get(), eo);
  EXPECT_THAT(engine, IsOk());
  std::vector<std::vector<float>> out;
  if (!engine.ok()) return out;
  auto r = (*engine)->Prefill(1, tokens);
  EXPECT_THAT(r, IsOk());
  if (!r.ok()) return out;
  EXPECT_EQ(r->reused_tokens, 0u);
  out.push_back(r->logits);
  for (uint32_t t : decode) {
    auto d = (*engine)->Decode(1, t);
    EXPECT_THAT(d, IsOk());
    if (d.ok()) out.push_back(*d);
  }
  return out;
}

// The prompts of the cached-prefix tests: B shares A's first 37 tokens, so
// the first four 8-token blocks (32 tokens) are reusable from A; once B was
// served, its own fifth block is too. `decode` is fed after B.
struct Prompts {
  explicit Prompts(std::vector<uint32_t> decode_tokens) : decode(std::move(decode_tokens)) {
    b.assign(a.begin(), a.begin() + 37);
    const std::vector<uint32_t> tail = Tokens(10, 64, 4);
    b.insert(b.end(), tail.begin(), tail.end());
  }

  std::vector<uint32_t> a = Tokens(45, 64, 3);
  std::vector<uint32_t> b;
  std::vector<uint32_t> decode;
};

// The fixture of the cached-prefix tests, over Prompts: the derived class's
// SetUp makes model_, layout_ (its pool layout) and want_b_ (B's no-cache
// Reference logits, with p_.decode); dir_ holds the tiers.
template <typename Param>
class PromptsTest : public ::testing::TestWithParam<Param> {
 protected:
  explicit PromptsTest(std::vector<uint32_t> decode) : p_(std::move(decode)) {}

  // Prefills B on `engine` as `seq`, decodes p_.decode, and checks every
  // logit against want_b_. Returns the prefill result.
  PrefillResult ServeB(Engine* engine, uint64_t seq) {
    using ::kvtier::testing::IsOk;
    auto r = engine->Prefill(seq, p_.b);
    EXPECT_THAT(r, IsOk());
    if (!r.ok()) return {};
    EXPECT_TRUE(BitIdentical(r->logits, want_b_[0]));
    for (size_t i = 0; i < p_.decode.size(); ++i) {
      auto d = engine->Decode(seq, p_.decode[i]);
      EXPECT_THAT(d, IsOk());
      if (d.ok()) {
        EXPECT_TRUE(BitIdentical(*d, want_b_[i + 1])) << "decode step " << i;
      }
    }
    return *r;
  }

  Prompts p_;
  std::unique_ptr<const Model> model_;
  ModelLayout layout_;
  std::vector<std::vector<float>> want_b_;
  TempDir dir_;
};

}  // namespace kvtier::engine::testing

#endif  // KVTIER_ENGINE_ENGINE_TEST_UTIL_H_
