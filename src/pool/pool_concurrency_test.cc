// Several threads drive one pool with shared prefixes, a lower tier, slot
// pressure, evictions and restores (run under TSan in CI). Sequences in
// progress are in the active set; finished ones are left behind to be
// evicted and later continued.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
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

void RunThreads(const ModelLayout& layout) {
  constexpr int kThreads = 4, kIterations = 30;
  const KvOracle kv(layout);
  MapBackingStore store;
  PoolOptions o = TestOptions(layout, 40);
  o.store = &store;
  auto created = BlockPool::Create(o);
  ASSERT_THAT(created, IsOk());
  std::unique_ptr<BlockPool> pool = std::move(created).value();

  // Prompts the threads share, so their prefixes collide.
  std::vector<std::vector<uint32_t>> prompts;
  for (uint32_t p = 0; p < 3; ++p) {
    std::vector<uint32_t> v;
    for (uint32_t i = 0; i < 9; ++i) v.push_back(p * 10 + i % 3);
    prompts.push_back(v);
  }

  std::mutex active_mu;
  std::set<uint64_t> active;
  auto publish_active = [&] {
    std::vector<uint64_t> ids(active.begin(), active.end());
    pool->SetActiveSequences(ids);
  };
  auto activate = [&](uint64_t id) {
    std::lock_guard lock(active_mu);
    active.insert(id);
    publish_active();
  };
  auto deactivate = [&](uint64_t id) {
    std::lock_guard lock(active_mu);
    active.erase(id);
    publish_active();
  };

  auto worker = [&](int t) {
    std::mt19937 rng(1234 + t);
    std::map<uint64_t, std::vector<uint32_t>> finished;  // id → committed tokens
    uint64_t next_id = 1000 * (t + 1);
    for (int it = 0; it < kIterations; ++it) {
      uint64_t id;
      std::vector<uint32_t> tokens;
      if (!finished.empty() && rng() % 3 == 0) {
        auto f = finished.begin();
        std::advance(f, rng() % finished.size());
        id = f->first;
        tokens = f->second;
        finished.erase(f);
      } else {
        id = next_id++;
        tokens = prompts[rng() % prompts.size()];
      }
      const size_t extra = 1 + rng() % 6;
      for (size_t i = 0; i < extra && tokens.size() < 20; ++i) tokens.push_back(rng() % 4);
      activate(id);
      auto info = pool->AllocateAsync(id, tokens);
      ASSERT_THAT(info, IsOk());
      auto m = pool->WaitLoaded(id);
      ASSERT_THAT(m, IsOk());
      ASSERT_LE(*m, info->matched_tokens);
      ASSERT_TRUE(kv.Check(pool.get(), id, std::span(tokens).first(*m)));
      const AppendMode mode = static_cast<AppendMode>(rng() % 3);
      ASSERT_THAT(kv.Write(pool.get(), id, tokens, *m, tokens.size(), mode), IsOk());
      ASSERT_TRUE(kv.Check(pool.get(), id, tokens));
      if (rng() % 4 == 0) {
        ASSERT_THAT(pool->Remove(id), IsOk());
      } else {
        finished[id] = tokens;
      }
      deactivate(id);
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  PoolStats s = pool->GetStats();
  EXPECT_GT(s.evicted_sequences, 0u);
  EXPECT_GT(s.prefix_hit_blocks_pool, 0u);
  EXPECT_EQ(s.store_errors, 0u);
  EXPECT_EQ(s.load_misses, 0u);
  // What is still held is held by the live sequences' block tables.
  uint64_t held = 0;
  for (uint32_t slot = 0; slot < 40; ++slot) held += pool->RefCount(slot) != 0 ? 1 : 0;
  EXPECT_EQ(pool->FreeCount(), 40 - held);
}

TEST(PoolConcurrencyTest, ThreadsShareAPoolSafely) { RunThreads(TestLayout()); }

// The same with a full-attention, a sliding-window (6 tokens) and a
// recurrent layer: snapshots, partial restores and their bounds under
// threads.
TEST(PoolConcurrencyTest, ThreadsShareAHybridPoolSafely) {
  ModelLayout layout = TestLayout(2);
  layout.layers[1].window = 6;
  LayerSpec rec;
  rec.cache_type = "mamba";
  rec.states = {TensorSpec{"ssm", DType::kF32, {2, 8}, -1}};
  layout.layers.push_back(rec);
  RunThreads(layout);
}

}  // namespace
}  // namespace kvtier
