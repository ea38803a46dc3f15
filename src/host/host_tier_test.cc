#include "kvtier/host_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// Records every call of a sink.
class SinkLog {
 public:
  HostEvictionSink Sink(Status result = Status::Ok()) {
    return [this, result](const BlockKey& key, SharedBlock block) {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back({key, std::move(block)});
      return result;
    };
  }
  std::vector<BlockKey> Keys() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<BlockKey> keys;
    for (const auto& c : calls_) keys.push_back(c.key);
    return keys;
  }
  std::vector<HostTier::DirtyEntry> Calls() const {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<HostTier::DirtyEntry> calls_;
};

// Records every key listener event.
class EventLog {
 public:
  HostKeyListener Listener() {
    return [this](const BlockKey& key, KeyPresence change) {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back({key, change});
    };
  }
  std::vector<std::pair<BlockKey, KeyPresence>> Events() const {
    std::lock_guard<std::mutex> lock(mu_);
    return events_;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::pair<BlockKey, KeyPresence>> events_;
};

std::unique_ptr<HostTier> MakeTier(uint64_t capacity, SinkLog* sink = nullptr,
                                   EventLog* events = nullptr) {
  HostTierOptions opts;
  opts.capacity_bytes = capacity;
  if (sink != nullptr) opts.eviction_sink = sink->Sink();
  if (events != nullptr) opts.key_listener = events->Listener();
  auto tier = HostTier::Create(std::move(opts));
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return std::move(tier).value();
}

std::unique_ptr<HostTier> MakeSharedTier(const std::shared_ptr<SharedHostBudget>& budget,
                                         SinkLog* sink = nullptr) {
  HostTierOptions opts;
  opts.shared_budget = budget;
  if (sink != nullptr) opts.eviction_sink = sink->Sink();
  auto tier = HostTier::Create(std::move(opts));
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return std::move(tier).value();
}

std::shared_ptr<SharedHostBudget> MakeBudget(uint64_t capacity) {
  auto b = SharedHostBudget::Create(capacity);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

// Puts TestBlockKey(id) with `size` bytes.
void PutId(HostTier& tier, uint64_t id, size_t size, HostEntryState state) {
  Status s = tier.Put(TestBlockKey(id), MakeOpaqueBlock(TestBlockKey(id), size), state);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

constexpr HostEntryState kDirty = HostEntryState::kDirty;
constexpr HostEntryState kClean = HostEntryState::kClean;

TEST(HostTierOptions, ValidateNamesTheBadField) {
  HostTierOptions opts;
  opts.capacity_bytes = 0;
  Status s = opts.Validate();
  EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("capacity_bytes"));
  EXPECT_THAT(HostTier::Create(opts), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(SharedHostBudget::Create(0), StatusIs(StatusCode::kInvalidArgument));

  // With a shared budget the private capacity is ignored.
  opts.shared_budget = MakeBudget(100);
  EXPECT_TRUE(opts.Validate().ok());
}

TEST(HostTier, GetCopiesExactBytesAndReturnsTheSharedBlock) {
  auto tier = MakeTier(1 << 20);
  const BlockKey key = TestBlockKey(1);
  SharedBlock block = MakeOpaqueBlock(key, 1000);
  ASSERT_TRUE(tier->Put(key, block, kDirty).ok());

  std::vector<std::byte> dst(1200, std::byte{0xEE});
  auto got = tier->Get(key, dst);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->get(), block.get());
  EXPECT_EQ(std::memcmp(dst.data(), block->data(), 1000), 0);
  for (size_t i = 1000; i < dst.size(); ++i) ASSERT_EQ(dst[i], std::byte{0xEE}) << i;

  // Without a destination only the block comes back.
  auto again = tier->Get(key);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), block.get());

  auto miss = tier->Get(TestBlockKey(2), dst);
  ASSERT_TRUE(miss.ok());
  EXPECT_EQ(*miss, nullptr);

  EXPECT_TRUE(tier->Contains(key));
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));

  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1000u);
  EXPECT_EQ(s.dirty_entries, 1u);
  EXPECT_EQ(s.dirty_bytes, 1000u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.puts, 1u);
  EXPECT_EQ(s.replacements, 0u);
  EXPECT_EQ(s.evictions, 0u);
}

