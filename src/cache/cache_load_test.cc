// TieredCache loads: host budget reserved before each disk read and given
// back when the read fails, when the future is dropped early, and when the
// cache closes; loads still served when no budget can be reserved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <thread>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/fault_env.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Blocks;
using cache_test::Buffers;
using cache_test::CheckLoaded;
using cache_test::DiskOptions;
using cache_test::GateEnv;
using cache_test::Keys;
using cache_test::OpenCache;
using cache_test::Seed;
using cache_test::TempDir;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

TEST(CacheLoad, ReservationIsReleasedWhenTheDiskReadFails) {
  TempDir dir;
  const auto keys = Keys(0, 2);
  Seed(dir.path(), keys);
  FaultInjectionEnv env(Env::Default());
  auto cache = OpenCache(DiskOptions(dir.path(), 4), &env);
  env.FailAll(OpKind::kRead, EIO);

  Buffers buf(2);
  auto f = cache->Load(keys, buf.spans);
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kNone);
  EXPECT_EQ((*got)[1].tier, CacheTier::kNone);
  EXPECT_EQ(env.Injected(OpKind::kRead), 2);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.host.reservations, 2u);    // reserved before the reads...
  EXPECT_EQ(s.host.reserved_bytes, 0u);  // ...and given back
  EXPECT_EQ(s.host_budget.reserved_bytes, 0u);
  EXPECT_EQ(s.host_budget.used_bytes, 0u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.misses, 2u);

  env.Clear();
  auto again = cache->Load(keys, buf.spans);
  ASSERT_THAT(again, IsOk());
  auto ok = again->Get();
  ASSERT_THAT(ok, IsOk());
  EXPECT_EQ((*ok)[0].tier, CacheTier::kDisk);
  EXPECT_THAT(CheckLoaded(keys[0], buf.spans[0], (*ok)[0].bytes), IsOk());
  EXPECT_EQ(cache->Stats().promotions, 2u);
}

// The future is dropped while its read is held at the gate: the destructor
// cancels the load, waits for the read (it writes into the caller's
// buffer), then the reservation is gone and nothing was promoted.
TEST(CacheLoad, ReservationIsReleasedWhenTheFutureIsDroppedEarly) {
  TempDir dir;
  const auto keys = Keys(0, 1);
  Seed(dir.path(), keys);
  GateEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.disk->read_threads = 0;
  auto cache = OpenCache(o, &env);

  env.reads.Close();
  Buffers buf(1);
  auto f = cache->Load(keys, buf.spans);
  ASSERT_THAT(f, IsOk());
  env.reads.AwaitWaiters(1);
  EXPECT_FALSE(f->Ready());
  EXPECT_EQ(cache->Stats().host.reserved_bytes, BlockBytes());

  // Held here, the state shows when the destructor has cancelled the load;
  // only then is the read let through, so it cannot promote.
  std::shared_ptr<cache_internal::LoadState> state = cache_internal::LoadFutureAccess::State(*f);
  std::atomic<bool> gate_opened{false};
  bool returned_after_the_read = false;
  Status buffer_at_return = Status::Internal("the destructor did not return");
  std::thread dropper([&] {
    { LoadFuture gone = std::move(f).value(); }  // destroyed here
    returned_after_the_read = gate_opened.load();
    buffer_at_return = CheckLoaded(keys[0], buf.spans[0], BlockBytes());
  });
  while (!state->cancelled.load()) std::this_thread::yield();
  gate_opened = true;
  env.reads.Open();
  dropper.join();
  // The destructor returned only after the read had filled the buffer.
  EXPECT_TRUE(returned_after_the_read);
  EXPECT_THAT(buffer_at_return, IsOk());
  state.reset();
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.host.reserved_bytes, 0u);
  EXPECT_EQ(s.host_budget.reserved_bytes, 0u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.host.entries, 0u);
  EXPECT_EQ(s.hits_disk, 1u);  // the read itself completed
}

