// Property test: random allocate / append / advance / rollback / remove /
// evict / active-set changes against a reference model.
//
// The model knows each live sequence's tokens, each evicted sequence's tokens,
// and every token prefix ever committed up to a block boundary. With a
// store that keeps every block (kOnFill, never failing), the longest reusable
// prefix of a new Allocate is exactly predictable: the longest committed
// block prefix (or, for an evicted id, its own tokens), capped to leave one
// token. With slots to spare the pool must return exactly that; under slot
// pressure it may return less (never more). After every step each live
// sequence's K/V must equal the oracle's and the refcounts must equal the
// number of block tables holding each slot.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <random>
#include <set>
#include <vector>

#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "testing/map_backing_store.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestLayout;
using ::kvtier::pool_testing::TestOptions;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

constexpr size_t kPropTokens = 4;
constexpr uint64_t kIds = 8;

struct Config {
  uint32_t total_blocks;
  bool exact;  // enough slots that every Allocate matches the model exactly
  EvictionPolicy eviction;
  bool retain;
  uint64_t seed;
};

void PrintTo(const Config& c, std::ostream* os) {
  *os << EvictionPolicyName(c.eviction) << " blocks=" << c.total_blocks << " seed=" << c.seed
      << (c.retain ? " retain" : "") << (c.exact ? " exact" : "");
}

