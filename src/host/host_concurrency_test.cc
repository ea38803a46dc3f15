// Several threads on two HostTiers that share one budget: the budget is
// never exceeded, every dirty eviction reaches its sink exactly once with
// the right bytes, counters add up, and a signed count per key fed by the
// tiers' key listeners (what the cache's Match index keeps) ends up
// agreeing with the tiers.
#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "kvtier/host_tier.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

constexpr uint64_t kCapacity = 40000;
constexpr int kThreads = 4;
constexpr int kOpsPerThread = 4000;
constexpr uint64_t kIdsPerTier = 120;

// Each id's block size is fixed, so any copy can be checked.
size_t SizeOf(uint64_t id) { return 200 + (id * 7919) % 1800; }

// A key listener's view: +1 per kAdded, -1 per kRemoved, per key.
class PresenceCounts {
 public:
  void Apply(const BlockKey& key, KeyPresence change) {
    std::lock_guard<std::mutex> lock(mu_);
    counts_[key] += change == KeyPresence::kAdded ? 1 : -1;
  }
  int64_t Count(const BlockKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = counts_.find(key);
    return it == counts_.end() ? 0 : it->second;
  }
  uint64_t Present() {
    std::lock_guard<std::mutex> lock(mu_);
    uint64_t n = 0;
    for (const auto& [key, c] : counts_) n += c > 0 ? 1 : 0;
    return n;
  }

 private:
  std::mutex mu_;
  std::map<BlockKey, int64_t> counts_;
};

// Ids of tier 0 are [0, kIdsPerTier), of tier 1 [kIdsPerTier, 2*kIdsPerTier).
struct TierUnderTest {
  std::unique_ptr<HostTier> tier;
  std::atomic<uint64_t> sink_calls{0};
  std::atomic<uint64_t> sink_wrong_bytes{0};
};