// Keys lists this tier's entries, clean and dirty, and no other tier's on
// the same budget.
TEST(HostTier, KeysListsOnlyThisTiersEntries) {
  auto budget = MakeBudget(10'000);
  auto a = MakeSharedTier(budget);
  auto b = MakeSharedTier(budget);
  PutId(*a, 1, 100, kDirty);
  PutId(*a, 2, 100, kClean);
  PutId(*b, 3, 100, kClean);
  std::vector<BlockKey> keys = a->Keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<BlockKey>{TestBlockKey(1), TestBlockKey(2)}));
  EXPECT_EQ(b->Keys(), std::vector<BlockKey>{TestBlockKey(3)});
  ASSERT_TRUE(a->Erase(TestBlockKey(1)));
  EXPECT_EQ(a->Keys(), std::vector<BlockKey>{TestBlockKey(2)});
}

TEST(HostTier, AReaderKeepsItsBlockAfterEviction) {
  auto tier = MakeTier(1000);
  PutId(*tier, 1, 1000, kClean);
  SharedBlock held = std::move(tier->Get(TestBlockKey(1))).value();
  ASSERT_NE(held, nullptr);
  PutId(*tier, 2, 1000, kClean);  // evicts 1
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
  EXPECT_TRUE(IsOpaqueBlock(TestBlockKey(1), *held, 1000));
  EXPECT_EQ(tier->budget()->Stats().used_bytes, 1000u);  // the budget no longer counts it
}

TEST(HostTier, GetIntoSmallBufferFailsWithoutCountingOrTouching) {
  auto tier = MakeTier(2000);
  PutId(*tier, 1, 1000, kClean);
  PutId(*tier, 2, 1000, kClean);
  std::vector<std::byte> small(999);
  auto got = tier->Get(TestBlockKey(1), small);
  EXPECT_THAT(got, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(got.status().message(), ::testing::HasSubstr("999"));
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.hits, 0u);
  EXPECT_EQ(s.misses, 0u);
  // Key 1 was not touched, so it is still the least recently used.
  PutId(*tier, 3, 1000, kClean);
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(2)));
}

TEST(HostTier, EvictsLeastRecentlyUsedAndGetTouches) {
  auto tier = MakeTier(3000);
  PutId(*tier, 1, 1000, kClean);
  PutId(*tier, 2, 1000, kClean);
  PutId(*tier, 3, 1000, kClean);
  ASSERT_TRUE(tier->Get(TestBlockKey(1)).ok());
  EXPECT_TRUE(tier->Contains(TestBlockKey(2)));  // Contains does not touch
  PutId(*tier, 4, 1000, kClean);
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(3)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(4)));
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.entries, 3u);
  EXPECT_EQ(s.bytes, 3000u);
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.dirty_evictions, 0u);
}

TEST(HostTier, DirtyEvictionsReachTheSinkOnceCleanOnesDoNot) {
  SinkLog sink;
  auto tier = MakeTier(2000, &sink);
  SharedBlock a = MakeOpaqueBlock(TestBlockKey(1), 1000);
  ASSERT_TRUE(tier->Put(TestBlockKey(1), a, kDirty).ok());
  PutId(*tier, 2, 1000, kClean);
  PutId(*tier, 3, 1000, kClean);  // evicts 1 (dirty)
  PutId(*tier, 4, 1000, kDirty);  // evicts 2 (clean)
  ASSERT_THAT(sink.Keys(), ElementsAre(TestBlockKey(1)));
  EXPECT_EQ(sink.Calls()[0].block.get(), a.get());  // the same bytes, not a copy

  EXPECT_EQ(tier->Clear(), 2u);  // 3 (clean) dropped, 4 (dirty) written back
  EXPECT_THAT(sink.Keys(), ElementsAre(TestBlockKey(1), TestBlockKey(4)));
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  EXPECT_EQ(s.dirty_entries, 0u);
  EXPECT_EQ(s.dirty_bytes, 0u);
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_EQ(s.dirty_evictions, 2u);
  EXPECT_EQ(s.dirty_dropped, 0u);
  EXPECT_EQ(s.sink_errors, 0u);
  EXPECT_EQ(tier->budget()->Stats().used_bytes, 0u);
}

