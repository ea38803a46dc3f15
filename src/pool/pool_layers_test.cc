// BlockPool and DensePool with every layer kind (issue 21): full attention
// with the token axis anywhere and quantized K/V (scales and biases as more
// per-token states), sliding windows, recurrent layers. Recurrent states,
// their per-block snapshots, rollback, sharing and copy on write; restores
// that ask the store for exactly the tensors a prefix needs (a counting
// store checks the masks and bytes, and poisons what it was not asked for);
// sliding-window blocks freed as a sequence grows.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "testing/map_backing_store.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::Commit;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestOptions;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr uint32_t kT = 4;  // block_tokens
constexpr uint32_t kWindow = 6;

TensorSpec Tensor(std::string role, DType dtype, std::vector<uint64_t> shape, int32_t token_dim) {
  return TensorSpec{std::move(role), dtype, std::move(shape), token_dim};
}

LayerSpec Attention(uint32_t window = 0) {
  LayerSpec l;
  l.cache_type = window == 0 ? "attention" : "sliding_window";
  l.states = {Tensor("keys", DType::kF16, {2, kT, 4}, 1),
              Tensor("values", DType::kF16, {2, kT, 4}, 1)};
  l.window = window;
  return l;
}

// Tensors in file order (for the expected masks below):
//   L0 full attention, [2, T, 4] K and V          tensors 0, 1
//   L1 sliding window 6                           tensors 2, 3
//   L2 recurrent: conv F32 [3, 8], ssm F32 [2,4,4] tensors 4, 5
//   L3 quantized K/V: packed U32 [2,T,2] with F16 scales and biases [2,T,1]
//                                                  tensors 6..11
//   L4 full attention, token axis first: [T, 2, 4] tensors 12, 13
ModelLayout HybridLayout() {
  ModelLayout m;
  m.name = "hybrid-test";
  m.block_tokens = kT;
  m.layers.push_back(Attention());
  m.layers.push_back(Attention(kWindow));
  LayerSpec rec;
  rec.cache_type = "mamba";
  rec.states = {Tensor("conv", DType::kF32, {3, 8}, -1), Tensor("ssm", DType::kF32, {2, 4, 4}, -1)};
  m.layers.push_back(rec);
  LayerSpec q;
  q.cache_type = "quantized_attention";
  q.meta_state = {"bits=4", "group_size=8"};
  for (const char* kv : {"keys", "values"}) {
    q.states.push_back(Tensor(kv, DType::kU32, {2, kT, 2}, 1));
    q.states.push_back(Tensor(std::string(kv) + "_scales", DType::kF16, {2, kT, 1}, 1));
    q.states.push_back(Tensor(std::string(kv) + "_biases", DType::kF16, {2, kT, 1}, 1));
  }
  m.layers.push_back(q);
  LayerSpec seq_first;
  seq_first.states = {Tensor("keys", DType::kF16, {kT, 2, 4}, 0),
                      Tensor("values", DType::kF16, {kT, 2, 4}, 0)};
  m.layers.push_back(seq_first);
  return m;
}

// Every per-token layer sliding (windows 6 and 8): blocks can be freed.
ModelLayout SlidingLayout() {
  ModelLayout m;
  m.name = "sliding-test";
  m.block_tokens = kT;
  m.layers.push_back(Attention(kWindow));
  m.layers.push_back(Attention(8));
  return m;
}

