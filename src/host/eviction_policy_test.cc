#include "kvtier/eviction_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvtier/host_tier.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using host_internal::Admission;
using host_internal::EvictionList;
using host_internal::GhostList;
using host_internal::KeyFingerprint;
using host_internal::Removal;
using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

struct Item {
  int id = 0;
  bool reused = false;
};

// An EvictionList of ints with the key map a caller keeps.
class Script {
 public:
  explicit Script(HostEvictionPolicy policy) : list_(policy) {}

  void Insert(int id, Admission a = Admission::kNew) {
    pos_[id] = list_.Insert(Item{id}, static_cast<uint64_t>(id), a);
  }
  void Touch(int id) { list_.Touch(pos_.at(id)); }
  // Evicts the front; returns its id.
  int Evict() {
    auto it = list_.begin();
    const int id = it->id;
    pos_.erase(id);
    list_.Remove(it, static_cast<uint64_t>(id), Removal::kEvicted);
    return id;
  }
  void Erase(int id) {
    list_.Remove(pos_.at(id), static_cast<uint64_t>(id), Removal::kErased);
    pos_.erase(id);
  }
  // Ids front (next victim) to back, with '*' marking reused ones.
  std::vector<std::string> Order() const {
    std::vector<std::string> out;
    for (const Item& i : list_) out.push_back(std::to_string(i.id) + (i.reused ? "*" : ""));
    return out;
  }
  EvictionList<Item>& list() { return list_; }

 private:
  EvictionList<Item> list_;
  std::unordered_map<int, EvictionList<Item>::iterator> pos_;
};

TEST(HostEvictionPolicy, NamesRoundTripAndUnknownNamesAreRejected) {
  EXPECT_EQ(HostEvictionPolicyName(HostEvictionPolicy::kLru), "lru");
  EXPECT_EQ(HostEvictionPolicyName(HostEvictionPolicy::kReuse), "reuse");
  EXPECT_EQ(*ParseHostEvictionPolicy("lru"), HostEvictionPolicy::kLru);
  EXPECT_EQ(*ParseHostEvictionPolicy("reuse"), HostEvictionPolicy::kReuse);
  Result<HostEvictionPolicy> bad = ParseHostEvictionPolicy("LRU2");
  EXPECT_THAT(bad, StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("'LRU2'")));
}

TEST(HostEvictionPolicy, FingerprintIsTheFirstEightBytesLittleEndian) {
  BlockKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(KeyFingerprint(k), 0x0807060504030201ull);
}

TEST(GhostList, RemembersNewestAndForgetsOldestFirst) {
  GhostList g;
  g.Add(1);
  g.Add(2);
  g.Add(3);
  g.Add(1);  // now the newest
  g.Trim(2);
  EXPECT_EQ(g.size(), 2u);
  EXPECT_FALSE(g.Take(2));
  EXPECT_TRUE(g.Take(3));
  EXPECT_FALSE(g.Take(3));
  EXPECT_TRUE(g.Take(1));
  EXPECT_EQ(g.size(), 0u);
}

TEST(EvictionList, LruEvictsLeastRecentlyUsed) {
  Script s(HostEvictionPolicy::kLru);
  for (int id : {1, 2, 3, 4}) s.Insert(id);
  s.Touch(1);
  s.Touch(3);
  EXPECT_THAT(s.Order(), ElementsAre("2", "4", "1", "3"));
  EXPECT_EQ(s.Evict(), 2);
  // LRU keeps no ghost: a re-insert is an ordinary new entry.
  s.Insert(2);
  EXPECT_THAT(s.Order(), ElementsAre("4", "1", "3", "2"));
  EXPECT_EQ(s.list().ghost_hits(), 0u);
  EXPECT_EQ(s.list().ghost_size(), 0u);
}