TEST(HostTier, HotOnlyModeDropsDirtyEvictionsAndCountsThem) {
  auto tier = MakeTier(1000);
  PutId(*tier, 1, 1000, kDirty);
  PutId(*tier, 2, 1000, kDirty);
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.dirty_evictions, 0u);
  EXPECT_EQ(s.dirty_dropped, 1u);
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));
}

TEST(HostTier, SinkErrorsAreCounted) {
  SinkLog sink;
  HostTierOptions opts;
  opts.capacity_bytes = 1000;
  opts.eviction_sink = sink.Sink(Status::IOError("write block", 28));
  auto tier = std::move(HostTier::Create(std::move(opts))).value();
  PutId(*tier, 1, 1000, kDirty);
  PutId(*tier, 2, 1000, kDirty);
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.dirty_evictions, 1u);
  EXPECT_EQ(s.sink_errors, 1u);
  EXPECT_THAT(sink.Keys(), ElementsAre(TestBlockKey(1)));
}

TEST(HostTier, RejectsBlockLargerThanTheBudget) {
  auto tier = MakeTier(1000);
  PutId(*tier, 1, 600, kDirty);
  Status s = tier->Put(TestBlockKey(2), MakeOpaqueBlock(TestBlockKey(2), 1001), kDirty);
  EXPECT_THAT(s, StatusIs(StatusCode::kResourceExhausted));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("1001"));
  HostTierStats st = tier->Stats();
  EXPECT_EQ(st.rejections, 1u);
  EXPECT_EQ(st.puts, 1u);
  EXPECT_EQ(st.evictions, 0u);
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));  // nothing was evicted for it
}

TEST(HostTier, NullBlockIsInvalidArgument) {
  auto tier = MakeTier(1000);
  EXPECT_THAT(tier->Put(TestBlockKey(1), nullptr, kDirty), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(tier->Stats().puts, 0u);
}

TEST(HostTier, ReplacementKeepsOneEntryAndIsNeverItsOwnVictim) {
  EventLog events;
  auto tier = MakeTier(1000, nullptr, &events);
  PutId(*tier, 1, 600, kDirty);
  PutId(*tier, 1, 1000, kClean);  // fits only because the old entry goes
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1000u);
  EXPECT_EQ(s.dirty_entries, 0u);  // the new state wins
  EXPECT_EQ(s.dirty_bytes, 0u);
  EXPECT_EQ(s.puts, 2u);
  EXPECT_EQ(s.replacements, 1u);
  EXPECT_EQ(s.evictions, 0u);
  auto got = tier->Get(TestBlockKey(1));
  ASSERT_TRUE(got.ok());
  ASSERT_NE(*got, nullptr);
  EXPECT_TRUE(IsOpaqueBlock(TestBlockKey(1), **got, 1000));
  // One key arrived once.
  EXPECT_THAT(events.Events(), ElementsAre(std::pair(TestBlockKey(1), KeyPresence::kAdded)));
  EXPECT_EQ(tier->budget()->Stats().used_bytes, 1000u);
}

TEST(HostTier, ReplacementEvictsOthersLeastRecentFirst) {
  SinkLog sink;
  auto tier = MakeTier(2000, &sink);
  PutId(*tier, 1, 500, kDirty);
  PutId(*tier, 2, 500, kDirty);
  PutId(*tier, 3, 500, kDirty);
  PutId(*tier, 1, 1600, kDirty);  // 2 + 3 + 1600 > 2000: evicts 2, then 3
  EXPECT_THAT(sink.Keys(), ElementsAre(TestBlockKey(2), TestBlockKey(3)));
  EXPECT_EQ(tier->Stats().bytes, 1600u);
}

