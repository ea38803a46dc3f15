// DensePool: growable per-sequence tensors, no sharing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <span>
#include <type_traits>
#include <vector>

#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestDenseOptions;
using ::kvtier::pool_testing::TestLayout;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

std::vector<uint32_t> Iota(size_t n, uint32_t start = 100) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

class DensePoolTest : public ::testing::Test {
 protected:
  void Make(uint32_t initial = 4, uint32_t max_tokens = 64, uint32_t free_cap = 1) {
    DensePoolOptions o = TestDenseOptions(layout_);
    o.dense_initial_tokens = initial;
    o.dense_max_tokens = max_tokens;
    o.dense_free_list_cap = free_cap;
    auto pool = DensePool::Create(o);
    ASSERT_THAT(pool, IsOk());
    pool_ = std::move(pool).value();
  }
  ModelLayout layout_ = TestLayout();
  KvOracle kv_{layout_};
  std::unique_ptr<DensePool> pool_;
};

// Bytes of one sequence's tensors for `cap` tokens: 2 layers × 2 states ×
// [2 heads, cap, 4] F16.
constexpr uint64_t BytesFor(uint64_t cap) { return 4 * 2 * cap * 8; }

TEST_F(DensePoolTest, AppendsGrowTheTensorsAndKeepTheirContents) {
  Make();
  const std::vector<uint32_t> a = Iota(37);
  ASSERT_EQ(*pool_->Allocate(1, a), 0u);
  EXPECT_EQ(pool_->GetStats().bytes_used, BytesFor(4));
  // Mixed append modes across two growths (4 → 16 → 64 tokens).
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 0, 3, AppendMode::kToken), IsOk());
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 3, 11, AppendMode::kHeadRange), IsOk());
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 11, 37, AppendMode::kLayer), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, a));
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.mode, PoolMode::kDense);
  EXPECT_EQ(s.bytes_used, BytesFor(64));
  EXPECT_EQ(s.sequences, 1u);
  EXPECT_EQ(s.blocks_total, 0u);
  EXPECT_EQ(s.packed_layers, 2u);
}

TEST_F(DensePoolTest, NoSharingBetweenSequences) {
  Make();
  const std::vector<uint32_t> a = Iota(9);
  ASSERT_EQ(*pool_->Allocate(1, a), 0u);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 0, 9, AppendMode::kLayer), IsOk());
  EXPECT_EQ(*pool_->Allocate(2, a), 0u);
  EXPECT_EQ(*pool_->Allocate(1, a), 8u);  // a live sequence keeps its common prefix
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(a).first(8)));
}

TEST_F(DensePoolTest, RollbackAndRewrite) {
  Make();
  const std::vector<uint32_t> a = Iota(10);
  ASSERT_EQ(*pool_->Allocate(1, a), 0u);
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 0, 10, AppendMode::kToken), IsOk());
  ASSERT_THAT(pool_->Rollback(1, 3), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(a).first(3)));
  std::vector<uint32_t> b(a.begin(), a.begin() + 3);
  b.insert(b.end(), {7, 7, 7});
  ASSERT_THAT(kv_.Write(pool_.get(), 1, b, 3, 6, AppendMode::kHeadRange), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, b));
  EXPECT_THAT(pool_->Rollback(1, 7), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(DensePoolTest, RemovedTensorsAreReusedUpToTheCap) {
  Make(4, 64, /*free_cap=*/1);
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_THAT(pool_->Allocate(id, Iota(2)), IsOk());
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_THAT(pool_->Remove(id), IsOk());
  PoolStats s = pool_->GetStats();
  EXPECT_EQ(s.bytes_used, 0u);
  EXPECT_EQ(s.bytes_capacity, BytesFor(4));  // one kept, two freed
  ASSERT_THAT(pool_->Allocate(4, Iota(2)), IsOk());
  s = pool_->GetStats();
  EXPECT_EQ(s.bytes_used, BytesFor(4));
  EXPECT_EQ(s.bytes_capacity, BytesFor(4));
  EXPECT_EQ(*pool_->Length(4), 0u);
  EXPECT_THAT(pool_->Remove(9), StatusIs(StatusCode::kNotFound));
}

TEST_F(DensePoolTest, LimitsAndUnsupportedCallsAreStatuses) {
  Make(4, 8);
  const std::vector<uint32_t> a = Iota(12);
  ASSERT_THAT(pool_->Allocate(1, a), IsOk());
  EXPECT_THAT(kv_.Write(pool_.get(), 1, a, 0, 9, AppendMode::kLayer),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("dense_max_tokens")));
  ASSERT_THAT(kv_.Write(pool_.get(), 1, a, 0, 8, AppendMode::kLayer), IsOk());
  EXPECT_TRUE(kv_.Check(pool_.get(), 1, std::span(a).first(8)));
  // BlockTable, SlotAddress and Evict, which a dense pool cannot serve, are
  // not part of its interface (UnsupportedCallsDoNotExist below).
  EXPECT_THAT(pool_->Advance(2, a), StatusIs(StatusCode::kNotFound));
  std::vector<std::byte> row(16), bad(3);
  std::span<const std::byte> kv[] = {row, bad};
  EXPECT_THAT(pool_->AppendToken(1, 0, 8, kv), StatusIs(StatusCode::kInvalidArgument));

  DensePoolOptions o = TestDenseOptions(layout_);
  o.dense_initial_tokens = 16;
  o.dense_max_tokens = 8;
  EXPECT_THAT(DensePool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("dense_max_tokens")));
}

