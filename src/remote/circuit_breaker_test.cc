#include "remote/circuit_breaker.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

namespace kvtier::remote {
namespace {

using Admit = CircuitBreaker::Admit;

BreakerOptions Opts() {
  BreakerOptions o;
  o.failure_threshold = 3;
  o.open_micros = 1000;
  o.max_open_micros = 4000;
  return o;
}

TEST(CircuitBreaker, OpensAfterConsecutiveFailures) {
  CircuitBreaker b(Opts());
  EXPECT_EQ(b.Allow(0), Admit::kYes);
  EXPECT_FALSE(b.OnFailure(0));
  EXPECT_FALSE(b.OnFailure(0));
  b.OnSuccess();  // resets the count
  EXPECT_FALSE(b.OnFailure(10));
  EXPECT_FALSE(b.OnFailure(10));
  EXPECT_TRUE(b.OnFailure(10));
  EXPECT_TRUE(b.IsOpen(10));
  EXPECT_EQ(b.Allow(500), Admit::kNo);
  EXPECT_EQ(b.Allow(1009), Admit::kNo);
}

// A node that trickles its values but answers a writer's small EXISTS at
// once: successes come between the slow failures, and must not hide them.
TEST(CircuitBreaker, SlowFailuresOpenItDespiteSuccessesInBetween) {
  BreakerOptions o = Opts();
  o.slow_window_micros = 10'000;
  CircuitBreaker b(o);
  EXPECT_FALSE(b.OnSlowFailure(100));
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(200));
  b.OnSuccess();
  EXPECT_TRUE(b.OnSlowFailure(300));
  EXPECT_TRUE(b.IsOpen(300));
  EXPECT_EQ(b.Allow(400), Admit::kNo);
  // A probe that succeeds closes it with a fresh slow count.
  EXPECT_EQ(b.Allow(1300), Admit::kProbe);
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(1400));
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(1500));
  // Slow failures further apart than the window do not add up.
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(20'000));
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(40'000));
  b.OnSuccess();
  EXPECT_FALSE(b.OnSlowFailure(60'000));
  EXPECT_FALSE(b.IsOpen(60'000));
  // Plain failures with successes in between never open it.
  for (uint64_t t = 61'000; t < 61'010; ++t) {
    EXPECT_FALSE(b.OnFailure(t));
    b.OnSuccess();
  }
  EXPECT_FALSE(b.IsOpen(61'010));
}

TEST(CircuitBreaker, ReportsEachChangeOfState) {
  std::vector<std::pair<BreakerChange, uint64_t>> seen;
  BreakerOptions o = Opts();
  o.on_change = [&](BreakerChange c, uint64_t open_micros, std::string_view) {
    seen.emplace_back(c, open_micros);
  };
  CircuitBreaker b(o);
  b.OnSuccess();  // closed already: nothing to report
  for (int i = 0; i < 3; ++i) (void)b.OnFailure(0);
  (void)b.OnFailure(0);  // open: counted, not a change
  ASSERT_EQ(b.Allow(1000), Admit::kProbe);
  (void)b.OnFailure(1000);
  ASSERT_EQ(b.Allow(3000), Admit::kProbe);
  b.OnSuccess();
  b.OnSuccess();
  ASSERT_TRUE(b.Trip(5000));
  const std::vector<std::pair<BreakerChange, uint64_t>> want = {
      {BreakerChange::kOpened, 1000},
      {BreakerChange::kReopened, 2000},
      {BreakerChange::kClosed, 0},
      {BreakerChange::kOpened, 1000}};
  EXPECT_EQ(seen, want);
}

TEST(CircuitBreaker, OneProbeThenCloses) {
  CircuitBreaker b(Opts());
  ASSERT_TRUE(b.Trip(0));
  EXPECT_FALSE(b.Trip(0));  // already open
  EXPECT_EQ(b.Allow(1000), Admit::kProbe);
  EXPECT_EQ(b.Allow(1000), Admit::kNo);  // only one probe at a time
  EXPECT_TRUE(b.IsOpen(1000));
  b.OnSuccess();
  EXPECT_FALSE(b.IsOpen(1000));
  EXPECT_EQ(b.Allow(1001), Admit::kYes);
}

TEST(CircuitBreaker, FailedProbesDoubleTheOpenTimeUpToTheMax) {
  CircuitBreaker b(Opts());
  ASSERT_TRUE(b.Trip(0));  // open 1000
  EXPECT_EQ(b.Allow(1000), Admit::kProbe);
  EXPECT_TRUE(b.OnFailure(1000));  // open 2000
  EXPECT_EQ(b.Allow(2999), Admit::kNo);
  EXPECT_EQ(b.Allow(3000), Admit::kProbe);
  EXPECT_TRUE(b.OnFailure(3000));  // open 4000
  EXPECT_EQ(b.Allow(6999), Admit::kNo);
  EXPECT_EQ(b.Allow(7000), Admit::kProbe);
  EXPECT_TRUE(b.OnFailure(7000));  // capped at 4000
  EXPECT_EQ(b.Allow(10999), Admit::kNo);
  EXPECT_EQ(b.Allow(11000), Admit::kProbe);
  b.OnSuccess();
  // After closing, the next opening starts from open_micros again.
  for (int i = 0; i < 3; ++i) b.OnFailure(20000);
  EXPECT_EQ(b.Allow(20999), Admit::kNo);
  EXPECT_EQ(b.Allow(21000), Admit::kProbe);
}

}  // namespace
}  // namespace kvtier::remote