TEST(HostTier, MarkCleanAndDirtyEntries) {
  SinkLog sink;
  auto tier = MakeTier(3000, &sink);
  PutId(*tier, 1, 1000, kDirty);
  PutId(*tier, 2, 1000, kDirty);
  PutId(*tier, 3, 1000, kClean);
  ASSERT_TRUE(tier->Get(TestBlockKey(1)).ok());  // order now 2, 3, 1

  std::vector<HostTier::DirtyEntry> dirty = tier->DirtyEntries();
  ASSERT_EQ(dirty.size(), 2u);
  EXPECT_EQ(dirty[0].key, TestBlockKey(2));
  EXPECT_EQ(dirty[1].key, TestBlockKey(1));
  EXPECT_TRUE(IsOpaqueBlock(TestBlockKey(2), *dirty[0].block, 1000));
  ASSERT_EQ(tier->DirtyEntries(1).size(), 1u);
  EXPECT_EQ(tier->DirtyEntries(1)[0].key, TestBlockKey(2));

  EXPECT_TRUE(tier->MarkClean(TestBlockKey(2)));
  EXPECT_FALSE(tier->MarkClean(TestBlockKey(2)));  // already clean
  EXPECT_FALSE(tier->MarkClean(TestBlockKey(3)));  // was clean
  EXPECT_FALSE(tier->MarkClean(TestBlockKey(9)));  // absent
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.dirty_entries, 1u);
  EXPECT_EQ(s.dirty_bytes, 1000u);

  PutId(*tier, 4, 1000, kClean);  // evicts 2, now clean: no sink call
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
  EXPECT_THAT(sink.Keys(), IsEmpty());
}

TEST(HostTier, EraseDropsWithoutTheSink) {
  SinkLog sink;
  auto tier = MakeTier(3000, &sink);
  PutId(*tier, 1, 1000, kDirty);
  EXPECT_TRUE(tier->Erase(TestBlockKey(1)));
  EXPECT_FALSE(tier->Erase(TestBlockKey(1)));
  EXPECT_THAT(sink.Keys(), IsEmpty());
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.erases, 1u);
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.entries, 0u);
  EXPECT_EQ(s.dirty_entries, 0u);
}

TEST(HostTier, ShrinkToNeverEvictsProtectedKeys) {
  SinkLog sink;
  auto tier = MakeTier(10000, &sink);
  for (uint64_t id = 1; id <= 4; ++id) PutId(*tier, id, 1000, kDirty);
  const std::vector<BlockKey> keep = {TestBlockKey(1)};
  EXPECT_EQ(tier->ShrinkTo(2000, keep), 2000u);
  EXPECT_THAT(sink.Keys(), ElementsAre(TestBlockKey(2), TestBlockKey(3)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(4)));

  // Only protected entries left: it stops above the target.
  const std::vector<BlockKey> keep_all = {TestBlockKey(1), TestBlockKey(4)};
  EXPECT_EQ(tier->ShrinkTo(0, keep_all), 0u);
  EXPECT_EQ(tier->Stats().bytes, 2000u);
  EXPECT_EQ(tier->ShrinkTo(0), 2000u);
  EXPECT_THAT(sink.Keys(),
              ElementsAre(TestBlockKey(2), TestBlockKey(3), TestBlockKey(1), TestBlockKey(4)));
  EXPECT_EQ(tier->Stats().evictions, 4u);
}

TEST(HostTier, KeyListenerSeesEveryArrivalAndDeparture) {
  EventLog events;
  SinkLog sink;
  HostTierOptions opts;
  opts.capacity_bytes = 1000;
  opts.eviction_sink = sink.Sink();
  opts.key_listener = events.Listener();
  auto tier = std::move(HostTier::Create(std::move(opts))).value();
  PutId(*tier, 1, 1000, kDirty);
  PutId(*tier, 2, 1000, kDirty);  // evicts 1
  EXPECT_TRUE(tier->Erase(TestBlockKey(2)));
  PutId(*tier, 3, 500, kClean);
  EXPECT_EQ(tier->Clear(), 1u);
  PutId(*tier, 4, 500, kClean);
  tier.reset();  // the destructor calls neither sink nor listener
  using P = std::pair<BlockKey, KeyPresence>;
  EXPECT_THAT(events.Events(), ElementsAre(P(TestBlockKey(1), KeyPresence::kAdded),
                                           P(TestBlockKey(1), KeyPresence::kRemoved),
                                           P(TestBlockKey(2), KeyPresence::kAdded),
                                           P(TestBlockKey(2), KeyPresence::kRemoved),
                                           P(TestBlockKey(3), KeyPresence::kAdded),
                                           P(TestBlockKey(3), KeyPresence::kRemoved),
                                           P(TestBlockKey(4), KeyPresence::kAdded)));
  EXPECT_THAT(sink.Keys(), ElementsAre(TestBlockKey(1)));
}

