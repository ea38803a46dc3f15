// BlockPool in paged mode without lower tiers: appends, views, prefix
// sharing, copy on write, rollback, eviction order, offload to host memory.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <set>
#include <vector>

#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::Commit;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestLayout;
using ::kvtier::pool_testing::TestOptions;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// T = 4 tokens per block; 2 layers × (K, V) × [2 heads, 4, 4] F16 = 256 bytes.
constexpr uint64_t kBlockBytes = 256;

std::vector<uint32_t> PagedIota(size_t n, uint32_t start = 100) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

class PagedPoolTest : public ::testing::Test {
 protected:
  void Make(uint32_t total_blocks, EvictionPolicy eviction = EvictionPolicy::kLru,
            bool retain = true) {
    PoolOptions o = TestOptions(layout_, total_blocks);
    o.eviction = eviction;
    o.retain_freed_blocks = retain;
    auto pool = BlockPool::Create(o);
    ASSERT_THAT(pool, IsOk());
    pool_ = std::move(pool).value();
  }
  // Allocates `seq` for `tokens` and writes/commits whatever did not match.
  void Fill(uint64_t seq, const std::vector<uint32_t>& tokens, size_t expect_matched,
            AppendMode mode = AppendMode::kLayer) {
    auto m = pool_->Allocate(seq, tokens);
    ASSERT_THAT(m, IsOk());
    ASSERT_EQ(*m, expect_matched);
    ASSERT_THAT(kv_.Write(pool_.get(), seq, tokens, *m, tokens.size(), mode), IsOk());
  }

  ModelLayout layout_ = TestLayout();
  KvOracle kv_{layout_};
  std::unique_ptr<BlockPool> pool_;
};

TEST_F(PagedPoolTest, CreateRejectsBadOptions) {
  PoolOptions o = TestOptions(layout_, 8);
  o.key_namespace.model_id.clear();
  EXPECT_THAT(BlockPool::Create(o), StatusIs(StatusCode::kInvalidArgument, HasSubstr("model_id")));

  o = TestOptions(layout_, 8);
  o.key_namespace.block_tokens = 8;
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("block_tokens")));

  o = TestOptions(layout_, 8);
  o.key_namespace.layout_signature = "kvtier-layout-v1;other";
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("layout_signature")));

  o = TestOptions(layout_, 0);
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("total_blocks")));

  o = TestOptions(layout_, 8);
  o.chunk_blocks = 0;
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("chunk_blocks")));

  // A layer mixing a per-token state with one of constant size (a whole
  // recurrent layer is accepted: pool_layers_test.cc).
  o = TestOptions(layout_, 8);
  o.layout.layers[1].states[1].shape = {2, 16};
  o.layout.layers[1].states[1].token_dim = -1;
  EXPECT_THAT(BlockPool::Create(o), StatusIs(StatusCode::kInvalidArgument,
                                             HasSubstr("layers[1].states[1] has no token axis")));

  o = TestOptions(layout_, 8);
  o.layout.block_tokens = 0;
  EXPECT_THAT(BlockPool::Create(o), StatusIs(StatusCode::kInvalidArgument));
}

// A slot count no machine can hold is refused by Validate, before the
// pool sizes anything by it (it used to end in bad_alloc).
TEST_F(PagedPoolTest, CreateRefusesMoreSlotsThanTheMachineHolds) {
  PoolOptions o = TestOptions(layout_, 4'000'000'000u);
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument,
                                     HasSubstr("total_blocks 4000000000 would need")));
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("total_blocks 4000000000")));
  // A dense pool keeps no slots: DensePoolOptions has no total_blocks (a
  // compile-time fact now), and the same layout makes a dense pool.
  EXPECT_THAT(DensePool::Create(pool_testing::TestDenseOptions(o.layout)), IsOk());
}

