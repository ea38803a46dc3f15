// The reference engine on hybrid models (full attention, sliding-window
// attention, gated linear attention) and on 8-bit quantized K/V: logits with
// a cached prefix (the pool's own, shared blocks, the host tier, the disk
// tier after a restart) bit for bit equal to logits computed with no cache,
// and restores that read only what the prefix needs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
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

constexpr uint32_t kWindow = 12;  // a sliding layer's window spans two or three blocks

enum class Kind { kHybrid, kQuantized, kQuantizedHybrid };

ModelConfig KindConfig(Kind kind) {
  ModelConfig c = SmallConfig();
  if (kind != Kind::kQuantized) {
    c.layers = 3;
    c.mixers = {MixerKind::kAttention, MixerKind::kSliding, MixerKind::kLinear};
    c.window = kWindow;
  }
  if (kind != Kind::kHybrid) {
    c.kv_bits = 8;
    c.kv_group = 4;  // two groups per 8-element head row
  }
  return c;
}

std::string KindName(Kind kind) {
  switch (kind) {
    case Kind::kHybrid:
      return "Hybrid";
    case Kind::kQuantized:
      return "Quantized";
    case Kind::kQuantizedHybrid:
      return "QuantizedHybrid";
  }
  return "";
}

TEST(HybridModelTest, LayoutHasEachLayerKind) {
  const ModelConfig c = HybridConfig();
  ASSERT_THAT(c.Validate(), IsOk());
  EXPECT_EQ(c.mixers.size(), 6u);
  const ModelLayout layout = c.KvLayout(16);
  ASSERT_THAT(layout.Validate(), IsOk());
  ASSERT_EQ(layout.layers.size(), 6u);
  EXPECT_EQ(layout.layers[0].cache_type, "attention");
  EXPECT_EQ(layout.layers[0].window, 0u);
  EXPECT_EQ(layout.layers[1].cache_type, "sliding_window");
  EXPECT_EQ(layout.layers[1].window, 48u);
  EXPECT_EQ(layout.layers[1].states[0].shape, (std::vector<uint64_t>{2, 16, 32}));
  const LayerSpec& linear = layout.layers[2];
  EXPECT_EQ(linear.cache_type, "linear_attention");
  EXPECT_TRUE(linear.IsRecurrent());
  ASSERT_EQ(linear.states.size(), 1u);
  EXPECT_EQ(linear.states[0].dtype, DType::kF32);
  EXPECT_EQ(linear.states[0].shape, (std::vector<uint64_t>{2, 32, 32}));
  // The recurrent state does not grow with the block.
  EXPECT_EQ(c.KvLayout(64).layers[2].states[0].ByteSize(), linear.states[0].ByteSize());
  // Plain attention keeps ModelLayout::Attention's layout (and signature).
  EXPECT_EQ(ModelConfig{}.KvLayout(16),
            ModelLayout::Attention("kvtier-demo-engine", 4, 2, 32, DType::kF16, 16));

  ModelConfig q = SmallConfig();
  q.kv_bits = 8;
  q.kv_group = 4;
  const ModelLayout ql = q.KvLayout(kBlockTokens);
  ASSERT_THAT(ql.Validate(), IsOk());
  ASSERT_EQ(ql.layers[0].states.size(), 6u);
  EXPECT_EQ(ql.layers[0].cache_type, "quantized_attention");
  EXPECT_EQ(ql.layers[0].states[0].dtype, DType::kU8);
  EXPECT_EQ(ql.layers[0].states[1].role, "key_scales");
  EXPECT_EQ(ql.layers[0].states[1].shape, (std::vector<uint64_t>{2, kBlockTokens, 2}));
  EXPECT_EQ(ql.layers[0].states[5].role, "value_biases");
  EXPECT_NE(ql.Signature(), SmallConfig().KvLayout(kBlockTokens).Signature());
  EXPECT_EQ(ql.layers[0].quantization, (Quantization{8, 4, "affine"}));
  EXPECT_THAT(ql.Signature(), HasSubstr("quant=affine,bits=8,group=4"));
  // Another group size with the same shapes in bytes is another signature.
  ModelConfig q2 = q;
  q2.kv_group = 2;
  EXPECT_NE(q2.KvLayout(kBlockTokens).Signature(), ql.Signature());
  EXPECT_THAT(layout.Signature(), HasSubstr("window=48"));
  // 2 layers × K and V × 2 heads × 8 tokens × (8 data + 2 scales × 2 + 2 biases × 2).
  EXPECT_EQ(ql.BlockBytes(), 2u * 2 * 2 * 8 * 16);
}