TEST(EvictionList, ReuseEvictsNotYetReusedFirstThenLru) {
  Script s(HostEvictionPolicy::kReuse);
  for (int id : {1, 2, 3, 4}) s.Insert(id);
  s.Touch(3);
  s.Touch(1);
  EXPECT_THAT(s.Order(), ElementsAre("2", "4", "3*", "1*"));
  s.Insert(5);  // new entries join the not-reused segment's back
  EXPECT_THAT(s.Order(), ElementsAre("2", "4", "5", "3*", "1*"));
  EXPECT_EQ(s.Evict(), 2);
  EXPECT_EQ(s.Evict(), 4);
  s.Touch(3);  // first reused entry moves to the back
  EXPECT_THAT(s.Order(), ElementsAre("5", "1*", "3*"));
  EXPECT_EQ(s.Evict(), 5);
  // Only reused entries left: plain LRU among them.
  EXPECT_EQ(s.Evict(), 1);
  EXPECT_THAT(s.Order(), ElementsAre("3*"));
  s.Touch(3);  // the only entry, touched: still consistent
  s.Insert(6);
  EXPECT_THAT(s.Order(), ElementsAre("6", "3*"));
}

TEST(EvictionList, ReuseRemembersEvictedKeysButNotErasedOnes) {
  Script s(HostEvictionPolicy::kReuse);
  for (int id : {1, 2, 3}) s.Insert(id);
  EXPECT_EQ(s.Evict(), 1);
  s.Erase(2);
  EXPECT_EQ(s.list().ghost_size(), 1u);
  s.Insert(1);  // remembered: reused at once
  s.Insert(2);  // erased, not remembered: new
  EXPECT_THAT(s.Order(), ElementsAre("3", "2", "1*"));
  EXPECT_EQ(s.list().ghost_hits(), 1u);
  EXPECT_EQ(s.list().ghost_size(), 0u);
}

TEST(EvictionList, ReuseGhostHoldsFourTimesTheEntries) {
  Script s(HostEvictionPolicy::kReuse);
  s.Insert(1000);
  // Each eviction leaves 1 entry; the ghost keeps 4 × (1 + 1) = 8 keys.
  for (int id = 1; id <= 20; ++id) {
    s.Insert(id);
    EXPECT_EQ(s.Evict(), id == 1 ? 1000 : id - 1);
  }
  EXPECT_EQ(s.list().ghost_size(), 8u);
  s.Insert(11);  // forgotten (evicted 9 evictions ago)
  s.Insert(12);  // remembered
  EXPECT_THAT(s.Order(), ElementsAre("20", "11", "12*"));
}

TEST(EvictionList, ExtractAndReinsertAsReused) {
  Script s(HostEvictionPolicy::kReuse);
  for (int id : {1, 2, 3}) s.Insert(id);
  s.Touch(2);
  auto node = s.list().Extract(s.list().begin());  // 1
  EXPECT_THAT(s.Order(), ElementsAre("3", "2*"));
  s.list().Insert(std::move(node), 1, Admission::kReused);
  EXPECT_THAT(s.Order(), ElementsAre("3", "2*", "1*"));
  // Extracting the first reused entry keeps the segments right.
  auto two = std::next(s.list().begin());
  auto node2 = s.list().Extract(two);
  EXPECT_THAT(s.Order(), ElementsAre("3", "1*"));
  s.Insert(4);
  EXPECT_THAT(s.Order(), ElementsAre("3", "4", "1*"));
  EXPECT_EQ(s.list().ghost_size(), 0u);  // extraction is not eviction
}

// ---- The policy inside a HostTier ----

// Records the keys handed to a sink, in order.
struct SinkKeys {
  std::mutex mu;
  std::vector<uint64_t> ids;
  std::unordered_map<BlockKey, uint64_t, BlockKeyHash> id_of;

  HostEvictionSink Sink() {
    return [this](const BlockKey& key, SharedBlock) {
      std::lock_guard<std::mutex> lock(mu);
      ids.push_back(id_of.at(key));
      return Status::Ok();
    };
  }
  std::vector<uint64_t> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(ids, {});
  }
};