TEST_F(PagedPoolTest, PrefaultedSlotsAreAllocatedUpFront) {
  PoolOptions o = TestOptions(layout_, 40);
  o.chunk_blocks = 16;
  o.prefault_slots = true;
  auto pool = BlockPool::Create(o);
  ASSERT_THAT(pool, IsOk());
  // Three chunks (16 + 16 + 8 slots) before any Allocate.
  EXPECT_EQ((*pool)->GetStats().bytes_capacity, 40 * kBlockBytes);
  o.prefault_slots = false;
  auto lazy = BlockPool::Create(o);
  ASSERT_THAT(lazy, IsOk());
  EXPECT_EQ((*lazy)->GetStats().bytes_capacity, 0u);
}

TEST_F(PagedPoolTest, EveryAppendModeStoresTheSameBytes) {
  const std::vector<uint32_t> tokens = PagedIota(10);
  for (AppendMode mode : {AppendMode::kToken, AppendMode::kHeadRange, AppendMode::kLayer}) {
    Make(8);
    Fill(1, tokens, 0, mode);
    EXPECT_TRUE(kv_.Check(pool_.get(), 1, tokens));
    auto table = pool_->BlockTable(1);
    ASSERT_THAT(table, IsOk());
    EXPECT_THAT(*table, ElementsAre(0u, 1u, 2u));
    for (uint32_t slot : *table) EXPECT_EQ(pool_->RefCount(slot), 1u);
    EXPECT_EQ(pool_->FreeCount(), 5u);

    // The raw slot bytes, as a paged-attention kernel reads them: block 1,
    // layer 1, V is [2 heads, 4 tokens, 4 dims] at its geometry's offset.
    SlotTensorGeometry g = pool_->TensorGeometry(1, 1);
    EXPECT_EQ(g.offset, 192u);
    EXPECT_EQ(g.bytes, 64u);
    EXPECT_EQ(g.a, 2u);
    EXPECT_EQ(g.b, 4u);
    auto addr = pool_->SlotAddress((*table)[1]);
    ASSERT_THAT(addr, IsOk());
    std::vector<std::byte> packed8 = kv_.Packed(tokens, 8, 1, 1);  // [2, 8, 4] F16
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(std::memcmp(*addr + g.offset + h * 32, packed8.data() + h * 64 + 32, 32), 0)
          << "head " << h;
    }
  }
}