std::vector<uint32_t> LayersIota(size_t n, uint32_t start = 100) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// A store that records what the pool asks for, and hands out blocks whose
// unselected tensors are poisoned (0xAB), so a pool that copied them would
// show it.
class CountingStore final : public BlockBackingStore {
 public:
  explicit CountingStore(const ModelLayout& layout) : layout_(layout) {}
  size_t Match(std::span<const BlockKey> keys) override { return inner_.Match(keys); }
  Status Store(const BlockKey& key, SharedBlock block) override {
    return inner_.Store(key, std::move(block));
  }
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override {
    ++whole_loads_;
    inner_.Load(keys, std::move(on_block));
  }
  void LoadTensors(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                   BlockArrivalCallback on_block) override {
    requested_keys_.insert(requested_keys_.end(), keys.begin(), keys.end());
    for (size_t i = 0; i < keys.size(); ++i) {
      masks_.push_back(masks.empty() ? TensorMask{} : masks[i]);
    }
    for (size_t i = 0; i < keys.size(); ++i) {
      SharedBlock file = inner_.Get(keys[i]);
      if (file == nullptr) {
        on_block(i, nullptr);
        continue;
      }
      const TensorMask mask = masks.empty() ? TensorMask{} : masks[i];
      // A store verifies what it hands out (here the whole file).
      DecodeOptions opts;
      opts.expected_key = &keys[i];
      auto decoded = DecodeBlock(file->span(), opts);
      if (!decoded.ok()) {
        on_block(i, nullptr);
        continue;
      }
      auto copy = BlockBuffer::Allocate(file->size());
      std::memcpy(copy->data(), file->data(), file->size());
      const size_t data_at = file->size() - decoded->data.size();
      uint64_t off = 0;
      size_t tensor = 0;
      for (const LayerSpec& l : layout_.layers) {
        for (const TensorSpec& s : l.states) {
          if (!mask.empty() && !mask[tensor]) {
            std::memset(copy->data() + data_at + off, 0xAB, s.ByteSize());
          } else {
            requested_bytes_ += s.ByteSize();
          }
          off += s.ByteSize();
          ++tensor;
        }
      }
      on_block(i, SharedBlock(std::make_shared<const BlockBuffer>(*std::move(copy))));
    }
  }

  MapBackingStore& inner() { return inner_; }
  const std::vector<BlockKey>& requested_keys() const { return requested_keys_; }
  const std::vector<TensorMask>& masks() const { return masks_; }
  uint64_t requested_bytes() const { return requested_bytes_; }
  int whole_loads() const { return whole_loads_; }

 private:
  ModelLayout layout_;
  MapBackingStore inner_;
  // Loads run on the test's thread (MapBackingStore delivers inline).
  std::vector<BlockKey> requested_keys_;
  std::vector<TensorMask> masks_;
  uint64_t requested_bytes_ = 0;
  int whole_loads_ = 0;
};

class PoolLayersTest : public ::testing::Test {
 protected:
  std::unique_ptr<BlockPool> Make(const ModelLayout& layout, BlockBackingStore* store = nullptr,
                                  uint32_t total_blocks = 32) {
    PoolOptions o = TestOptions(layout, total_blocks);
    o.store = store;
    auto pool = BlockPool::Create(o);
    EXPECT_THAT(pool, IsOk());
    return pool.ok() ? std::move(pool).value() : nullptr;
  }

  std::vector<BlockKey> Keys(const ModelLayout& layout, std::span<const uint32_t> tokens) {
    NamespaceOptions ns;
    ns.model_id = "pool-test-model";
    ns.layout_signature = layout.Signature();
    ns.block_tokens = layout.block_tokens;
    return KeyChain::Create(ns)->KeysFor(tokens);
  }

  static uint64_t Bytes(const ModelLayout& layout, std::initializer_list<size_t> tensors) {
    std::vector<uint64_t> sizes;
    for (const LayerSpec& l : layout.layers) {
      for (const TensorSpec& s : l.states) sizes.push_back(s.ByteSize());
    }
    uint64_t n = 0;
    for (size_t i : tensors) n += sizes[i];
    return n;
  }

  ModelLayout hybrid_ = HybridLayout();
  KvOracle kv_{hybrid_};
};

TEST_F(PoolLayersTest, CreateAcceptsEveryLayerKind) {
  EXPECT_THAT(BlockPool::Create(TestOptions(hybrid_, 8)), IsOk());
  EXPECT_THAT(BlockPool::Create(TestOptions(SlidingLayout(), 8)), IsOk());
  // The dense pool takes per-token layers of any shape and windows, but no
  // recurrent layer.
  EXPECT_THAT(DensePool::Create(pool_testing::TestDenseOptions(SlidingLayout())), IsOk());
  ModelLayout no_rec = hybrid_;
  no_rec.layers.erase(no_rec.layers.begin() + 2);
  EXPECT_THAT(DensePool::Create(pool_testing::TestDenseOptions(no_rec)), IsOk());
  EXPECT_THAT(DensePool::Create(pool_testing::TestDenseOptions(hybrid_)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("layout.layers[2] is recurrent: the dense pool")));
  ModelLayout bad = hybrid_;
  bad.layers[2].window = 8;
  // The layout's own validation refuses it first (layout.h), naming the layer.
  EXPECT_THAT(BlockPool::Create(TestOptions(bad, 8)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("layers[2].window needs a per-token state")));
}

