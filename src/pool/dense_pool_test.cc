// BlockPool in dense mode: growable per-sequence tensors, no sharing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestLayout;
using ::kvtier::pool_testing::TestOptions;
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
    PoolOptions o = TestOptions(layout_, 8);
    o.mode = PoolMode::kDense;
    o.dense_initial_tokens = initial;
    o.dense_max_tokens = max_tokens;
    o.dense_free_list_cap = free_cap;
    auto pool = BlockPool::Create(o);
    ASSERT_THAT(pool, IsOk());
    pool_ = std::move(pool).value();
  }
  ModelLayout layout_ = TestLayout();
  KvOracle kv_{layout_};
  std::unique_ptr<BlockPool> pool_;
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
  EXPECT_THAT(pool_->BlockTable(1), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool_->SlotAddress(0), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool_->Evict(1), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool_->Advance(2, a), StatusIs(StatusCode::kNotFound));
  std::vector<std::byte> row(16), bad(3);
  std::span<const std::byte> kv[] = {row, bad};
  EXPECT_THAT(pool_->AppendToken(1, 0, 8, kv), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(pool_->RefCount(0), 0u);
  EXPECT_EQ(pool_->FreeCount(), 0u);

  PoolOptions o = TestOptions(layout_, 8);
  o.mode = PoolMode::kDense;
  o.dense_initial_tokens = 16;
  o.dense_max_tokens = 8;
  EXPECT_THAT(BlockPool::Create(o),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("dense_max_tokens")));
}

}  // namespace
}  // namespace kvtier