TEST_F(PagedPoolTest, BadCallsAreStatuses) {
  Make(8);
  const std::vector<uint32_t> tokens = PagedIota(6);
  std::vector<std::byte> row(16), short_row(15);
  std::span<const std::byte> kv[] = {row, row};
  std::span<const std::byte> bad[] = {row, short_row};
  std::span<const std::byte> one[] = {row};

  EXPECT_THAT(pool_->AppendToken(9, 0, 0, kv), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->Advance(9, tokens), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->Rollback(9, 0), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->Remove(9), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->Evict(9), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->Length(9), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->BlockTable(9), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->PackedLayer(9, 0), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->SetPriority(9, 1), StatusIs(StatusCode::kNotFound));
  EXPECT_THAT(pool_->WaitLoaded(9), StatusIs(StatusCode::kNotFound));

  ASSERT_THAT(pool_->Allocate(1, tokens), IsOk());
  EXPECT_THAT(pool_->AppendToken(1, 0, 0, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("state 1")));
  EXPECT_THAT(pool_->AppendToken(1, 0, 0, one),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("2 state tensors")));
  EXPECT_THAT(pool_->AppendToken(1, 2, 0, kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("layer 2 out of range")));
  EXPECT_THAT(pool_->AppendHeadRange(1, 0, 2, 0, kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("head 2")));
  std::vector<std::byte> odd(12);
  std::span<const std::byte> odd_kv[] = {odd, odd};
  EXPECT_THAT(pool_->AppendHeadRange(1, 0, 0, 0, odd_kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("multiple of 8")));
  EXPECT_THAT(pool_->AppendLayer(1, 0, 0, 2, kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("must be 32 bytes")));
  EXPECT_THAT(pool_->AppendToken(1, 0, 1, kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("contiguous")));
  EXPECT_THAT(pool_->PackedLayer(1, 5), StatusIs(StatusCode::kInvalidArgument));

  // Layer 0 written for 2 tokens, layer 1 for none: Advance refuses.
  ASSERT_THAT(kv_.Write(pool_.get(), 1, tokens, 0, 2, AppendMode::kToken, Commit::kWriteOnly),
              IsOk());
  EXPECT_THAT(pool_->Advance(1, std::span(tokens).first(1)), IsOk());
  EXPECT_THAT(pool_->AppendToken(1, 0, 0, kv),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("committed")));
  EXPECT_THAT(pool_->Rollback(1, 2), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(pool_->Rollback(1, 1), IsOk());  // no-op
  EXPECT_EQ(*pool_->Length(1), 1u);

  auto table = pool_->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  EXPECT_THAT(pool_->SlotAddress(7), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool_->SlotAddress(8), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(PagedPoolTest, AdvanceNeedsEveryLayer) {
  Make(8);
  const std::vector<uint32_t> tokens = PagedIota(3);
  ASSERT_THAT(pool_->Allocate(1, tokens), IsOk());
  std::vector<std::byte> row(16);
  std::span<const std::byte> kv[] = {row, row};
  ASSERT_THAT(pool_->AppendToken(1, 0, 0, kv), IsOk());
  EXPECT_THAT(pool_->Advance(1, std::span(tokens).first(1)),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("layer 1")));
  ASSERT_THAT(pool_->AppendToken(1, 1, 0, kv), IsOk());
  EXPECT_THAT(pool_->Advance(1, std::span(tokens).first(1)), IsOk());
}

TEST_F(PagedPoolTest, SharedPrefixIsFreedOnlyWhenTheLastUserLeaves) {
  Make(16, EvictionPolicy::kLru, /*retain=*/false);
  std::vector<uint32_t> a = PagedIota(14);
  Fill(1, a, 0);
  std::vector<uint32_t> b(a.begin(), a.begin() + 12);
  b.push_back(7);
  b.push_back(8);
  Fill(2, b, 12);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a));
  EXPECT_TRUE(kv_.Check(pool_.get(), 2, b));

  auto ta = *pool_->BlockTable(1), tb = *pool_->BlockTable(2);
  ASSERT_EQ(ta.size(), 4u);
  ASSERT_EQ(tb.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ta[i], tb[i]);
    EXPECT_EQ(pool_->RefCount(ta[i]), 2u);
  }
  EXPECT_NE(ta[3], tb[3]);
  EXPECT_EQ(pool_->FreeCount(), 16u - 5);
  EXPECT_EQ(pool_->GetStats().prefix_hit_blocks_pool, 3u);

  ASSERT_THAT(pool_->Remove(1), IsOk());
  EXPECT_EQ(pool_->FreeCount(), 16u - 4);  // only A's own last block
  for (int i = 0; i < 3; ++i) EXPECT_EQ(pool_->RefCount(ta[i]), 1u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 2, b));

  ASSERT_THAT(pool_->Remove(2), IsOk());
  EXPECT_EQ(pool_->FreeCount(), 16u);
  for (uint32_t s = 0; s < 16; ++s) EXPECT_EQ(pool_->RefCount(s), 0u);
  // Without retain_freed_blocks nothing is left to share.
  EXPECT_EQ(*pool_->Allocate(3, a), 0u);
}

