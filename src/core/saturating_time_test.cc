#include "core/saturating_time.h"

#include <gtest/gtest.h>

#include <limits>

namespace kvtier {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(SaturatingTimeTest, InRangeArithmeticIsExact) {
  EXPECT_EQ(SecondsToMicros(7), 7'000'000);
  EXPECT_EQ(SecondsToMicros(-3), -3'000'000);
  EXPECT_EQ(SaturatingAdd(5, -7), -2);
  EXPECT_EQ(SaturatingSub(5, 7), -2);
  EXPECT_EQ(SaturatingMul(-4, 5), -20);
  EXPECT_EQ(CutoffBefore(1'700'000'000'000'000, 60'000'000), 1'699'999'940'000'000);
}

TEST(SaturatingTimeTest, OverflowClampsTowardsTheSignOfTheTrueResult) {
  EXPECT_EQ(SecondsToMicros(kMax), kMax);
  EXPECT_EQ(SecondsToMicros(10'000'000'000'000), kMax);  // `gc --retention-seconds 1e13`
  EXPECT_EQ(SecondsToMicros(kMin), kMin);
  EXPECT_EQ(SecondsToMicros(-(int64_t{1} << 62)), kMin);
  EXPECT_EQ(SaturatingAdd(kMax, 1), kMax);
  EXPECT_EQ(SaturatingAdd(kMin, -1), kMin);
  EXPECT_EQ(SaturatingSub(kMin, 1), kMin);
  EXPECT_EQ(SaturatingSub(0, kMin), kMax);
  EXPECT_EQ(SaturatingMul(kMin, -1), kMax);
  EXPECT_EQ(SaturatingMul(kMax, -2), kMin);
}

TEST(SaturatingTimeTest, AHugeRetentionPutsTheCutoffBeforeEveryRealTime) {
  const int64_t now = 1'700'000'000'000'000;
  const int64_t cutoff = CutoffBefore(now, SecondsToMicros(kMax));
  EXPECT_LT(cutoff, 0);
  EXPECT_FALSE(int64_t{0} < cutoff);  // a block created at the epoch is kept
  // A clock before the epoch does not wrap around either.
  EXPECT_EQ(CutoffBefore(-now, kMax), kMin);
}

}  // namespace
}  // namespace kvtier
