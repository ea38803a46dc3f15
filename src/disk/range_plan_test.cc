// CoalesceRanges joins the smallest gaps first, within both bounds;
// BytesOutside counts exactly; ReadPlanMemo remembers per mask, up to a cap.
#include "disk/range_plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace kvtier::disk {
namespace {

using R = BlockFileRange;
using ::testing::ElementsAre;

TEST(CoalesceRanges, JoinsGapsWithinTheBudgetSmallestFirst) {
  // Gaps of 30, 10 and 20 bytes; a budget of 30 takes 10 and 20 (not 30).
  const std::vector<R> in = {{0, 100}, {130, 200}, {210, 300}, {320, 400}};
  EXPECT_THAT(CoalesceRanges(in, 1000, 30), ElementsAre(R{0, 100}, R{130, 400}));
  EXPECT_THAT(CoalesceRanges(in, 1000, 60), ElementsAre(R{0, 400}));
  EXPECT_THAT(CoalesceRanges(in, 1000, 9), ElementsAre(R{0, 100}, R{130, 200}, R{210, 300},
                                                       R{320, 400}));
}

TEST(CoalesceRanges, NeverJoinsAGapPastTheLargest) {
  const std::vector<R> in = {{0, 100}, {105, 200}, {300, 400}};
  // The 100-byte gap is past max_gap 99 whatever the budget.
  EXPECT_THAT(CoalesceRanges(in, 99, 1 << 20), ElementsAre(R{0, 200}, R{300, 400}));
  EXPECT_THAT(CoalesceRanges(in, 100, 1 << 20), ElementsAre(R{0, 400}));
}

TEST(CoalesceRanges, FewerThanTwoRangesAsTheyAre) {
  EXPECT_TRUE(CoalesceRanges({}, 100, 100).empty());
  const std::vector<R> one = {{8, 16}};
  EXPECT_THAT(CoalesceRanges(one, 100, 100), ElementsAre(R{8, 16}));
}

TEST(RangeBytes, SumsTheRanges) {
  const std::vector<R> in = {{0, 100}, {130, 200}};
  EXPECT_EQ(RangeBytes(in), 170u);
  EXPECT_EQ(RangeBytes({}), 0u);
}

TEST(BytesOutside, CountsWhatNoRangeOfTheOtherCovers) {
  const std::vector<R> a = {{0, 100}, {200, 300}};
  EXPECT_EQ(BytesOutside(a, a), 0u);
  EXPECT_EQ(BytesOutside(a, {}), 200u);
  // b covers [50, 250): a's [0, 50) and [250, 300) are outside.
  const std::vector<R> b = {{50, 250}};
  EXPECT_EQ(BytesOutside(a, b), 100u);
  // Several ranges of b inside one of a.
  const std::vector<R> c = {{10, 20}, {30, 40}, {90, 210}};
  EXPECT_EQ(BytesOutside(a, c), 10u + 10u + 50u + 90u);
  EXPECT_EQ(BytesOutside({}, c), 0u);
}

TEST(ReadPlanMemo, RemembersPerMaskUpToACap) {
  ReadPlanMemo memo;
  const TensorMask m1 = {true, false}, m2 = {false, true};
  EXPECT_FALSE(memo.Find(m1).has_value());
  memo.Remember(m1, {64, {{100, 200}}});
  memo.Remember(m2, {72, {{300, 400}}});
  ASSERT_TRUE(memo.Find(m1).has_value());
  EXPECT_EQ(memo.Find(m1)->header_bytes, 64u);
  EXPECT_THAT(memo.Find(m1)->ranges, ElementsAre(R{100, 200}));
  EXPECT_EQ(memo.Find(m2)->header_bytes, 72u);
  memo.Remember(m1, {80, {}});  // replaced
  EXPECT_EQ(memo.Find(m1)->header_bytes, 80u);
  EXPECT_TRUE(memo.Find(m1)->ranges.empty());
  // Past the cap a new mask empties it first.
  for (size_t i = 2; i < ReadPlanMemo::kMaxMasks; ++i) {
    TensorMask m(8, false);
    for (size_t b = 0; b < 8; ++b) m[b] = ((i >> b) & 1) != 0;
    memo.Remember(m, {8, {}});
  }
  EXPECT_TRUE(memo.Find(m2).has_value());
  memo.Remember(TensorMask(9, true), {8, {}});
  EXPECT_FALSE(memo.Find(m2).has_value());
  EXPECT_TRUE(memo.Find(TensorMask(9, true)).has_value());
}

}  // namespace
}  // namespace kvtier::disk