TEST_F(PoolLayersTest, GeometryFollowsTheTokenAxis) {
  auto pool = Make(hybrid_);
  // [T, 2, 4] F16, token axis first: one "head", rows of 2 × 4 elements.
  const SlotTensorGeometry g = pool->TensorGeometry(4, 0);
  EXPECT_EQ(g.a, 1u);
  EXPECT_EQ(g.b, 8u);
  EXPECT_EQ(g.bytes, kT * 8u * 2u);
  // A recurrent state: its bytes, after the layers before it.
  const SlotTensorGeometry r = pool->TensorGeometry(2, 1);
  EXPECT_EQ(r.bytes, 2u * 4u * 4u * 4u);
  EXPECT_EQ(r.offset, 4u * (2 * kT * 4 * 2) + 3u * 8u * 4u);
}

TEST_F(PoolLayersTest, EveryAppendModeRoundTripsAHybridLayout) {
  for (AppendMode mode : {AppendMode::kToken, AppendMode::kHeadRange, AppendMode::kLayer}) {
    auto pool = Make(hybrid_);
    const std::vector<uint32_t> tokens = LayersIota(11);
    ASSERT_THAT(pool->Allocate(1, tokens), IsOk());
    ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 0, 6, mode), IsOk());
    ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 6, 11, mode), IsOk());
    EXPECT_TRUE(kv_.Check(pool.get(), 1, tokens));
    // Full blocks hold every layer, the recurrent one as its snapshot.
    auto table = pool->BlockTable(1);
    ASSERT_THAT(table, IsOk());
    ASSERT_EQ(table->size(), 3u);
    EXPECT_TRUE(kv_.CheckSlot(pool.get(), (*table)[0], tokens, 0));
    EXPECT_TRUE(kv_.CheckSlot(pool.get(), (*table)[1], tokens, 1));
  }
}

TEST_F(PoolLayersTest, RecurrentLayersTakeStatesNotAppends) {
  auto pool = Make(hybrid_);
  const std::vector<uint32_t> tokens = LayersIota(9);
  ASSERT_THAT(pool->Allocate(1, tokens), IsOk());
  std::vector<std::byte> row(3 * 8 * 4);
  std::vector<std::span<const std::byte>> one = {row, row};
  EXPECT_THAT(pool->AppendToken(1, 2, 0, one),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("goes through SetRecurrentState")));
  EXPECT_THAT(pool->SetRecurrentState(1, 0, 1, one),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("is not recurrent")));
  std::vector<std::byte> conv(3 * 8 * 4), ssm(2 * 4 * 4 * 4), small(8);
  std::vector<std::span<const std::byte>> good = {conv, ssm}, bad = {conv, small};
  EXPECT_THAT(pool->SetRecurrentState(1, 2, 1, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("a recurrent state is 128 bytes")));
  EXPECT_THAT(pool->SetRecurrentState(1, 2, 0, good),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("is committed")));
  EXPECT_THAT(pool->PackedLayer(1, 2), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(pool->RecurrentState(1, 2), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool->RecurrentState(1, 1), StatusIs(StatusCode::kInvalidArgument));

  // Per-token K/V for 6 tokens, no state yet.
  KvOracle no_states(hybrid_);
  no_states.write_recurrent = false;
  ASSERT_THAT(no_states.Write(pool.get(), 1, tokens, 0, 6, AppendMode::kLayer, Commit::kWriteOnly),
              IsOk());
  ASSERT_THAT(kv_.SetState(pool.get(), 1, tokens, 5, 2), IsOk());
  std::span<const uint32_t> six(tokens.data(), 6);
  EXPECT_THAT(pool->Advance(1, six), StatusIs(StatusCode::kFailedPrecondition,
                                              HasSubstr("needs the recurrent state after them")));
  ASSERT_THAT(kv_.SetState(pool.get(), 1, tokens, 6, 2), IsOk());
  EXPECT_THAT(pool->Advance(1, six),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("block 0 fills, but no recurrent state after its last token")));
  ASSERT_THAT(kv_.SetState(pool.get(), 1, tokens, 4, 2), IsOk());
  ASSERT_THAT(kv_.SetState(pool.get(), 1, tokens, 6, 2), IsOk());
  ASSERT_THAT(pool->Advance(1, six), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, six));
  // A pending state is the latest until committed or rolled back.
  ASSERT_THAT(kv_.SetState(pool.get(), 1, tokens, 7, 2), IsOk());
  auto pending = pool->RecurrentState(1, 2);
  ASSERT_THAT(pending, IsOk());
  EXPECT_EQ((*pending)->length, 7u);
  ASSERT_THAT(pool->Rollback(1, 6), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, six));
}