TEST(HostTierConcurrency, BudgetHoldsAndEveryCounterAddsUp) {
  auto budget = std::move(SharedHostBudget::Create(kCapacity)).value();
  PresenceCounts index;
  std::atomic<uint64_t> over_budget{0};
  auto check_budget = [&] {
    HostBudgetStats b = budget->Stats();
    if (b.used_bytes + b.reserved_bytes > b.capacity_bytes) ++over_budget;
  };

  TierUnderTest tiers[2];
  for (int t = 0; t < 2; ++t) {
    TierUnderTest* tut = &tiers[t];
    HostTierOptions opts;
    opts.shared_budget = budget;
    opts.eviction_sink = [tut, t, &check_budget](const BlockKey& key, SharedBlock block) {
      // Find the id: keys are TestBlockKey(id) for ids of this tier.
      uint64_t id = UINT64_MAX;
      for (uint64_t i = t * kIdsPerTier; i < (t + 1) * kIdsPerTier; ++i) {
        if (TestBlockKey(i) == key) id = i;
      }
      if (id == UINT64_MAX || !IsOpaqueBlock(key, *block, SizeOf(id))) ++tut->sink_wrong_bytes;
      ++tut->sink_calls;
      check_budget();  // sinks run outside the budget's lock
      return Status::Ok();
    };
    opts.key_listener = [&index](const BlockKey& key, KeyPresence change) {
      index.Apply(key, change);
    };
    tut->tier = std::move(HostTier::Create(std::move(opts))).value();
  }

  std::atomic<bool> done{false};
  std::thread monitor([&] {
    while (!done) check_budget();
  });

  std::atomic<uint64_t> wrong_reads{0}, errors{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      uint64_t rng = 1000 + w;
      std::vector<std::byte> dst(2048);
      for (int op = 0; op < kOpsPerThread; ++op) {
        const int t = SplitMix64Next(rng) % 2;
        HostTier& tier = *tiers[t].tier;
        const uint64_t id = t * kIdsPerTier + SplitMix64Next(rng) % kIdsPerTier;
        const BlockKey key = TestBlockKey(id);
        switch (SplitMix64Next(rng) % 10) {
          case 0:
          case 1:
          case 2: {
            const auto state =
                SplitMix64Next(rng) % 2 ? HostEntryState::kDirty : HostEntryState::kClean;
            if (!tier.Put(key, MakeOpaqueBlock(key, SizeOf(id)), state).ok()) ++errors;
            break;
          }
          case 3:
          case 4:
          case 5: {
            auto got = tier.Get(key, dst);
            if (!got.ok()) {
              ++errors;
            } else if (*got != nullptr) {
              auto copy = BlockBuffer::CopyOf(std::span(dst).first(SizeOf(id)));
              if (!IsOpaqueBlock(key, **got, SizeOf(id)) || !copy.ok() ||
                  !IsOpaqueBlock(key, *copy, SizeOf(id))) {
                ++wrong_reads;
              }
            }
            break;
          }
          case 6: {
            // Load path: reserve, then convert into an entry or drop.
            auto r = tier.Reserve(SizeOf(id));
            if (!r.ok()) break;  // other threads' reservations hold the room
            check_budget();
            if (SplitMix64Next(rng) % 2 == 0) {
              Status s =
                  tier.Put(key, MakeOpaqueBlock(key, SizeOf(id)), HostEntryState::kClean, &*r);
              if (!s.ok() || !r->empty()) ++errors;
            }
            break;
          }
          case 7:
            tier.MarkClean(key);
            break;
          case 8:
            tier.Erase(key);
            break;
          case 9:
            if (SplitMix64Next(rng) % 20 == 0) {
              tier.ShrinkTo(kCapacity / 4);
            } else {
              (void)tier.Contains(key);
            }
            break;
        }
      }
    });
  }
  for (auto& th : workers) th.join();
  done = true;
  monitor.join();

  EXPECT_EQ(over_budget.load(), 0u);
  EXPECT_EQ(wrong_reads.load(), 0u);
  EXPECT_EQ(errors.load(), 0u);

  HostBudgetStats b = budget->Stats();
  EXPECT_EQ(b.reserved_bytes, 0u);
  uint64_t bytes = 0, entries = 0;
  for (int t = 0; t < 2; ++t) {
    HostTier& tier = *tiers[t].tier;
    HostTierStats s = tier.Stats();
    SCOPED_TRACE("tier " + std::to_string(t));
    EXPECT_EQ(tiers[t].sink_wrong_bytes.load(), 0u);
    // Each dirty eviction made exactly one sink call.
    EXPECT_EQ(tiers[t].sink_calls.load(), s.dirty_evictions);
    EXPECT_GT(s.dirty_evictions, 0u);
    EXPECT_EQ(s.dirty_dropped, 0u);
    EXPECT_EQ(s.rejections, 0u);
    EXPECT_EQ(s.sink_errors, 0u);
    EXPECT_EQ(s.reserved_bytes, 0u);
    // Entries in = entries out + entries left.
    EXPECT_EQ(s.puts - s.replacements, s.erases + s.evictions + s.entries);
    // The gauges equal a recount of the entries.
    uint64_t recount_entries = 0, recount_bytes = 0, recount_dirty = 0;
    for (uint64_t id = t * kIdsPerTier; id < (t + 1) * kIdsPerTier; ++id) {
      const BlockKey key = TestBlockKey(id);
      const bool present = tier.Contains(key);
      if (present) {
        ++recount_entries;
        recount_bytes += SizeOf(id);
      }
      // The counts, fed only by listener events, agree with the tier.
      ASSERT_EQ(index.Count(key), present ? 1 : 0) << id;
    }
    for (const auto& d : tier.DirtyEntries()) {
      (void)d;
      ++recount_dirty;
    }
    EXPECT_EQ(s.entries, recount_entries);
    EXPECT_EQ(s.bytes, recount_bytes);
    EXPECT_EQ(s.dirty_entries, recount_dirty);
    bytes += s.bytes;
    entries += s.entries;
  }
  EXPECT_EQ(b.used_bytes, bytes);
  EXPECT_EQ(b.entries, entries);
  EXPECT_EQ(index.Present(), entries);
}

}  // namespace
}  // namespace kvtier