TEST_F(PagedPoolTest, FreedBlocksStayCachedUntilTheirSlotIsNeeded) {
  Make(6);
  std::vector<uint32_t> a = PagedIota(12);
  Fill(1, a, 0);
  ASSERT_THAT(pool_->Remove(1), IsOk());
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.blocks_free, 6u);
  EXPECT_EQ(s.blocks_cached, 3u);
  EXPECT_EQ(s.bytes_used, 0u);

  std::vector<uint32_t> c = a;
  c.push_back(5);
  Fill(2, c, 12);
  EXPECT_TRUE(kv_.Check(pool_.get(), 2, c));
  EXPECT_EQ(pool_->GetStats().blocks_cached, 0u);
  ASSERT_THAT(pool_->Remove(2), IsOk());

  // Another sequence takes all 6 slots: the plain ones first, then the
  // cached ones, which leave the index.
  Fill(3, PagedIota(24, 500), 0);
  EXPECT_EQ(pool_->GetStats().blocks_cached, 0u);
  ASSERT_THAT(pool_->Remove(3), IsOk());
  EXPECT_EQ(*pool_->Allocate(4, c), 0u);
}

TEST_F(PagedPoolTest, FullMatchCopiesTheLastBlockOnWriteAndSharesItAgain) {
  Make(8);
  const std::vector<uint32_t> a = PagedIota(8);
  Fill(1, a, 0);
  auto ta = *pool_->BlockTable(1);

  // All 8 tokens are cached, but one is left to compute.
  ASSERT_EQ(*pool_->Allocate(2, a), 7u);
  auto tb = *pool_->BlockTable(2);
  EXPECT_EQ(tb, ta);
  EXPECT_EQ(pool_->RefCount(ta[1]), 2u);

  // Writing position 7 must not touch A's block.
  ASSERT_THAT(kv_.Write(pool_.get(), 2, a, 7, 8, AppendMode::kToken, Commit::kWriteOnly), IsOk());
  tb = *pool_->BlockTable(2);
  EXPECT_NE(tb[1], ta[1]);
  EXPECT_EQ(pool_->RefCount(ta[1]), 1u);
  EXPECT_EQ(pool_->GetStats().copy_on_write_blocks, 1u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a));

  // Committing it yields the same key: B shares A's block again.
  ASSERT_THAT(pool_->Advance(2, std::span(a).subspan(7)), IsOk());
  tb = *pool_->BlockTable(2);
  EXPECT_EQ(tb, ta);
  EXPECT_EQ(pool_->RefCount(ta[1]), 2u);
  EXPECT_EQ(pool_->FreeCount(), 6u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 2, a));
}

TEST_F(PagedPoolTest, RollbackAcrossBlockBoundaries) {
  Make(8);
  const std::vector<uint32_t> a = PagedIota(10);
  Fill(1, a, 0);
  ASSERT_EQ(pool_->FreeCount(), 5u);

  ASSERT_THAT(pool_->Rollback(1, 3), IsOk());
  EXPECT_EQ(pool_->BlockTable(1)->size(), 1u);
  EXPECT_EQ(pool_->FreeCount(), 7u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(a).first(3)));

  // Different tokens from position 3 on.
  std::vector<uint32_t> a2(a.begin(), a.begin() + 3);
  for (uint32_t t : {40u, 41u, 42u, 43u, 44u, 45u}) a2.push_back(t);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a2, 3, a2.size(), AppendMode::kHeadRange), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a2));

  // The rolled-back blocks left the index; the new ones are in it.
  std::vector<uint32_t> probe = a;
  probe.push_back(1);
  EXPECT_EQ(*pool_->Allocate(2, probe), 0u);
  std::vector<uint32_t> probe2(a2.begin(), a2.begin() + 8);
  probe2.push_back(1);
  EXPECT_EQ(*pool_->Allocate(3, probe2), 8u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 3, std::span(probe2).first(8)));

  // Back to a block boundary: the full blocks before it stay shared.
  ASSERT_THAT(pool_->Rollback(1, 4), IsOk());
  EXPECT_EQ(pool_->BlockTable(1)->size(), 1u);
  EXPECT_EQ(pool_->RefCount((*pool_->BlockTable(1))[0]), 2u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 3, std::span(probe2).first(8)));
}