TEST_F(PoolLayersTest, RecurrentRollbackGoesToSnapshotsOnly) {
  auto pool = Make(hybrid_);
  const std::vector<uint32_t> tokens = LayersIota(14);
  ASSERT_THAT(pool->Allocate(1, tokens), IsOk());
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 0, 14, AppendMode::kLayer), IsOk());
  EXPECT_THAT(pool->Rollback(1, 10),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("a recurrent layer's state is kept only after each full block")));
  ASSERT_THAT(pool->Rollback(1, 8), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(8)));
  // Resumed from the snapshot: the same states as without the rollback.
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 8, 14, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, tokens));
  ASSERT_THAT(pool->Rollback(1, 0), IsOk());
  EXPECT_THAT(pool->RecurrentState(1, 2), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_F(PoolLayersTest, RecurrentPrefixSharingAndCopyOnWrite) {
  auto pool = Make(hybrid_);
  const std::vector<uint32_t> a = LayersIota(14);
  ASSERT_THAT(pool->Allocate(1, a), IsOk());
  ASSERT_THAT(kv_.Write(pool.get(), 1, a, 0, 14, AppendMode::kLayer), IsOk());
  // b shares 10 tokens with a: only whole blocks with a snapshot are
  // reused, so 8 (not 10, as for an attention-only layout).
  std::vector<uint32_t> b = a;
  b[10] = 7;
  auto m = pool->Allocate(2, b);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 8u);
  auto ta = pool->BlockTable(1), tb = pool->BlockTable(2);
  ASSERT_THAT(tb, IsOk());
  EXPECT_THAT(*tb, ElementsAre((*ta)[0], (*ta)[1]));
  EXPECT_EQ(pool->RefCount((*ta)[1]), 2u);
  EXPECT_TRUE(kv_.Check(pool.get(), 2, std::span<const uint32_t>(b).first(8)));
  ASSERT_THAT(kv_.Write(pool.get(), 2, b, 8, 14, AppendMode::kLayer), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 2, b));
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));  // a's states untouched
  EXPECT_TRUE(kv_.CheckSlot(pool.get(), (*ta)[1], a, 1));
  // A recurrent layout never writes a shared block: sequences share whole
  // blocks and resume after them, so every later state goes into a block
  // of their own. Copy on write does not arise.
  EXPECT_EQ(pool->GetStats().copy_on_write_blocks, 0u);

  // A live sequence rolled back to 9 by Allocate: to 8, its snapshot. Its
  // partial block 2 is then its own: b's state after 12 goes into a fresh
  // slot, not into a's.
  std::vector<uint32_t> c = a;
  c[9] = 3;
  m = pool->Allocate(1, c);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 8u);
  ASSERT_THAT(kv_.Write(pool.get(), 1, c, 8, 13, AppendMode::kLayer), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span<const uint32_t>(c).first(13)));
  EXPECT_TRUE(kv_.Check(pool.get(), 2, b));
  EXPECT_TRUE(kv_.CheckSlot(pool.get(), (*ta)[1], a, 1));
  EXPECT_EQ(pool->GetStats().copy_on_write_blocks, 0u);
}