// What a dense pool cannot serve is not in its interface, checked by the
// compiler: these calls used to return kFailedPrecondition (BlockTable,
// SlotAddress, Evict) or 0 / nothing (RefCount, FreeCount, DrainEvicted).
// The paged pool's calls are checked too, so that the concepts are not
// vacuous.
template <typename P>
concept HasBlockTable = requires(const P& p) {
  p.BlockTable(uint64_t{1});
};
template <typename P>
concept HasSlotAddress = requires(const P& p) {
  p.SlotAddress(uint32_t{0});
};
template <typename P>
concept HasTensorGeometry = requires(const P& p) {
  p.TensorGeometry(uint32_t{0}, uint32_t{0});
};
template <typename P>
concept HasEvict = requires(P& p) {
  p.Evict(uint64_t{1});
};
template <typename P>
concept HasDrainEvicted = requires(P& p) {
  p.DrainEvicted();
};
template <typename P>
concept HasEvictionControls = requires(P& p, std::span<const uint64_t> ids) {
  p.SetActiveSequences(ids);
  p.SetPriority(uint64_t{1}, uint8_t{0});
};
template <typename P>
concept HasLoads = requires(P& p, std::span<const uint32_t> tokens) {
  p.AllocateAsync(uint64_t{1}, tokens);
  p.WaitLoaded(uint64_t{1});
  p.WaitTokensLoaded(uint64_t{1}, size_t{0});
};
template <typename P>
concept HasAllocatorIntrospection = requires(const P& p) {
  p.RefCount(uint32_t{0});
  p.FreeCount();
};

TEST(DensePoolInterfaceTest, UnsupportedCallsDoNotExist) {
  static_assert(!HasBlockTable<DensePool> && HasBlockTable<BlockPool>);
  static_assert(!HasSlotAddress<DensePool> && HasSlotAddress<BlockPool>);
  static_assert(!HasTensorGeometry<DensePool> && HasTensorGeometry<BlockPool>);
  static_assert(!HasEvict<DensePool> && HasEvict<BlockPool>);
  static_assert(!HasDrainEvicted<DensePool> && HasDrainEvicted<BlockPool>);
  static_assert(!HasEvictionControls<DensePool> && HasEvictionControls<BlockPool>);
  static_assert(!HasLoads<DensePool> && HasLoads<BlockPool>);
  static_assert(!HasAllocatorIntrospection<DensePool> && HasAllocatorIntrospection<BlockPool>);
  // Both are KvPools: one test oracle drives either.
  static_assert(std::is_base_of_v<KvPool, DensePool> && std::is_base_of_v<KvPool, BlockPool>);
}

}  // namespace
}  // namespace kvtier