TEST_F(PagedPoolTest, RollbackIntoASharedBlockCopiesOnWrite) {
  Make(8);
  const std::vector<uint32_t> a = PagedIota(9);
  Fill(1, a, 0);
  Fill(2, a, 8);
  ASSERT_THAT(pool_->Rollback(2, 5), IsOk());
  auto ta = *pool_->BlockTable(1), tb = *pool_->BlockTable(2);
  ASSERT_EQ(tb.size(), 2u);
  EXPECT_EQ(tb[1], ta[1]);  // still shared, still indexed
  std::vector<uint32_t> b(a.begin(), a.begin() + 5);
  b.insert(b.end(), {60, 61, 62, 63});
  ASSERT_THAT(kv_.Write(pool_.get(), 2, b, 5, b.size(), AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a));
  EXPECT_TRUE(kv_.Check(pool_.get(), 2, b));
  EXPECT_EQ(pool_->GetStats().copy_on_write_blocks, 1u);
  // A's block 1 is still found by key.
  EXPECT_EQ(*pool_->Allocate(3, a), 8u);
}

TEST_F(PagedPoolTest, PackedViewIsCachedUntilTheSequenceChanges) {
  Make(8);
  const std::vector<uint32_t> a = PagedIota(7);
  Fill(1, a, 0);
  auto v1 = pool_->PackedLayer(1, 0);
  ASSERT_THAT(v1, IsOk());
  EXPECT_EQ(*pool_->PackedLayer(1, 0), *v1);
  EXPECT_EQ((*v1)->states[0].shape, (std::vector<uint64_t>{2, 7, 4}));
  EXPECT_EQ((*v1)->states[0].dtype, DType::kF16);
  ASSERT_THAT(pool_->PackedLayer(1, 1), IsOk());
  EXPECT_EQ(pool_->GetStats().packed_layers, 2u);

  // Writing ahead does not change the committed tokens' view.
  std::vector<uint32_t> b = a;
  b.push_back(3);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, b, 7, 8, AppendMode::kToken, Commit::kWriteOnly), IsOk());
  EXPECT_EQ(*pool_->PackedLayer(1, 0), *v1);
  ASSERT_THAT(pool_->Advance(1, std::span(b).subspan(7)), IsOk());
  EXPECT_EQ(pool_->GetStats().packed_layers, 0u);
  auto v2 = pool_->PackedLayer(1, 0);
  ASSERT_THAT(v2, IsOk());
  EXPECT_NE(*v2, *v1);
  EXPECT_EQ((*v2)->length, 8u);
  // The caller's old view is untouched.
  EXPECT_EQ((*v1)->length, 7u);
  std::vector<std::byte> want = kv_.Packed(a, 7, 0, 1);
  ASSERT_EQ((*v1)->states[1].data.size(), want.size());
  EXPECT_EQ(std::memcmp((*v1)->states[1].data.data(), want.data(), want.size()), 0);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, b));

  // Once no one holds a view, its buffers serve the next one.
  std::set<const std::byte*> released;
  for (const auto* v : {&*v1, &*v2}) {
    for (const PackedTensor& t : (*v)->states) released.insert(t.data.data());
  }
  v1 = Status::NotFound("dropped");
  v2 = Status::NotFound("dropped");
  b.push_back(4);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, b, 8, 9, AppendMode::kToken), IsOk());
  auto v3 = pool_->PackedLayer(1, 0);
  ASSERT_THAT(v3, IsOk());
  EXPECT_EQ(released.count((*v3)->states[0].data.data()), 1u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, b));
}