TEST_F(PoolLayersTest, RestoreAsksForExactlyTheTensorsThePrefixNeeds) {
  CountingStore store(hybrid_);
  const std::vector<uint32_t> tokens = LayersIota(25);  // 6 full blocks + 1
  {
    auto writer = Make(hybrid_, &store);
    ASSERT_THAT(writer->Allocate(1, tokens), IsOk());
    ASSERT_THAT(kv_.Write(writer.get(), 1, tokens, 0, 24, AppendMode::kLayer), IsOk());
  }
  ASSERT_EQ(store.inner().size(), 6u);
  auto pool = Make(hybrid_, &store);
  auto m = pool->Allocate(1, tokens);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 24u);
  EXPECT_EQ(store.whole_loads(), 0);
  const std::vector<BlockKey> keys = Keys(hybrid_, tokens);
  EXPECT_EQ(store.requested_keys(), std::vector<BlockKey>(keys.begin(), keys.begin() + 6));
  // Full attention (0, 1, 6..13) in all 6; the window [18, 24) overlaps
  // blocks 4 and 5 (2, 3); the recurrent state (4, 5) of block 5 only,
  // which therefore is the only block asked for whole (empty mask).
  const TensorMask early = {true, true, false, false, false, false, true,
                            true, true, true,  true,  true,  true,  true};
  const TensorMask window = {true, true, true, true, false, false, true,
                             true, true, true, true, true,  true,  true};
  EXPECT_EQ(store.masks(),
            (std::vector<TensorMask>{early, early, early, early, window, TensorMask{}}));
  const uint64_t full_attn = Bytes(hybrid_, {0, 1, 6, 7, 8, 9, 10, 11, 12, 13});
  const uint64_t want = 6 * full_attn + 2 * Bytes(hybrid_, {2, 3}) + Bytes(hybrid_, {4, 5});
  EXPECT_EQ(store.requested_bytes(), want);
  const PoolStats st = pool->GetStats();
  EXPECT_EQ(st.load_tensor_bytes, want);
  EXPECT_EQ(st.loaded_blocks, 6u);
  EXPECT_LT(want, 6 * hybrid_.BlockBytes());

  // The pool copied what it asked for and nothing else: no slot holds the
  // store's poison where it was not asked.
  auto table = pool->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  for (size_t b = 0; b < 4; ++b) {
    auto base = pool->SlotAddress((*table)[b]);
    ASSERT_THAT(base, IsOk());
    for (uint32_t l : {1u, 2u}) {
      for (uint32_t k = 0; k < 2; ++k) {
        const SlotTensorGeometry g = pool->TensorGeometry(l, k);
        std::vector<std::byte> poison(g.bytes, std::byte{0xAB});
        EXPECT_NE(std::memcmp(*base + g.offset, poison.data(), g.bytes), 0)
            << "block " << b << " layer " << l << " state " << k;
      }
    }
  }
  // What it holds is right, and it resumes from block 5's snapshot.
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(24)));
  EXPECT_TRUE(kv_.CheckSlot(pool.get(), (*table)[5], tokens, 5));
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 24, 25, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, tokens));

  // It cannot roll back where it holds no snapshot or no window.
  EXPECT_THAT(pool->Rollback(1, 20), StatusIs(StatusCode::kFailedPrecondition,
                                              HasSubstr("block 3 was restored without tensor 2")));
  ASSERT_THAT(pool->Rollback(1, 24), IsOk());
  // Blocks restored in part are not offered to other sequences (block 0
  // is not in the index, so no block is shared): a second one loads its own.
  auto m2 = pool->Allocate(2, tokens);
  ASSERT_THAT(m2, IsOk());
  EXPECT_EQ(*m2, 24u);
  EXPECT_EQ(pool->GetStats().prefix_hit_blocks_pool, 0u);
  EXPECT_TRUE(kv_.Check(pool.get(), 2, std::span<const uint32_t>(tokens).first(24)));
}