TEST(HostTier, ReserveHoldsBudgetUntilDropped) {
  auto tier = MakeTier(3000);
  PutId(*tier, 1, 1000, kClean);
  PutId(*tier, 2, 1000, kClean);
  {
    auto r = tier->Reserve(2000);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->bytes(), 2000u);
    EXPECT_FALSE(tier->Contains(TestBlockKey(1)));  // evicted to make room
    EXPECT_EQ(tier->Stats().reserved_bytes, 2000u);
    HostBudgetStats b = tier->budget()->Stats();
    EXPECT_EQ(b.used_bytes, 1000u);
    EXPECT_EQ(b.reserved_bytes, 2000u);

    PutId(*tier, 3, 1000, kClean);  // room only by evicting 2
    EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
    // Reservations are never evicted: 1001 bytes cannot fit.
    Status s = tier->Put(TestBlockKey(4), MakeOpaqueBlock(TestBlockKey(4), 1001), kClean);
    EXPECT_THAT(s, StatusIs(StatusCode::kResourceExhausted));
    EXPECT_EQ(tier->Stats().put_failures, 1u);
    EXPECT_TRUE(tier->Contains(TestBlockKey(3)));  // a failed put evicts nothing

    auto r2 = tier->Reserve(1001);
    EXPECT_THAT(r2, StatusIs(StatusCode::kResourceExhausted));
  }
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.reserved_bytes, 0u);
  EXPECT_EQ(s.reservations, 1u);
  EXPECT_EQ(s.reservation_failures, 1u);
  EXPECT_EQ(tier->budget()->Stats().reserved_bytes, 0u);
  PutId(*tier, 5, 1000, kClean);
  PutId(*tier, 6, 1000, kClean);
  EXPECT_TRUE(tier->Contains(TestBlockKey(3)));  // the released room was enough
  EXPECT_EQ(tier->Stats().evictions, 2u);
}

TEST(HostTier, ReserveRejectsZeroAndOversize) {
  auto tier = MakeTier(3000);
  EXPECT_THAT(tier->Reserve(0), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(tier->Reserve(3001), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(tier->Stats().reservation_failures, 1u);
  EXPECT_EQ(tier->Stats().reservations, 0u);
}

TEST(HostTier, ReservationConvertsIntoAnEntry) {
  auto tier = MakeTier(3000);
  auto r = std::move(tier->Reserve(1000)).value();
  ASSERT_THAT(tier->Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), 1000), kClean, &r),
              IsOk());
  EXPECT_TRUE(r.empty());
  HostBudgetStats b = tier->budget()->Stats();
  EXPECT_EQ(b.used_bytes, 1000u);
  EXPECT_EQ(b.reserved_bytes, 0u);

  // A block larger than its reservation takes the difference from the budget.
  auto r2 = std::move(tier->Reserve(500)).value();
  ASSERT_TRUE(tier->Put(TestBlockKey(2), MakeOpaqueBlock(TestBlockKey(2), 1000), kClean, &r2).ok());
  // A smaller one gives the rest back.
  auto r3 = std::move(tier->Reserve(1000)).value();
  ASSERT_TRUE(tier->Put(TestBlockKey(3), MakeOpaqueBlock(TestBlockKey(3), 200), kClean, &r3).ok());
  b = tier->budget()->Stats();
  EXPECT_EQ(b.used_bytes, 2200u);
  EXPECT_EQ(b.reserved_bytes, 0u);
  EXPECT_EQ(tier->Stats().reserved_bytes, 0u);
  EXPECT_EQ(tier->Stats().evictions, 0u);
}