size_t CommonPrefix(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  size_t n = std::min(a.size(), b.size()), i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

class Model {
 public:
  std::map<uint64_t, std::vector<uint32_t>> live, evicted;
  std::set<std::vector<uint32_t>> committed;  // block-boundary prefixes
  std::vector<std::vector<uint32_t>> history;

  void Commit(const std::vector<uint32_t>& tokens) {
    for (size_t k = kPropTokens; k <= tokens.size(); k += kPropTokens) {
      committed.emplace(tokens.begin(), tokens.begin() + k);
    }
    history.push_back(tokens);
  }

  // What Allocate(id, tokens) may return at most (exactly, with free slots).
  size_t Expected(uint64_t id, const std::vector<uint32_t>& tokens) const {
    const size_t cap = tokens.empty() ? 0 : tokens.size() - 1;
    auto it = live.find(id);
    if (it != live.end()) return std::min(CommonPrefix(it->second, tokens), cap);
    const size_t useful = std::min(tokens.size() / kPropTokens, (cap + kPropTokens - 1) / kPropTokens);
    size_t blocks = 0;
    while (blocks < useful && committed.count(std::vector<uint32_t>(
                                  tokens.begin(), tokens.begin() + (blocks + 1) * kPropTokens)) != 0) {
      ++blocks;
    }
    size_t base = blocks * kPropTokens;
    auto rit = evicted.find(id);
    if (rit != evicted.end()) {
      const auto& rec = rit->second;
      if (blocks == rec.size() / kPropTokens && rec.size() % kPropTokens != 0) {
        base = std::max(base, std::min({rec.size(), CommonPrefix(rec, tokens), cap}));
      }
    }
    return std::min(base, cap);
  }
};

class PoolPropertyTest : public ::testing::TestWithParam<Config> {};

TEST_P(PoolPropertyTest, MatchesTheReferenceModel) {
  const Config cfg = GetParam();
  const ModelLayout layout = TestLayout(2, 2, 4, kPropTokens);
  const KvOracle kv(layout);
  MapBackingStore store;
  PoolOptions o = TestOptions(layout, cfg.total_blocks);
  o.store = &store;
  o.eviction = cfg.eviction;
  o.retain_freed_blocks = cfg.retain;
  auto created = BlockPool::Create(o);
  ASSERT_THAT(created, IsOk());
  std::unique_ptr<BlockPool> pool = std::move(created).value();

  std::mt19937_64 rng(cfg.seed);
  auto uniform = [&](size_t lo, size_t hi) {  // inclusive
    return std::uniform_int_distribution<size_t>(lo, hi)(rng);
  };
  auto random_tokens = [&](size_t n) {
    std::vector<uint32_t> v(n);
    for (auto& t : v) t = static_cast<uint32_t>(uniform(0, 3));
    return v;
  };
  Model model;
  std::set<uint64_t> active;
  int pressure_evictions = 0;

  // Moves sequences the pool evicted under pressure into the model.
  auto drain = [&](uint64_t explicitly_evicted) {
    for (uint64_t id : pool->DrainEvicted()) {
      if (id != explicitly_evicted) {
        EXPECT_EQ(active.count(id), 0u) << "active sequence " << id << " was evicted";
        ++pressure_evictions;
      }
      ASSERT_EQ(model.live.count(id), 1u) << id;
      model.evicted[id] = model.live[id];
      model.live.erase(id);
    }
  };

  for (int step = 0; step < 500; ++step) {
    SCOPED_TRACE("seed " + std::to_string(cfg.seed) + " step " + std::to_string(step));
    uint64_t id = uniform(1, kIds);
    const size_t op = uniform(0, 99);
    uint64_t explicitly_evicted = 0;
    if (op < 30) {  // Allocate
      std::vector<uint32_t> tokens;
      const size_t how = uniform(0, 9);
      if (how < 5 && !model.history.empty()) {
        const auto& src = model.history[uniform(0, model.history.size() - 1)];
        tokens.assign(src.begin(), src.begin() + uniform(0, src.size()));
      } else if (how < 8) {
        auto it = model.live.find(id);
        auto rit = model.evicted.find(id);
        if (it != model.live.end()) tokens = it->second;
        if (rit != model.evicted.end()) tokens = rit->second;
      } else if (!model.live.empty()) {
        // A new sequence forks a live one at a block boundary (parallel
        // sampling): all its blocks are shared, the last one is copied on
        // the first write.
        auto it = model.live.begin();
        std::advance(it, uniform(0, model.live.size() - 1));
        tokens = it->second;
        tokens.resize(tokens.size() / kPropTokens * kPropTokens);
        for (uint64_t i = 1; i <= kIds; ++i) {
          if (model.live.count(i) == 0 && model.evicted.count(i) == 0) id = i;
        }
      }
      auto extra = random_tokens(how >= 8 ? 0 : uniform(0, 6));
      tokens.insert(tokens.end(), extra.begin(), extra.end());
      if (uniform(0, 9) == 0) tokens = random_tokens(uniform(0, 16));
      const size_t want = model.Expected(id, tokens);
      auto got = pool->Allocate(id, tokens);
      ASSERT_THAT(got, IsOk());
      if (cfg.exact) {
        ASSERT_EQ(*got, want);
      } else {
        ASSERT_LE(*got, want);
      }
      drain(0);
      model.evicted.erase(id);
      model.live[id].assign(tokens.begin(), tokens.begin() + *got);
    } else if (op < 65) {  // compute and commit some tokens
      auto it = model.live.find(id);
      if (it == model.live.end()) {
        EXPECT_THAT(pool->Advance(id, random_tokens(1)), StatusIs(StatusCode::kNotFound));
        continue;
      }
      std::vector<uint32_t> tokens = it->second;
      const size_t from = tokens.size();
      auto extra = random_tokens(uniform(1, 9));
      tokens.insert(tokens.end(), extra.begin(), extra.end());
      const AppendMode mode = static_cast<AppendMode>(uniform(0, 2));
      Status s = kv.Write(pool.get(), id, tokens, from, tokens.size(), mode);
      if (cfg.exact) {
        ASSERT_THAT(s, IsOk());
      }
      if (s.ok()) {
        model.live[id] = tokens;
        model.Commit(tokens);
      } else {
        ASSERT_THAT(s, StatusIs(StatusCode::kResourceExhausted));
      }
      drain(0);
    } else if (op < 77) {  // Rollback
      auto it = model.live.find(id);
      if (it == model.live.end()) continue;
      const size_t len = uniform(0, it->second.size());
      ASSERT_THAT(pool->Rollback(id, len), IsOk());
      it->second.resize(len);
    } else if (op < 85) {  // Remove
      const bool known = model.live.count(id) + model.evicted.count(id) != 0;
      Status s = pool->Remove(id);
      if (known) {
        ASSERT_THAT(s, IsOk());
      } else {
        ASSERT_THAT(s, StatusIs(StatusCode::kNotFound));
      }
      model.live.erase(id);
      model.evicted.erase(id);
    } else if (op < 93) {  // Evict
      Status s = pool->Evict(id);
      if (model.live.count(id) == 0) {
        ASSERT_THAT(s, StatusIs(StatusCode::kNotFound));
        continue;
      }
      ASSERT_THAT(s, IsOk());
      explicitly_evicted = id;
      drain(explicitly_evicted);
      EXPECT_EQ(model.evicted.count(id), 1u);
    } else {  // a new active set
      active.clear();
      std::vector<uint64_t> ids;
      for (uint64_t i = 1; i <= kIds; ++i) {
        if (uniform(0, 3) == 0) {
          active.insert(i);
          ids.push_back(i);
        }
      }
      pool->SetActiveSequences(ids);
      if (cfg.eviction == EvictionPolicy::kPriority) {
        for (auto& [sid, toks] : model.live) {
          ASSERT_THAT(pool->SetPriority(sid, static_cast<uint8_t>(uniform(0, 3))), IsOk());
        }
      }
    }

    // Every live sequence holds exactly the oracle's K/V; refcounts match
    // the block tables; nothing else is held.
    std::vector<uint32_t> refs(cfg.total_blocks, 0);
    for (const auto& [sid, tokens] : model.live) {
      ASSERT_TRUE(kv.Check(pool.get(), sid, tokens));
      auto table = pool->BlockTable(sid);
      ASSERT_THAT(table, IsOk());
      ASSERT_GE(table->size(), (tokens.size() + kPropTokens - 1) / kPropTokens);
      for (uint32_t slot : *table) ++refs[slot];
    }
    size_t used = 0;
    for (uint32_t s = 0; s < cfg.total_blocks; ++s) {
      ASSERT_EQ(pool->RefCount(s), refs[s]) << "slot " << s;
      used += refs[s] != 0 ? 1 : 0;
    }
    ASSERT_EQ(pool->FreeCount(), cfg.total_blocks - used);
    for (const auto& [sid, tokens] : model.evicted) ASSERT_FALSE(pool->HasSequence(sid));
    PoolStats stats = pool->GetStats();
    ASSERT_EQ(stats.sequences, model.live.size());
    ASSERT_EQ(stats.offloaded_sequences, model.evicted.size());
    ASSERT_EQ(stats.store_errors, 0u);
  }
  // The run exercised what it is meant to: sharing, copy on write, tier
  // loads and restores; with few slots, eviction under pressure.
  PoolStats stats = pool->GetStats();
  EXPECT_GT(stats.prefix_hit_blocks_pool + stats.prefix_hit_blocks_tier, 0u);
  EXPECT_GT(stats.restored_sequences, 0u);
  if (cfg.exact) {
    EXPECT_GT(stats.prefix_hit_blocks_pool, 0u);
    EXPECT_GT(stats.prefix_hit_blocks_tier, 0u);
    EXPECT_GT(stats.copy_on_write_blocks, 0u);
  } else {
    EXPECT_GT(pressure_evictions, 0);
  }
}

std::vector<Config> Configs() {
  std::vector<Config> out;
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    out.push_back({512, true, EvictionPolicy::kLru, seed % 2 == 0, seed});
    out.push_back({10, false, EvictionPolicy::kLru, true, 100 + seed});
    out.push_back({12, false, EvictionPolicy::kPriority, false, 200 + seed});
    out.push_back({9, false, EvictionPolicy::kFifo, true, 300 + seed});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Random, PoolPropertyTest, ::testing::ValuesIn(Configs()),
                         [](const ::testing::TestParamInfo<Config>& info) {
                           return std::string(EvictionPolicyName(info.param.eviction)) + "_" +
                                  std::to_string(info.param.total_blocks) + "_seed" +
                                  std::to_string(info.param.seed);
                         });

}  // namespace
}  // namespace kvtier