// A load with keys read in part and keys read whole (a restore: the blocks a
// window or a recurrent state needs whole after many read in part) reads
// both parts at once: with every disk read held at the gate, one read of
// each part waits there. One part after the other, only one ever would (the
// wait below is bounded so that a failure cannot hang; it checks no speed).
TEST(CacheLoad, PartialAndWholeDiskReadsOfOneLoadRunAtOnce) {
  TempDir dir;
  const auto keys = Keys(0, 2);
  Seed(dir.path(), keys);
  GateEnv env(Env::Default());
  auto cache = OpenCache(DiskOptions(dir.path(), 4), &env);
  env.reads.Close();
  SharedLoadOptions lo;
  lo.tensor_masks = {{false, true, false, false}, {}};  // key 1: whole
  auto f = cache->LoadShared(keys, std::move(lo));
  ASSERT_THAT(f, IsOk());
  for (int i = 0; i < 20000 && env.reads.waiting() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(env.reads.waiting(), 2);
  env.reads.Open();
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  ASSERT_EQ(got->size(), 2u);
  EXPECT_EQ((*got)[0].tier, CacheTier::kDisk);
  EXPECT_EQ((*got)[1].tier, CacheTier::kDisk);
  EXPECT_EQ(cache->Stats().hits_disk, 2u);
  EXPECT_EQ(cache->Stats().promotions, 1u);  // the whole block only
}

// A load queued behind another, cancelled and dropped before it started: it reserves
// nothing and reads nothing.
TEST(CacheLoad, ALoadDroppedBeforeItStartsReservesAndReadsNothing) {
  TempDir dir;
  const auto keys = Keys(0, 2);
  Seed(dir.path(), keys);
  GateEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.load_threads = 1;
  o.disk->read_threads = 0;
  auto cache = OpenCache(o, &env);

  env.reads.Close();
  Buffers first_buf(1), second_buf(1);
  auto first = cache->Load(std::span(keys).first(1), first_buf.spans);
  ASSERT_THAT(first, IsOk());
  env.reads.AwaitWaiters(1);  // the only load thread is busy
  auto second = cache->Load(std::span(keys).subspan(1, 1), second_buf.spans);
  ASSERT_THAT(second, IsOk());
  // Dropping a future cancels its load, then waits for the load thread to
  // retire it. Cancel on this thread, before the first load can end, so the
  // order does not depend on how soon another thread runs; then drop.
  second->Cancel();
  env.reads.Open();
  { LoadFuture gone = std::move(second).value(); }
  auto got = first->Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kDisk);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.loads_cancelled, 1u);
  EXPECT_EQ(s.host.reservations, 1u);
  EXPECT_EQ(s.host.reserved_bytes, 0u);
  EXPECT_EQ(s.disk->loads, 1u);
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.hits_disk, 1u);
  EXPECT_EQ(s.misses, 1u);
}

TEST(CacheLoad, CloseCancelsQueuedLoadsAndWaitsForRunningOnes) {
  TempDir dir;
  const auto keys = Keys(0, 2);
  Seed(dir.path(), keys);
  GateEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.load_threads = 1;
  o.disk->read_threads = 0;
  auto cache = OpenCache(o, &env);

  env.reads.Close();
  Buffers a(1), b(1);
  auto running = cache->Load(std::span(keys).first(1), a.spans);
  ASSERT_THAT(running, IsOk());
  env.reads.AwaitWaiters(1);
  auto queued = cache->Load(std::span(keys).subspan(1, 1), b.spans);
  ASSERT_THAT(queued, IsOk());

  Status closed;
  std::thread closer([&] { closed = cache->Close(); });
  // Close cancels the queued load at once, then waits for the running one.
  EXPECT_THAT(queued->Get(), StatusIs(StatusCode::kUnavailable));
  EXPECT_FALSE(running->Ready());
  env.reads.Open();
  closer.join();
  EXPECT_THAT(closed, IsOk());
  auto got = running->Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kDisk);
  EXPECT_THAT(CheckLoaded(keys[0], a.spans[0], (*got)[0].bytes), IsOk());
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.loads_cancelled, 1u);
  EXPECT_EQ(s.host_budget.reserved_bytes, 0u);
}

// No budget can be reserved (another tier on the budget reserved all of
// it): the block is still served, just not promoted.
TEST(CacheLoad, WithoutBudgetABlockIsLoadedButNotPromoted) {
  TempDir dir;
  const auto keys = Keys(0, 1);
  Seed(dir.path(), keys);
  auto budget = SharedHostBudget::Create(4 * BlockBytes()).value();
  HostTierOptions other_opts;
  other_opts.shared_budget = budget;
  auto other = HostTier::Create(other_opts).value();
  auto hog = other->Reserve(4 * BlockBytes());
  ASSERT_THAT(hog, IsOk());

  CacheOptions o = DiskOptions(dir.path(), 4);
  o.host.shared_budget = budget;
  auto cache = OpenCache(o);
  Buffers buf(1);
  auto f = cache->Load(keys, buf.spans);
  ASSERT_THAT(f, IsOk());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kDisk);
  EXPECT_THAT(CheckLoaded(keys[0], buf.spans[0], (*got)[0].bytes), IsOk());
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.reservation_failures, 1u);
  EXPECT_EQ(s.promotion_failures, 1u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.host.reservation_failures, 1u);
  EXPECT_EQ(s.host_budget.reserved_bytes, 4 * BlockBytes());
  EXPECT_EQ(s.host_budget.used_bytes, 0u);
}

// load_threads = 0: everything on the caller's thread, the future is ready
// when Load returns.
TEST(CacheLoad, WithoutLoadThreadsTheFutureIsReadyAtOnce) {
  TempDir dir;
  const auto keys = Keys(0, 3);
  Seed(dir.path(), keys);
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.load_threads = 0;
  auto cache = OpenCache(o);
  Buffers buf(3);
  auto f = cache->Load(keys, buf.spans);
  ASSERT_THAT(f, IsOk());
  EXPECT_TRUE(f->Ready());
  auto got = f->Get();
  ASSERT_THAT(got, IsOk());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ((*got)[i].tier, CacheTier::kDisk);
    EXPECT_THAT(CheckLoaded(keys[i], buf.spans[i], (*got)[i].bytes), IsOk());
  }
  // Get may be called again; a moved-from future is not valid.
  EXPECT_THAT(f->Get(), IsOk());
  LoadFuture moved = std::move(f).value();
  EXPECT_TRUE(moved.valid());
}

}  // namespace
}  // namespace kvtier