// Runs the same script on a 4-block tier under `policy`; returns the
// eviction order.
std::vector<uint64_t> RunScript(HostEvictionPolicy policy, HostBudgetStats* stats) {
  constexpr size_t kBlock = 100;
  SinkKeys sink;
  for (uint64_t id = 1; id <= 9; ++id) sink.id_of[TestBlockKey(id)] = id;
  HostTierOptions opts;
  opts.capacity_bytes = 4 * kBlock;
  opts.eviction_policy = policy;
  opts.eviction_sink = sink.Sink();
  auto tier = HostTier::Create(std::move(opts));
  EXPECT_TRUE(tier.ok());
  auto put = [&](uint64_t id) {
    EXPECT_TRUE((*tier)
                    ->Put(TestBlockKey(id), MakeOpaqueBlock(TestBlockKey(id), kBlock),
                          HostEntryState::kDirty)
                    .ok());
  };
  for (uint64_t id : {1, 2, 3, 4}) put(id);
  EXPECT_NE(*(*tier)->Get(TestBlockKey(1)), nullptr);  // 1 is reused
  put(5);
  put(6);
  put(2);  // evicted a moment ago: remembered under kReuse
  put(7);
  put(8);
  put(9);
  *stats = (*tier)->budget()->Stats();
  std::vector<uint64_t> order = sink.Take();
  // What is left, in eviction order.
  for (const HostTier::DirtyEntry& e : (*tier)->DirtyEntries()) order.push_back(sink.id_of[e.key]);
  return order;
}

TEST(HostTierPolicy, LruEvictionOrderOnAScript) {
  HostBudgetStats stats;
  // 5 evicts 2; 6 evicts 3; 2 evicts 4; 7 evicts 1; 8 evicts 5; 9 evicts 6.
  // Left: 2 7 8 9.
  EXPECT_THAT(RunScript(HostEvictionPolicy::kLru, &stats),
              ElementsAre(2, 3, 4, 1, 5, 6, 2, 7, 8, 9));
  EXPECT_EQ(stats.ghost_hits, 0u);
}

TEST(HostTierPolicy, ReuseEvictionOrderOnAScript) {
  HostBudgetStats stats;
  // After Get(1): [2 3 4 | 1]. 5 evicts 2; 6 evicts 3; 2 (remembered)
  // evicts 4: [5 6 | 1 2]. 7 evicts 5; 8 evicts 6; 9 evicts 7: [8 9 | 1 2].
  // The reused 1 and 2 survive every one-off block.
  EXPECT_THAT(RunScript(HostEvictionPolicy::kReuse, &stats),
              ElementsAre(2, 3, 4, 5, 6, 7, 8, 9, 1, 2));
  EXPECT_EQ(stats.ghost_hits, 1u);
}

TEST(HostTierPolicy, ReplacementCountsAsReuse) {
  constexpr size_t kBlock = 100;
  HostTierOptions opts;
  opts.capacity_bytes = 3 * kBlock;
  opts.eviction_policy = HostEvictionPolicy::kReuse;
  auto tier = HostTier::Create(std::move(opts));
  ASSERT_TRUE(tier.ok());
  HostTier& t = **tier;
  for (uint64_t id : {1, 2, 3}) {
    ASSERT_TRUE(
        t.Put(TestBlockKey(id), MakeOpaqueBlock(TestBlockKey(id), kBlock), HostEntryState::kDirty)
            .ok());
  }
  ASSERT_TRUE(
      t.Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), kBlock), HostEntryState::kClean)
          .ok());
  // Order: [2 3 | 1]; two new blocks evict 2 and 3, not 1.
  for (uint64_t id : {4, 5}) {
    ASSERT_TRUE(
        t.Put(TestBlockKey(id), MakeOpaqueBlock(TestBlockKey(id), kBlock), HostEntryState::kDirty)
            .ok());
  }
  EXPECT_TRUE(t.Contains(TestBlockKey(1)));
  EXPECT_FALSE(t.Contains(TestBlockKey(2)));
  EXPECT_FALSE(t.Contains(TestBlockKey(3)));
  std::vector<BlockKey> dirty;
  for (const auto& e : t.DirtyEntries()) dirty.push_back(e.key);
  EXPECT_THAT(dirty, ElementsAre(TestBlockKey(4), TestBlockKey(5)));
  EXPECT_EQ(t.Stats().replacements, 1u);
}