TEST(HostTier, FailedConversionKeepsTheReservation) {
  auto tier = MakeTier(3000);
  auto r = std::move(tier->Reserve(1000)).value();
  auto other = std::move(tier->Reserve(2000)).value();
  Status s = tier->Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), 1500), kClean, &r);
  EXPECT_THAT(s, StatusIs(StatusCode::kResourceExhausted));
  EXPECT_EQ(r.bytes(), 1000u);
  EXPECT_EQ(tier->budget()->Stats().reserved_bytes, 3000u);
  // The exact size fits in its own reservation.
  ASSERT_THAT(tier->Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), 1000), kClean, &r),
              IsOk());
  EXPECT_EQ(tier->budget()->Stats().reserved_bytes, 2000u);
}

TEST(HostTier, ReservationOfAnotherTierIsRejected) {
  auto budget = MakeBudget(3000);
  auto x = MakeSharedTier(budget);
  auto y = MakeSharedTier(budget);
  auto r = std::move(x->Reserve(1000)).value();
  Status s = y->Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), 1000), kClean, &r);
  EXPECT_THAT(s, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(r.bytes(), 1000u);
  EXPECT_FALSE(y->Contains(TestBlockKey(1)));
}

TEST(HostTier, ReservationMovesAndReleasesOnce) {
  auto tier = MakeTier(3000);
  auto reserved = [&] { return tier->budget()->Stats().reserved_bytes; };
  auto a = std::move(tier->Reserve(1000)).value();
  HostTier::Reservation b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.bytes(), 1000u);
  EXPECT_EQ(reserved(), 1000u);
  auto c = std::move(tier->Reserve(500)).value();
  EXPECT_EQ(reserved(), 1500u);
  c = std::move(b);  // c's 500 go back; b's 1000 move over
  EXPECT_EQ(reserved(), 1000u);
  EXPECT_EQ(c.bytes(), 1000u);
  c.Release();
  EXPECT_EQ(reserved(), 0u);
  c.Release();  // a second release is a no-op
  EXPECT_EQ(reserved(), 0u);
  EXPECT_EQ(tier->Stats().reserved_bytes, 0u);
}

TEST(HostTier, ReservationMayOutliveItsTier) {
  auto budget = MakeBudget(3000);
  auto tier = MakeSharedTier(budget);
  auto r = std::move(tier->Reserve(1000)).value();
  tier.reset();
  EXPECT_EQ(budget->Stats().reserved_bytes, 1000u);
  EXPECT_EQ(budget->Stats().tiers, 0u);
  r.Release();
  EXPECT_EQ(budget->Stats().reserved_bytes, 0u);
}

TEST(SharedHostBudget, TwoTiersEvictInGlobalLruOrder) {
  auto budget = MakeBudget(3000);
  SinkLog sink_x, sink_y;
  auto x = MakeSharedTier(budget, &sink_x);
  auto y = MakeSharedTier(budget, &sink_y);
  PutId(*x, 1, 1000, kDirty);
  PutId(*y, 2, 1000, kDirty);
  PutId(*x, 3, 1000, kDirty);
  ASSERT_TRUE(x->Get(TestBlockKey(1)).ok());  // global order: y2, x3, x1

  PutId(*y, 4, 1000, kDirty);  // evicts y2
  EXPECT_THAT(sink_y.Keys(), ElementsAre(TestBlockKey(2)));
  EXPECT_THAT(sink_x.Keys(), IsEmpty());
  PutId(*y, 5, 1000, kDirty);  // evicts x3: y's put evicts x's entry
  EXPECT_THAT(sink_x.Keys(), ElementsAre(TestBlockKey(3)));
  PutId(*x, 6, 1000, kDirty);  // evicts x1
  EXPECT_THAT(sink_x.Keys(), ElementsAre(TestBlockKey(3), TestBlockKey(1)));
  EXPECT_THAT(sink_y.Keys(), ElementsAre(TestBlockKey(2)));

  HostBudgetStats b = budget->Stats();
  EXPECT_EQ(b.used_bytes, 3000u);
  EXPECT_EQ(b.entries, 3u);
  EXPECT_EQ(b.tiers, 2u);
  EXPECT_EQ(b.evictions, 3u);
  EXPECT_EQ(x->Stats().evictions, 2u);
  EXPECT_EQ(x->Stats().dirty_evictions, 2u);
  EXPECT_EQ(x->Stats().bytes, 1000u);
  EXPECT_EQ(y->Stats().evictions, 1u);
  EXPECT_EQ(y->Stats().bytes, 2000u);
}