TEST_F(PoolLayersTest, AShorterPrefixMovesTheWindowAndTheSnapshot) {
  CountingStore store(hybrid_);
  const std::vector<uint32_t> tokens = LayersIota(25);
  {
    auto writer = Make(hybrid_, &store);
    ASSERT_THAT(writer->Allocate(1, tokens), IsOk());
    ASSERT_THAT(kv_.Write(writer.get(), 1, tokens, 0, 24, AppendMode::kLayer), IsOk());
  }
  auto pool = Make(hybrid_, &store);
  // 10 tokens: a prefix of 2 whole blocks (a recurrent layout resumes at a
  // snapshot), window [2, 8) over both.
  auto m = pool->Allocate(1, std::span<const uint32_t>(tokens).first(11));
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 8u);
  const TensorMask no_rec = {true, true, true, true, false, false, true,
                             true, true, true, true, true,  true,  true};
  EXPECT_EQ(store.masks(), (std::vector<TensorMask>{no_rec, TensorMask{}}));
}

// A load that falls short keeps only a prefix it can resume: blocks 0..2
// landed without their snapshots (only block 5's was asked for), so none.
TEST_F(PoolLayersTest, AShortLoadKeepsOnlyAResumablePrefix) {
  CountingStore store(hybrid_);
  const std::vector<uint32_t> tokens = LayersIota(25);
  {
    auto writer = Make(hybrid_, &store);
    ASSERT_THAT(writer->Allocate(1, tokens), IsOk());
    ASSERT_THAT(kv_.Write(writer.get(), 1, tokens, 0, 24, AppendMode::kLayer), IsOk());
  }
  const std::vector<BlockKey> keys = Keys(hybrid_, tokens);
  store.inner().Corrupt(keys[3]);  // verified by the store: a miss
  auto pool = Make(hybrid_, &store);
  const size_t free0 = pool->FreeCount();
  auto m = pool->Allocate(1, tokens);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 0u);
  const PoolStats st = pool->GetStats();
  EXPECT_EQ(st.load_misses, 3u);
  EXPECT_EQ(st.loaded_blocks, 3u);
  EXPECT_EQ(pool->FreeCount(), free0);  // nothing of it kept
  auto table = pool->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  EXPECT_TRUE(table->empty());
  // It starts over and fills normally.
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 0, 25, AppendMode::kLayer), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, tokens));
}

TEST_F(PoolLayersTest, SlidingBlocksOutOfEveryWindowAreFreed) {
  const ModelLayout layout = SlidingLayout();
  KvOracle kv(layout);
  auto pool = Make(layout, nullptr, 16);
  const std::vector<uint32_t> tokens = LayersIota(41);
  ASSERT_THAT(pool->Allocate(1, tokens), IsOk());
  const size_t free0 = pool->FreeCount();
  for (size_t p = 0; p < 40; p += 5) {
    ASSERT_THAT(kv.Write(pool.get(), 1, tokens, p, p + 5, AppendMode::kLayer), IsOk());
  }
  // Windows 6 and 8 at length 40: [32, 40) and [34, 40); blocks 0..7 end
  // at or before 32.
  auto table = pool->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  ASSERT_EQ(table->size(), 10u);
  for (size_t b = 0; b < 8; ++b) EXPECT_EQ((*table)[b], kFreedSlot) << b;
  EXPECT_NE((*table)[8], kFreedSlot);
  EXPECT_EQ(pool->GetStats().window_freed_blocks, 8u);
  EXPECT_EQ(pool->FreeCount(), free0 - 2);
  EXPECT_TRUE(kv.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(40)));
  // Rolling back needs an earlier window, which is gone.
  EXPECT_THAT(pool->Rollback(1, 36),
              StatusIs(StatusCode::kFailedPrecondition,
                       HasSubstr("block 7 fell out of the sliding window and was freed")));
  ASSERT_THAT(pool->Rollback(1, 40), IsOk());
  // A live sequence asked for less than it holds starts again from the
  // pool's index, which keeps the freed blocks cached while their slots last.
  auto m = pool->Allocate(1, std::span<const uint32_t>(tokens).first(37));
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 36u);
  EXPECT_EQ(pool->GetStats().prefix_hit_blocks_pool, 9u);
  EXPECT_EQ(pool->GetStats().window_freed_blocks, 8u + 7u);  // blocks 0..6 at 36
  EXPECT_TRUE(kv.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(36)));
  // A pool of 16 slots holds a sequence far longer than 16 blocks.
  const std::vector<uint32_t> longer = LayersIota(201, 5000);
  ASSERT_THAT(pool->Allocate(2, longer), IsOk());
  for (size_t p = 0; p < 200; p += 8) {
    ASSERT_THAT(kv.Write(pool.get(), 2, longer, p, p + 8, AppendMode::kLayer), IsOk());
  }
  EXPECT_TRUE(kv.Check(pool.get(), 2, std::span<const uint32_t>(longer).first(200)));
}