TEST_F(PagedPoolTest, StatsCountBlocksBytesAndSequences) {
  Make(8);
  Fill(1, PagedIota(6), 0);
  Fill(2, PagedIota(3, 900), 0);
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.mode, PoolMode::kPaged);
  EXPECT_EQ(s.blocks_total, 8u);
  EXPECT_EQ(s.blocks_free, 5u);
  EXPECT_EQ(s.blocks_cached, 0u);
  EXPECT_EQ(s.bytes_used, 3 * kBlockBytes);
  EXPECT_EQ(s.bytes_capacity, 4 * kBlockBytes);  // one chunk of 4 slots
  EXPECT_EQ(s.sequences, 2u);
  EXPECT_EQ(s.evicted_sequences, 0u);
  EXPECT_EQ(s.stored_blocks, 0u);
}

// Four sequences of one block each fill the pool; a fifth needs a slot.
class EvictionTest : public PagedPoolTest {
 protected:
  void Setup4(EvictionPolicy policy) {
    Make(4, policy);
    for (uint64_t id = 1; id <= 4; ++id) Fill(id, PagedIota(3, 100 * id), 0);
    // Touch sequence 2: LRU order becomes 1, 3, 4, 2.
    ASSERT_EQ(*pool_->Allocate(2, PagedIota(4, 200)), 3u);
  }
  Status Grow(uint64_t id) {
    auto m = pool_->Allocate(id, PagedIota(2, 100 * id));
    if (!m.ok()) return m.status();
    return kv_.Write(pool_.get(), id, PagedIota(2, 100 * id), 0, 1, AppendMode::kToken);
  }
};

TEST_F(EvictionTest, LruEvictsTheLeastRecentlyUsed) {
  Setup4(EvictionPolicy::kLru);
  ASSERT_THAT(Grow(5), IsOk());
  ASSERT_THAT(Grow(6), IsOk());
  EXPECT_THAT(pool_->DrainEvicted(), ElementsAre(1u, 3u));
  EXPECT_TRUE(pool_->DrainEvicted().empty());
  EXPECT_FALSE(pool_->HasSequence(1));
  EXPECT_TRUE(pool_->HasSequence(2));
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.evicted_sequences, 2u);
  EXPECT_EQ(s.evicted_blocks, 2u);
  EXPECT_EQ(s.offloaded_sequences, 2u);
  EXPECT_EQ(s.offloaded_blocks, 2u);
}

TEST_F(EvictionTest, FifoEvictsTheEarliestAllocated) {
  Setup4(EvictionPolicy::kFifo);
  ASSERT_THAT(Grow(5), IsOk());
  ASSERT_THAT(Grow(6), IsOk());
  EXPECT_THAT(pool_->DrainEvicted(), ElementsAre(1u, 2u));
}

TEST_F(EvictionTest, PriorityEvictsLowestPriorityThenLru) {
  Setup4(EvictionPolicy::kPriority);
  ASSERT_THAT(pool_->SetPriority(1, 5), IsOk());
  ASSERT_THAT(pool_->SetPriority(2, 1), IsOk());
  ASSERT_THAT(pool_->SetPriority(3, 1), IsOk());
  ASSERT_THAT(pool_->SetPriority(4, 9), IsOk());
  ASSERT_THAT(Grow(5), IsOk());
  ASSERT_THAT(pool_->SetPriority(5, 200), IsOk());
  ASSERT_THAT(Grow(6), IsOk());
  ASSERT_THAT(pool_->SetPriority(6, 200), IsOk());
  ASSERT_THAT(Grow(7), IsOk());
  EXPECT_THAT(pool_->DrainEvicted(), ElementsAre(3u, 2u, 1u));
}

TEST_F(EvictionTest, ActiveSequencesAreNeverEvicted) {
  Setup4(EvictionPolicy::kLru);
  const uint64_t all[] = {1, 2, 3, 4};
  pool_->SetActiveSequences(all);
  EXPECT_THAT(Grow(5), StatusIs(StatusCode::kResourceExhausted, HasSubstr("out of blocks")));
  EXPECT_TRUE(pool_->DrainEvicted().empty());
  for (uint64_t id = 1; id <= 4; ++id) EXPECT_TRUE(pool_->HasSequence(id));
  const uint64_t three[] = {1, 2, 4};
  pool_->SetActiveSequences(three);
  ASSERT_THAT(Grow(5), IsOk());
  EXPECT_THAT(pool_->DrainEvicted(), ElementsAre(3u));
}