TEST(SharedHostBudget, ShrinkToProtectsKeysInEveryTier) {
  auto budget = MakeBudget(10000);
  SinkLog sink_x, sink_y;
  auto x = MakeSharedTier(budget, &sink_x);
  auto y = MakeSharedTier(budget, &sink_y);
  PutId(*x, 1, 1000, kDirty);
  PutId(*y, 2, 1000, kDirty);
  PutId(*x, 3, 1000, kDirty);
  PutId(*y, 4, 1000, kClean);
  const std::vector<BlockKey> keep = {TestBlockKey(1), TestBlockKey(4)};
  EXPECT_EQ(budget->ShrinkTo(1000, keep), 2000u);  // stops at 2000: the rest is protected
  EXPECT_THAT(sink_x.Keys(), ElementsAre(TestBlockKey(3)));
  EXPECT_THAT(sink_y.Keys(), ElementsAre(TestBlockKey(2)));
  EXPECT_TRUE(x->Contains(TestBlockKey(1)));
  EXPECT_TRUE(y->Contains(TestBlockKey(4)));
  EXPECT_EQ(budget->Stats().used_bytes, 2000u);
}

TEST(SharedHostBudget, ClearAllClearsEveryTier) {
  auto budget = MakeBudget(10000);
  SinkLog sink_x, sink_y;
  auto x = MakeSharedTier(budget, &sink_x);
  auto y = MakeSharedTier(budget, &sink_y);
  PutId(*x, 1, 1000, kDirty);
  PutId(*y, 2, 1000, kClean);
  PutId(*y, 3, 1000, kDirty);
  EXPECT_EQ(budget->ClearAll(), 3u);
  EXPECT_THAT(sink_x.Keys(), ElementsAre(TestBlockKey(1)));
  EXPECT_THAT(sink_y.Keys(), ElementsAre(TestBlockKey(3)));
  HostBudgetStats b = budget->Stats();
  EXPECT_EQ(b.used_bytes, 0u);
  EXPECT_EQ(b.entries, 0u);
  EXPECT_EQ(x->Stats().entries, 0u);
  EXPECT_EQ(y->Stats().entries, 0u);
}

TEST(SharedHostBudget, DroppingATierReleasesItsShare) {
  auto budget = MakeBudget(3000);
  SinkLog sink_x;
  auto x = MakeSharedTier(budget, &sink_x);
  auto y = MakeSharedTier(budget);
  PutId(*x, 1, 1000, kDirty);
  PutId(*x, 2, 1000, kDirty);
  PutId(*y, 3, 1000, kDirty);
  x.reset();
  HostBudgetStats b = budget->Stats();
  EXPECT_EQ(b.used_bytes, 1000u);
  EXPECT_EQ(b.entries, 1u);
  EXPECT_EQ(b.tiers, 1u);
  EXPECT_THAT(sink_x.Keys(), IsEmpty());
  PutId(*y, 4, 1000, kDirty);
  PutId(*y, 5, 1000, kDirty);
  EXPECT_TRUE(y->Contains(TestBlockKey(3)));
  EXPECT_EQ(y->Stats().evictions, 0u);
}