TEST_F(PoolLayersTest, SlidingRestoreSkipsBlocksOutOfTheWindow) {
  const ModelLayout layout = SlidingLayout();
  KvOracle kv(layout);
  CountingStore store(layout);
  const std::vector<uint32_t> tokens = LayersIota(41);
  {
    auto writer = Make(layout, &store);
    ASSERT_THAT(writer->Allocate(1, tokens), IsOk());
    ASSERT_THAT(kv.Write(writer.get(), 1, tokens, 0, 40, AppendMode::kLayer), IsOk());
  }
  ASSERT_EQ(store.inner().size(), 10u);
  auto pool = Make(layout, &store);
  auto m = pool->Allocate(1, tokens);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 40u);
  // Windows end at 40: [32, 40) needs blocks 8 and 9 of layer 1, [34, 40)
  // blocks 8 and 9 of layer 0. Nothing of blocks 0..7 is asked for.
  const std::vector<BlockKey> keys = Keys(layout, tokens);
  EXPECT_EQ(store.requested_keys(), std::vector<BlockKey>(keys.begin() + 8, keys.begin() + 10));
  EXPECT_EQ(store.masks(), (std::vector<TensorMask>{TensorMask{}, TensorMask{}}));
  EXPECT_EQ(store.requested_bytes(), 2 * layout.BlockBytes());
  EXPECT_EQ(pool->GetStats().load_tensor_bytes, 2 * layout.BlockBytes());
  auto table = pool->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  for (size_t b = 0; b < 8; ++b) EXPECT_EQ((*table)[b], kFreedSlot) << b;
  EXPECT_TRUE(kv.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(40)));
  ASSERT_THAT(kv.Write(pool.get(), 1, tokens, 40, 41, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv.Check(pool.get(), 1, tokens));
}

TEST_F(PoolLayersTest, EvictedHybridSequencesComeBack) {
  CountingStore store(hybrid_);
  auto pool = Make(hybrid_, &store);
  const std::vector<uint32_t> tokens = LayersIota(15);
  ASSERT_THAT(pool->Allocate(1, tokens), IsOk());
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 0, 14, AppendMode::kLayer), IsOk());
  ASSERT_THAT(pool->Evict(1), IsOk());
  // Its blocks are still cached in the pool; the partial block (with the
  // live state after 14) comes back from host memory.
  auto m = pool->Allocate(1, tokens);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, 14u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span<const uint32_t>(tokens).first(14)));
  ASSERT_THAT(kv_.Write(pool.get(), 1, tokens, 14, 15, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, tokens));
}

TEST_F(PoolLayersTest, DensePoolRoundTripsTokenAxesAnywhere) {
  ModelLayout layout = hybrid_;
  layout.layers.erase(layout.layers.begin() + 2);  // no recurrent layer
  KvOracle kv(layout);
  auto pool = DensePool::Create(pool_testing::TestDenseOptions(layout));
  ASSERT_THAT(pool, IsOk());
  const std::vector<uint32_t> tokens = LayersIota(9);
  ASSERT_THAT((*pool)->Allocate(1, tokens), IsOk());
  ASSERT_THAT(kv.Write(pool->get(), 1, tokens, 0, 9, AppendMode::kHeadRange), IsOk());
  EXPECT_TRUE(kv.Check(pool->get(), 1, tokens));
}

}  // namespace
}  // namespace kvtier