TEST_F(EvictionTest, NoPolicyMeansOutOfBlocks) {
  Setup4(EvictionPolicy::kNone);
  EXPECT_THAT(Grow(5), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(pool_->GetStats().evicted_sequences, 0u);
}

TEST_F(PagedPoolTest, EvictedSequenceIsRestoredFromHostMemory) {
  Make(8, EvictionPolicy::kLru, /*retain=*/false);
  const std::vector<uint32_t> a = PagedIota(10);
  Fill(1, a, 0);
  ASSERT_THAT(pool_->Evict(1), IsOk());
  EXPECT_FALSE(pool_->HasSequence(1));
  EXPECT_THAT(pool_->Length(1), StatusIs(StatusCode::kNotFound, HasSubstr("evicted")));
  EXPECT_EQ(pool_->FreeCount(), 8u);
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.offloaded_blocks, 3u);  // 2 full + the partial one
  EXPECT_EQ(s.offloaded_sequences, 1u);
  EXPECT_THAT(pool_->DrainEvicted(), ElementsAre(1u));

  std::vector<uint32_t> next = a;
  next.push_back(77);
  AllocateInfo info = *pool_->AllocateAsync(1, next);
  EXPECT_EQ(info.matched_tokens, 10u);
  EXPECT_TRUE(info.restored);
  EXPECT_FALSE(info.load_pending);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a));
  s = pool_->GetStats();
  EXPECT_EQ(s.offloaded_blocks, 0u);
  EXPECT_EQ(s.restored_sequences, 1u);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, next, 10, 11, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, next));
}

TEST_F(PagedPoolTest, RestoreStopsWhereTheNewTokensDiverge) {
  Make(8, EvictionPolicy::kLru, /*retain=*/false);
  const std::vector<uint32_t> a = PagedIota(10);
  Fill(1, a, 0);
  ASSERT_THAT(pool_->Evict(1), IsOk());
  std::vector<uint32_t> b(a.begin(), a.begin() + 6);
  b.insert(b.end(), {1, 2, 3});
  EXPECT_EQ(*pool_->Allocate(1, b), 4u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(b).first(4)));
}

TEST_F(PagedPoolTest, EvictedSequenceCanBeRemoved) {
  Make(8);
  Fill(1, PagedIota(5), 0);
  ASSERT_THAT(pool_->Evict(1), IsOk());
  ASSERT_THAT(pool_->SetPriority(1, 3), IsOk());
  ASSERT_THAT(pool_->Remove(1), IsOk());
  EXPECT_EQ(pool_->GetStats().offloaded_sequences, 0u);
  EXPECT_THAT(pool_->Remove(1), StatusIs(StatusCode::kNotFound));
  EXPECT_EQ(*pool_->Allocate(1, PagedIota(5)), 4u);  // full block 0 still cached
}

TEST_F(PagedPoolTest, AllocateOnALiveSequenceRollsBackToTheCommonPrefix) {
  Make(8);
  const std::vector<uint32_t> a = PagedIota(9);
  Fill(1, a, 0);
  std::vector<uint32_t> longer = a;
  longer.push_back(1);
  EXPECT_EQ(*pool_->Allocate(1, longer), 9u);
  EXPECT_EQ(*pool_->Allocate(1, a), 8u);  // leaves one token to compute
  EXPECT_EQ(*pool_->Length(1), 8u);
  std::vector<uint32_t> other(a.begin(), a.begin() + 3);
  other.push_back(55);
  EXPECT_EQ(*pool_->Allocate(1, other), 3u);
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(a).first(3)));
  EXPECT_EQ(*pool_->Allocate(1, std::vector<uint32_t>{}), 0u);
}

}  // namespace
}  // namespace kvtier