TEST(HostTierPolicy, SharedBudgetUsesItsOwnPolicy) {
  constexpr size_t kBlock = 100;
  auto budget = SharedHostBudget::Create(2 * kBlock, HostEvictionPolicy::kReuse);
  ASSERT_TRUE(budget.ok());
  HostTierOptions a_opts;
  a_opts.shared_budget = *budget;
  a_opts.eviction_policy = HostEvictionPolicy::kLru;  // ignored: the budget decides
  auto a = HostTier::Create(a_opts);
  auto b = HostTier::Create(a_opts);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(
      (*a)->Put(TestBlockKey(1), MakeOpaqueBlock(TestBlockKey(1), kBlock), HostEntryState::kClean)
          .ok());
  ASSERT_TRUE(
      (*b)->Put(TestBlockKey(2), MakeOpaqueBlock(TestBlockKey(2), kBlock), HostEntryState::kClean)
          .ok());
  EXPECT_NE(*(*a)->Get(TestBlockKey(1)), nullptr);
  EXPECT_NE(*(*a)->Get(TestBlockKey(1)), nullptr);
  ASSERT_TRUE(
      (*b)->Put(TestBlockKey(3), MakeOpaqueBlock(TestBlockKey(3), kBlock), HostEntryState::kClean)
          .ok());
  // kReuse evicts b's never-read 2; tier a's reused 1 stays.
  EXPECT_TRUE((*a)->Contains(TestBlockKey(1)));
  EXPECT_FALSE((*b)->Contains(TestBlockKey(2)));
  ASSERT_TRUE(
      (*b)->Put(TestBlockKey(4), MakeOpaqueBlock(TestBlockKey(4), kBlock), HostEntryState::kClean)
          .ok());
  EXPECT_TRUE((*a)->Contains(TestBlockKey(1)));
  EXPECT_FALSE((*b)->Contains(TestBlockKey(3)));
}

TEST(HostTierPolicy, ShrinkToFollowsThePolicyAndSkipsProtectedKeys) {
  constexpr size_t kBlock = 100;
  HostTierOptions opts;
  opts.capacity_bytes = 4 * kBlock;
  opts.eviction_policy = HostEvictionPolicy::kReuse;
  auto tier = HostTier::Create(std::move(opts));
  ASSERT_TRUE(tier.ok());
  HostTier& t = **tier;
  for (uint64_t id : {1, 2, 3, 4}) {
    ASSERT_TRUE(
        t.Put(TestBlockKey(id), MakeOpaqueBlock(TestBlockKey(id), kBlock), HostEntryState::kClean)
            .ok());
  }
  EXPECT_NE(*t.Get(TestBlockKey(1)), nullptr);
  // Order [2 3 4 | 1]; protect 3: evicts 2 and 4.
  const BlockKey keep[] = {TestBlockKey(3)};
  EXPECT_EQ(t.ShrinkTo(2 * kBlock, keep), 2 * kBlock);
  EXPECT_TRUE(t.Contains(TestBlockKey(1)));
  EXPECT_TRUE(t.Contains(TestBlockKey(3)));
  EXPECT_EQ(t.Stats().entries, 2u);
  EXPECT_THAT(t.DirtyEntries(), IsEmpty());
}

TEST(HostTierPolicy, UnknownPolicyValueIsInvalidArgument) {
  HostTierOptions opts;
  opts.eviction_policy = static_cast<HostEvictionPolicy>(7);
  EXPECT_THAT(opts.Validate(),
              StatusIs(StatusCode::kInvalidArgument, ::testing::HasSubstr("eviction_policy")));
  EXPECT_THAT(SharedHostBudget::Create(100, static_cast<HostEvictionPolicy>(7)),
              StatusIs(StatusCode::kInvalidArgument));
}

}  // namespace
}  // namespace kvtier