TEST(HybridModelTest, ValidateNamesTheBadField) {
  ModelConfig c = KindConfig(Kind::kHybrid);
  c.mixers.pop_back();
  EXPECT_THAT(c.Validate().message(), HasSubstr("mixers"));
  c = KindConfig(Kind::kHybrid);
  c.mixers.assign(3, MixerKind::kLinear);
  EXPECT_THAT(c.Validate().message(), HasSubstr("at least one layer"));
  c = KindConfig(Kind::kHybrid);
  c.window = 0;
  EXPECT_THAT(c.Validate().message(), HasSubstr("window"));
  c = KindConfig(Kind::kQuantized);
  c.kv_bits = 4;
  EXPECT_THAT(c.Validate().message(), HasSubstr("kv_bits"));
  c = KindConfig(Kind::kQuantized);
  c.kv_group = 3;
  EXPECT_THAT(c.Validate().message(), HasSubstr("kv_group"));
  EXPECT_THAT(Model::Create(c), StatusIs(StatusCode::kInvalidArgument));
}

TEST(HybridModelTest, EngineRefusesAnotherKindsPool) {
  auto hybrid = MakeModel(KindConfig(Kind::kHybrid));
  auto plain_pool = NoCachePool(SmallConfig().KvLayout(kBlockTokens));
  ModelConfig three = SmallConfig();
  three.layers = 3;
  auto three_pool = NoCachePool(three.KvLayout(kBlockTokens));
  auto e = Engine::Create(hybrid.get(), three_pool.get());
  EXPECT_THAT(e, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(e.status().message(), HasSubstr("layer 2 state 0"));
  auto quant = MakeModel(KindConfig(Kind::kQuantized));
  auto q = Engine::Create(quant.get(), plain_pool.get());
  EXPECT_THAT(q, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(q.status().message(), HasSubstr("U8[2, T, 8]"));
  auto hybrid_pool = NoCachePool(KindConfig(Kind::kHybrid).KvLayout(kBlockTokens));
  auto plain = MakeModel(three);
  EXPECT_THAT(Engine::Create(plain.get(), hybrid_pool.get()),
              StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(Engine::Create(hybrid.get(), hybrid_pool.get()), IsOk());
}

// One sliding layer: the logits after position p depend only on the tokens
// in its window (p − window, p], so prompts that differ only before it give
// the same bits, and one that differs inside it does not. Every per-token
// layer is sliding, so the pool also frees blocks that fall out of the
// window as the sequence grows; the engine never reads them.
TEST(HybridModelTest, ASlidingLayerSeesOnlyItsWindow) {
  ModelConfig c = SmallConfig();
  c.layers = 1;
  c.mixers = {MixerKind::kSliding};
  c.window = kWindow;
  auto model = MakeModel(c);
  std::vector<uint32_t> a = Tokens(40, 64, 5);
  std::vector<uint32_t> b = a, inside = a;
  b[0] = (b[0] + 1) % 64;
  b[40 - kWindow - 1] = (b[40 - kWindow - 1] + 7) % 64;    // just before the window
  inside[40 - kWindow] = (inside[40 - kWindow] + 7) % 64;  // its first token
  const auto want = Reference(*model, a)[0];
  EXPECT_TRUE(BitIdentical(Reference(*model, b)[0], want));
  EXPECT_FALSE(BitIdentical(Reference(*model, inside)[0], want));
  auto pool = NoCachePool(c.KvLayout(kBlockTokens));
  auto engine = Engine::Create(model.get(), pool.get());
  ASSERT_THAT(engine, IsOk());
  ASSERT_THAT((*engine)->Prefill(1, a), IsOk());
  EXPECT_GT(pool->GetStats().window_freed_blocks, 0u);
  std::vector<uint32_t> decode = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<uint32_t> all = a;
  for (uint32_t t : decode) {
    auto d = (*engine)->Decode(1, t);
    ASSERT_THAT(d, IsOk());
    all.push_back(t);
    EXPECT_TRUE(BitIdentical(*d, Reference(*model, all)[0])) << all.size();
  }
}

// Prompts A and B (engine_test_util.h), ten tokens decoded after B: to 57,
// past a block boundary, mid-block.
class HybridEngineTest : public PromptsTest<Kind> {
 protected:
  HybridEngineTest() : PromptsTest({5, 17, 33, 2, 60, 9, 41, 12, 7, 30}) {}

  void SetUp() override {
    model_ = MakeModel(KindConfig(GetParam()));
    ASSERT_NE(model_, nullptr);
    layout_ = model_->config().KvLayout(kBlockTokens);
    want_b_ = Reference(*model_, p_.b, p_.decode);
    ASSERT_EQ(want_b_.size(), p_.decode.size() + 1);
  }
};

// The no-cache reference itself does not depend on how the prompt is cut:
// chunks that end inside blocks resume the recurrent state from the pool's
// live copy and the window from the slots.
TEST_P(HybridEngineTest, ChunkingChangesNoBit) {
  for (uint32_t chunk : {1u, 5u, 8u, 13u}) {
    const auto got = Reference(*model_, p_.b, p_.decode, chunk);
    ASSERT_EQ(got.size(), want_b_.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(BitIdentical(got[i], want_b_[i])) << "chunk " << chunk << " step " << i;
    }
  }
  // And the model is not trivially ignoring its cache: another prompt
  // differs.
  EXPECT_FALSE(BitIdentical(Reference(*model_, p_.a)[0], want_b_[0]));
}

TEST_P(HybridEngineTest, PoolHostAndDiskPrefixesGiveTheSameLogits) {
  auto stack = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(stack, IsOk());
  Stack& s = **stack;
  auto first = s.engine->Prefill(1, p_.a);
  ASSERT_THAT(first, IsOk());
  EXPECT_TRUE(BitIdentical(first->logits, Reference(*model_, p_.a)[0]));
  EXPECT_EQ(s.store->counters().stored_blocks, 5u);

  // 1. From the pool: A's blocks are shared, the recurrent state resumes
  // from block 4's snapshot.
  PrefillResult pool_hit = ServeB(s.engine.get(), 2);
  EXPECT_EQ(pool_hit.reused_tokens, 32u);
  EXPECT_EQ(pool_hit.allocate.pool_blocks, 4u);

  // 2. From the host tier, into a second pool over the same cache: only
  // what the 40-token prefix needs is asked for.
  auto pool2 = BlockPool::Create(EnginePoolOptions(layout_, s.store.get()));
  ASSERT_THAT(pool2, IsOk());
  auto engine2 = Engine::Create(model_.get(), pool2->get());
  ASSERT_THAT(engine2, IsOk());
  PrefillResult host_hit = ServeB(engine2->get(), 3);
  EXPECT_EQ(host_hit.reused_tokens, 40u);
  EXPECT_EQ(host_hit.allocate.tier_blocks, 5u);
  EXPECT_EQ(s.store->counters().loaded_host, 5u);
  uint64_t needed = 0;
  for (uint32_t l = 0; l < layout_.layers.size(); ++l) {
    uint64_t layer_bytes = 0;
    for (const TensorSpec& t : layout_.layers[l].states) layer_bytes += t.ByteSize();
    switch (model_->config().mixer(l)) {
      case MixerKind::kAttention:
        needed += 5 * layer_bytes;  // every block
        break;
      case MixerKind::kSliding:
        needed += 2 * layer_bytes;  // blocks 3 and 4 overlap [28, 40)
        break;
      case MixerKind::kLinear:
        needed += layer_bytes;  // block 4's state alone
        break;
    }
  }
  EXPECT_EQ((*pool2)->GetStats().load_tensor_bytes, needed);
  if (GetParam() != Kind::kQuantized) {
    EXPECT_LT(needed, 5 * layout_.BlockBytes());
  }
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
  EXPECT_EQ(r.store->counters().load_misses, 0u);
}

// A live sequence asked for a prompt that leaves it mid-block: a hybrid
// model's pool resumes it from the last block boundary with a snapshot.
TEST_P(HybridEngineTest, ContinuingALiveSequenceGivesTheSameLogits) {
  auto stack = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(stack, IsOk());
  Stack& s = **stack;
  std::vector<uint32_t> start(p_.b.begin(), p_.b.begin() + 20);
  start.push_back((p_.b[20] + 1) % 64);
  ASSERT_THAT(s.engine->Prefill(9, start), IsOk());
  PrefillResult r = ServeB(s.engine.get(), 9);
  EXPECT_EQ(r.reused_tokens, GetParam() == Kind::kQuantized ? 20u : 16u);
  // Decoding on, then asking again for the whole conversation: the live
  // sequence extends without recomputing.
  std::vector<uint32_t> longer = p_.b;
  longer.insert(longer.end(), p_.decode.begin(), p_.decode.end());
  longer.push_back(3);
  auto again = s.engine->Prefill(9, longer);
  ASSERT_THAT(again, IsOk());
  EXPECT_TRUE(again->continued);
  EXPECT_EQ(again->reused_tokens, longer.size() - 1);
  EXPECT_TRUE(BitIdentical(again->logits, Reference(*model_, longer)[0]));
}

// An evicted sequence comes back (its full blocks from the tiers, its
// partial last block and recurrent state from host memory) bit-exact.
TEST_P(HybridEngineTest, AnEvictedSequenceResumesBitExact) {
  auto stack = OpenStack(model_.get(), layout_, dir_.path());
  ASSERT_THAT(stack, IsOk());
  Stack& s = **stack;
  ServeB(s.engine.get(), 1);
  ASSERT_THAT(s.pool->Evict(1), IsOk());
  EXPECT_FALSE(s.pool->HasSequence(1));
  std::vector<uint32_t> longer = p_.b;
  longer.insert(longer.end(), p_.decode.begin(), p_.decode.end());
  longer.push_back(3);
  auto r = s.engine->Prefill(1, longer);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->allocate.restored);
  EXPECT_GT(r->reused_tokens, 0u);
  EXPECT_TRUE(BitIdentical(r->logits, Reference(*model_, longer)[0]));
}

INSTANTIATE_TEST_SUITE_P(Kinds, HybridEngineTest,
                         ::testing::Values(Kind::kHybrid, Kind::kQuantized, Kind::kQuantizedHybrid),
                         [](const ::testing::TestParamInfo<Kind>& info) {
                           return KindName(info.param);
                         });

}  // namespace
}  // namespace kvtier::engine