// A sink call in flight on another thread keeps the tier's destructor
// waiting: when the sink returns, the destructor has not finished.
TEST(SharedHostBudget, DestroyingATierWaitsForItsSinkCallsInFlight) {
  auto budget = MakeBudget(1000);
  std::atomic<bool> in_sink{false}, destroying{false}, destroyed{false};
  std::atomic<bool> destroyed_before_sink_returned{true};
  HostTierOptions opts;
  opts.shared_budget = budget;
  opts.eviction_sink = [&](const BlockKey&, SharedBlock) {
    in_sink = true;
    while (!destroying) std::this_thread::yield();
    // Give the destructor every chance to run past a missing wait.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    destroyed_before_sink_returned = destroyed.load();
    return Status::Ok();
  };
  auto x = std::move(HostTier::Create(std::move(opts))).value();
  auto y = MakeSharedTier(budget);
  PutId(*x, 1, 1000, kDirty);
  std::thread evictor([&] { PutId(*y, 2, 1000, kClean); });  // evicts x1 → x's sink
  while (!in_sink) std::this_thread::yield();
  std::thread destroyer([&] {
    destroying = true;
    x.reset();
    destroyed = true;
  });
  evictor.join();
  destroyer.join();
  EXPECT_FALSE(destroyed_before_sink_returned.load());
  EXPECT_TRUE(destroyed.load());
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// While an evicted dirty entry's sink call runs, Get still serves it (a
// hit, counted as a handoff hit, not re-added); once the sink has returned
// it is a miss. Without this a block moving to the lower tier is briefly
// in neither tier.
TEST(HostTier, EvictedDirtyEntryStaysReadableUntilItsSinkReturns) {
  std::atomic<bool> in_sink{false}, release{false};
  HostTierOptions opts;
  opts.capacity_bytes = 1000;
  opts.eviction_sink = [&](const BlockKey&, SharedBlock) {
    in_sink = true;
    while (!release) std::this_thread::yield();
    return Status::Ok();
  };
  auto tier = std::move(HostTier::Create(std::move(opts))).value();
  PutId(*tier, 1, 1000, kDirty);
  std::thread evictor([&] { PutId(*tier, 2, 1000, kClean); });  // evicts 1 → sink
  while (!in_sink) std::this_thread::yield();

  std::vector<std::byte> dst(1000);
  auto got = tier->Get(TestBlockKey(1), dst);
  ASSERT_THAT(got, IsOk());
  ASSERT_NE(*got, nullptr);
  EXPECT_TRUE(IsOpaqueBlock(TestBlockKey(1), **got, 1000));
  EXPECT_EQ(std::memcmp(dst.data(), (*got)->data(), 1000), 0);
  EXPECT_FALSE(tier->Contains(TestBlockKey(1)));  // not re-added
  // A too-small buffer is refused for a handed-off block as for any other.
  std::vector<std::byte> small(10);
  EXPECT_THAT(tier->Get(TestBlockKey(1), small), StatusIs(StatusCode::kInvalidArgument));

  release = true;
  evictor.join();
  auto after = tier->Get(TestBlockKey(1));
  ASSERT_THAT(after, IsOk());
  EXPECT_EQ(*after, nullptr);
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.handoff_hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.entries, 1u);
  EXPECT_EQ(s.bytes, 1000u);
}

}  // namespace
}  // namespace kvtier

namespace kvtier {
namespace {

// GetMany is Get per key under one lock: same bytes, hits, misses, LRU
// touches and size errors.
TEST(HostTier, GetManyIsGetPerKey) {
  auto tier = MakeTier(3000);
  PutId(*tier, 1, 1000, kDirty);
  PutId(*tier, 2, 1000, kClean);
  PutId(*tier, 3, 1000, kClean);
  std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(9), TestBlockKey(2)};
  std::vector<std::vector<std::byte>> bufs = {
      std::vector<std::byte>(1000), std::vector<std::byte>(1000), std::vector<std::byte>(999)};
  std::vector<std::span<std::byte>> dsts(bufs.begin(), bufs.end());
  auto got = tier->GetMany(keys, dsts);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_THAT(got[0], IsOk());
  ASSERT_NE(*got[0], nullptr);
  EXPECT_TRUE(IsOpaqueBlock(TestBlockKey(1), **got[0], 1000));
  EXPECT_EQ(std::memcmp(bufs[0].data(), (*got[0])->data(), 1000), 0);
  ASSERT_THAT(got[1], IsOk());
  EXPECT_EQ(*got[1], nullptr);
  EXPECT_THAT(got[2], StatusIs(StatusCode::kInvalidArgument));
  HostTierStats s = tier->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  // Key 1 was touched, key 2 (refused) was not: 2 is now the LRU victim.
  PutId(*tier, 4, 1000, kClean);
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));
  // Without buffers: blocks only. Mismatched lengths: every key refused.
  auto no_copy = tier->GetMany(keys);
  ASSERT_THAT(no_copy[0], IsOk());
  EXPECT_NE(*no_copy[0], nullptr);
  auto mismatched = tier->GetMany(keys, std::span(dsts).first(2));
  ASSERT_EQ(mismatched.size(), 3u);
  for (const auto& r : mismatched) EXPECT_THAT(r, StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace kvtier
