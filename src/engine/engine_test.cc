// The reference engine: determinism, input checks, and logits with a cached
// prefix (from the pool, the host tier and the disk tier of a real
// TieredCache) bit for bit equal to logits computed without any cache.
#include "engine/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "engine/engine_test_util.h"
#include "engine/kernels.h"
#include "engine/model.h"
#include "testing/status_matchers.h"

namespace kvtier::engine {
namespace {

using ::kvtier::engine::testing::EnginePoolOptions;
using ::kvtier::engine::testing::kBlockTokens;
using ::kvtier::engine::testing::MakeModel;
using ::kvtier::engine::testing::NoCachePool;
using ::kvtier::engine::testing::OpenStack;
using ::kvtier::engine::testing::PromptsTest;
using ::kvtier::engine::testing::Reference;
using ::kvtier::engine::testing::SmallConfig;
using ::kvtier::engine::testing::Stack;
using ::kvtier::engine::testing::Tokens;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ModelTest, SameSeedSameWeightsOtherSeedOtherWeights) {
  auto a = MakeModel(SmallConfig(DType::kF16, 7));
  auto b = MakeModel(SmallConfig(DType::kF16, 7));
  auto c = MakeModel(SmallConfig(DType::kF16, 8));
  EXPECT_EQ(a->embedding(), b->embedding());
  EXPECT_EQ(a->layer(1).w_down, b->layer(1).w_down);
  EXPECT_NE(a->embedding(), c->embedding());
  EXPECT_NE(a->layer(0).wq, a->layer(1).wq);  // layers get their own streams
  EXPECT_EQ(a->embedding().size(), 64u * 48u);
  EXPECT_EQ(a->layer(0).wk.size(), 2u * 8u * 48u);
  // 64×48 + 48 + 2 × (2×48 + 2×32×48 + 2×16×48 + 3×96×48)
  EXPECT_EQ(SmallConfig().ParameterCount(), 3120u + 2u * (96u + 3072u + 1536u + 13824u));
}

TEST(ModelTest, ValidateNamesTheBadField) {
  ModelConfig c = SmallConfig();
  c.heads = 3;
  EXPECT_THAT(c.Validate(), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(c.Validate().message(), HasSubstr("kv_heads"));
  c = SmallConfig();
  c.head_dim = 7;
  EXPECT_THAT(c.Validate().message(), HasSubstr("head_dim"));
  c = SmallConfig();
  c.layers = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("layers"));
  c = SmallConfig();
  c.kv_dtype = DType::kI8;
  EXPECT_THAT(c.Validate().message(), HasSubstr("kv_dtype"));
  c = SmallConfig();
  c.hidden = 65536;
  c.ffn = 65536;
  c.vocab = 65536;
  EXPECT_THAT(c.Validate().message(), HasSubstr("weights"));
  EXPECT_THAT(Model::Create(c), StatusIs(StatusCode::kInvalidArgument));
}

TEST(EngineTest, ForwardIsDeterministic) {
  const std::vector<uint32_t> prompt = Tokens(40, 64, 1);
  auto m1 = MakeModel(SmallConfig());
  auto m2 = MakeModel(SmallConfig());
  const auto a = Reference(*m1, prompt, std::vector<uint32_t>{3, 9});
  const auto b = Reference(*m2, prompt, std::vector<uint32_t>{3, 9});
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(BitIdentical(a[i], b[i])) << i;
  EXPECT_EQ(a[0].size(), 64u);
  // The logits depend on the weights and on every token.
  auto m3 = MakeModel(SmallConfig(DType::kF16, 99));
  EXPECT_FALSE(BitIdentical(Reference(*m3, prompt)[0], a[0]));
  std::vector<uint32_t> other = prompt;
  other[0] = (other[0] + 1) % 64;
  EXPECT_FALSE(BitIdentical(Reference(*m1, other)[0], a[0]));
}

TEST(EngineTest, ChunkingAndDecodingChangeNoBits) {
  auto model = MakeModel(SmallConfig());
  const std::vector<uint32_t> prompt = Tokens(37, 64, 2);
  const auto want = Reference(*model, prompt)[0];
  const ModelLayout layout = model->config().KvLayout(kBlockTokens);
  for (uint32_t chunk : {1u, 5u, 8u, 256u}) {
    auto pool = NoCachePool(layout);
    EngineOptions eo;
    eo.prefill_chunk = chunk;
    auto engine = Engine::Create(model.get(), pool.get(), eo);
    ASSERT_THAT(engine, IsOk());
    auto r = (*engine)->Prefill(1, prompt);
    ASSERT_THAT(r, IsOk());
    EXPECT_TRUE(BitIdentical(r->logits, want)) << "chunk " << chunk;
  }
  // One token of prefill, then the rest decoded one at a time.
  auto pool = NoCachePool(layout);
  auto engine = Engine::Create(model.get(), pool.get());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT((*engine)->Prefill(1, std::span(prompt).first(1)), IsOk());
  std::vector<float> last;
  for (size_t i = 1; i < prompt.size(); ++i) {
    auto d = (*engine)->Decode(1, prompt[i]);
    ASSERT_THAT(d, IsOk());
    last = *d;
  }
  EXPECT_TRUE(BitIdentical(last, want));
  EXPECT_EQ(*pool->Length(1), prompt.size());
}

TEST(EngineTest, RejectsBadInputAndForeignLayouts) {
  auto model = MakeModel(SmallConfig());
  auto pool = NoCachePool(model->config().KvLayout(kBlockTokens));
  auto engine = Engine::Create(model.get(), pool.get());
  ASSERT_THAT(engine, IsOk());
  EXPECT_EQ((*engine)->block_tokens(), kBlockTokens);
  EXPECT_THAT((*engine)->Prefill(1, {}), StatusIs(StatusCode::kInvalidArgument));
  const std::vector<uint32_t> bad = {1, 2, 3, 64};
  auto r = (*engine)->Prefill(1, bad);
  EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(r.status().message(), HasSubstr("position 3"));
  EXPECT_FALSE(pool->HasSequence(1));
  EXPECT_THAT((*engine)->Decode(5, 1), StatusIs(StatusCode::kNotFound));
  EngineOptions zero;
  zero.prefill_chunk = 0;
  EXPECT_THAT(Engine::Create(model.get(), pool.get(), zero),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(Engine::Create(nullptr, pool.get()), StatusIs(StatusCode::kInvalidArgument));

  // Pools whose layout is not this model's attention layout.
  ModelConfig other = model->config();
  other.kv_heads = 1;
  auto p1 = NoCachePool(other.KvLayout(kBlockTokens));
  auto e1 = Engine::Create(model.get(), p1.get());
  EXPECT_THAT(e1, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(e1.status().message(), HasSubstr("F16[2, T, 8]"));
  other = model->config();
  other.kv_dtype = DType::kF32;
  auto p2 = NoCachePool(other.KvLayout(kBlockTokens));
  EXPECT_THAT(Engine::Create(model.get(), p2.get()), StatusIs(StatusCode::kInvalidArgument));
  other = model->config();
  other.layers = 3;
  auto p3 = NoCachePool(other.KvLayout(kBlockTokens));
  auto e3 = Engine::Create(model.get(), p3.get());
  EXPECT_THAT(e3, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(e3.status().message(), HasSubstr("layers"));
  other.layers = 1;
  auto p4 = NoCachePool(other.KvLayout(kBlockTokens));
  EXPECT_THAT(Engine::Create(model.get(), p4.get()), StatusIs(StatusCode::kInvalidArgument));
}

// Prompts A and B (engine_test_util.h), three tokens decoded after B.
class CachedPrefixTest : public PromptsTest<DType> {
 protected:
  CachedPrefixTest() : PromptsTest({5, 17, 33}) {}

  void SetUp() override {
    model_ = MakeModel(SmallConfig(GetParam()));
    layout_ = model_->config().KvLayout(kBlockTokens);
    want_b_ = Reference(*model_, p_.b, p_.decode);
    ASSERT_EQ(want_b_.size(), 4u);
  }
};

TEST_P(CachedPrefixTest, PoolHostAndDiskPrefixesGiveTheSameLogits) {
  auto stack = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(stack, IsOk());
  Stack& s = **stack;
  auto first = s.engine->Prefill(1, p_.a);
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(first->reused_tokens, 0u);
  EXPECT_TRUE(BitIdentical(first->logits, Reference(*model_, p_.a)[0]));
  // A's five full blocks went to the tiers as they filled.
  EXPECT_EQ(s.store->counters().stored_blocks, 5u);

  // 1. From the pool: A's blocks are shared.
  PrefillResult pool_hit = ServeB(s.engine.get(), 2);
  EXPECT_EQ(pool_hit.reused_tokens, 32u);
  EXPECT_EQ(pool_hit.computed_tokens, 15u);
  EXPECT_EQ(pool_hit.allocate.pool_blocks, 4u);
  EXPECT_EQ(pool_hit.allocate.tier_blocks, 0u);
  EXPECT_EQ(s.store->counters().loaded_host + s.store->counters().loaded_disk, 0u);

  // Serving B (47 tokens + 3 decoded) stored its blocks 5 and 6 too, so the
  // tiers hold all five full blocks of B's prompt.
  EXPECT_EQ(s.store->counters().stored_blocks, 7u);

  // 2. From the host tier: a second pool over the same cache has none of it.
  auto pool2 = BlockPool::Create(EnginePoolOptions(layout_, s.store.get()));
  ASSERT_THAT(pool2, IsOk());
  auto engine2 = Engine::Create(model_.get(), pool2->get());
  ASSERT_THAT(engine2, IsOk());
  PrefillResult host_hit = ServeB(engine2->get(), 3);
  EXPECT_EQ(host_hit.reused_tokens, 40u);
  EXPECT_EQ(host_hit.allocate.pool_blocks, 0u);
  EXPECT_EQ(host_hit.allocate.tier_blocks, 5u);
  EXPECT_EQ(s.store->counters().loaded_host, 5u);
  EXPECT_EQ(s.store->counters().loaded_disk, 0u);
  engine2->reset();
  pool2->reset();

  // 3. From the disk tier, after closing and reopening everything.
  ASSERT_THAT(s.Close(), IsOk());
  auto reopened = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(reopened, IsOk());
  Stack& r = **reopened;
  PrefillResult disk_hit = ServeB(r.engine.get(), 4);
  EXPECT_EQ(disk_hit.reused_tokens, 40u);
  EXPECT_EQ(disk_hit.allocate.tier_blocks, 5u);
  EXPECT_EQ(r.store->counters().loaded_disk, 5u);
  EXPECT_EQ(r.store->counters().loaded_host, 0u);
  EXPECT_EQ(r.store->counters().load_misses, 0u);
  EXPECT_EQ(r.cache->Stats().hits_disk, 5u);
}

TEST_P(CachedPrefixTest, ContinuingALiveSequenceGivesTheSameLogits) {
  auto stack = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(stack, IsOk());
  Stack& s = **stack;
  // The sequence first holds B's first 20 tokens plus others; asking for B
  // rolls it back to the common prefix and computes the rest.
  std::vector<uint32_t> start(p_.b.begin(), p_.b.begin() + 20);
  start.push_back((p_.b[20] + 1) % 64);
  ASSERT_THAT(s.engine->Prefill(9, start), IsOk());
  PrefillResult r = ServeB(s.engine.get(), 9);
  EXPECT_TRUE(r.continued);
  EXPECT_EQ(r.reused_tokens, 20u);
}

// A block damaged on disk after the restart: the restore reads it, the
// disk tier's verification turns it into a miss, the pool keeps the blocks
// before it, and the engine computes the rest: the same logits, bit for
// bit.
TEST_P(CachedPrefixTest, ABlockDamagedOnDiskIsRecomputedBitExact) {
  {
    auto stack = OpenStack(model_.get(), layout_, dir_.path());
    ASSERT_THAT(stack, IsOk());
    ServeB((*stack)->engine.get(), 1);
    ASSERT_THAT((*stack)->Close(), IsOk());
  }
  NamespaceOptions ns;
  ns.model_id = "engine-test";
  ns.layout_signature = layout_.Signature();
  ns.block_tokens = kBlockTokens;
  const std::vector<BlockKey> keys = KeyChain::Create(ns)->KeysFor(p_.b);
  ASSERT_GE(keys.size(), 5u);
  // Flip the last data byte of B's third block file.
  std::string victim;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir_.path())) {
    if (e.path().filename() == keys[2].Hex() + ".safetensors") victim = e.path().string();
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.get(c);
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(c ^ 0x40));
    ASSERT_TRUE(f.good());
  }

  auto reopened = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(reopened, IsOk());
  Stack& r = **reopened;
  PrefillResult hit = ServeB(r.engine.get(), 2);  // checks every logit
  EXPECT_EQ(hit.reused_tokens, 16u);  // blocks 0 and 1
  EXPECT_EQ(hit.computed_tokens, p_.b.size() - 16);
  EXPECT_EQ(hit.allocate.tier_blocks, 5u);  // promised by Match
  EXPECT_EQ(r.store->counters().load_misses, 1u);
  CacheStats cs = r.cache->Stats();
  EXPECT_EQ(cs.misses, 1u);
  EXPECT_EQ(cs.disk->quarantined, 1u);
  PoolStats ps = r.pool->GetStats();
  EXPECT_EQ(ps.loaded_blocks, 2u);
  EXPECT_EQ(ps.load_misses, 3u);
}

// The comparison means something: a changed cached byte changes the logits.
TEST_P(CachedPrefixTest, ADamagedCachedValueChangesTheLogits) {
  auto shared = BlockPool::Create(EnginePoolOptions(layout_));  // keeps freed blocks for reuse
  ASSERT_THAT(shared, IsOk());
  auto engine = Engine::Create(model_.get(), shared->get());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT((*engine)->Prefill(1, p_.a), IsOk());
  // Layer 0, K, head 0, position 0 of A's first block := 0.5 (+ its old value).
  auto table = (*shared)->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  auto slot = (*shared)->SlotAddress((*table)[0]);
  ASSERT_THAT(slot, IsOk());
  const SlotTensorGeometry g = (*shared)->TensorGeometry(0, 0);
  float v = 0;
  LoadFrom(g.dtype, *slot + g.offset, std::span<float>(&v, 1));
  const float changed[1] = {v + 0.5f};
  StoreAs(g.dtype, changed, *slot + g.offset);
  auto r = (*engine)->Prefill(2, p_.b);
  ASSERT_THAT(r, IsOk());
  EXPECT_EQ(r->reused_tokens, 32u);
  EXPECT_FALSE(BitIdentical(r->logits, want_b_[0]));
}

INSTANTIATE_TEST_SUITE_P(KvDTypes, CachedPrefixTest,
                         ::testing::Values(DType::kF16, DType::kBF16, DType::kF32),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(DTypeName(info.param));
                         });

}  // namespace
}  // namespace kvtier::engine
