// PoolStats's table (KVTIER_POOL_STATS): the names, in order, that the
// struct had before it followed from the table, and which are gauges.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvtier/block_pool.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;

struct Row {
  std::string name;
  std::string kind;
  std::string help;
};

std::vector<Row> Table() {
  std::vector<Row> rows;
#define KVTIER_POOL_STATS_ROW(name, kind, help) rows.push_back({#name, #kind, help});
  KVTIER_POOL_STATS(KVTIER_POOL_STATS_ROW)
#undef KVTIER_POOL_STATS_ROW
  return rows;
}

TEST(PoolStatsTest, NamesAreThoseOfBeforeTheTable) {
  std::vector<std::string> names;
  for (const Row& r : Table()) names.push_back(r.name);
  EXPECT_THAT(names,
              ElementsAre("bytes_used", "bytes_capacity", "blocks_total", "blocks_free",
                          "blocks_cached", "sequences", "evicted_blocks", "evicted_sequences",
                          "packed_layers", "offloaded_blocks", "offloaded_sequences",
                          "restored_sequences", "prefix_hit_blocks_pool", "prefix_hit_blocks_tier",
                          "copy_on_write_blocks", "stored_blocks", "stored_bytes", "store_errors",
                          "loaded_blocks", "loaded_bytes", "load_misses",
                          // issue 21: restores that read only what a prefix needs, and
                          // sliding-window blocks freed as a sequence grows
                          "load_tensor_bytes", "window_freed_blocks"));
}

TEST(PoolStatsTest, GaugesAreTheCurrentValues) {
  std::vector<std::string> gauges;
  for (const Row& r : Table()) {
    EXPECT_THAT(r.kind, ::testing::AnyOf("kCounter", "kGauge")) << r.name;
    if (r.kind == "kGauge") gauges.push_back(r.name);
    EXPECT_FALSE(r.help.empty()) << r.name;
  }
  EXPECT_THAT(gauges, ElementsAre("bytes_used", "bytes_capacity", "blocks_total", "blocks_free",
                                  "blocks_cached", "sequences", "packed_layers", "offloaded_blocks",
                                  "offloaded_sequences"));
}

TEST(PoolStatsTest, EveryNumberStartsAtZero) {
  const PoolStats s;
  EXPECT_EQ(s.mode, PoolMode::kPaged);
#define KVTIER_POOL_STATS_ZERO(name, kind, help) EXPECT_EQ(s.name, 0u) << #name;
  KVTIER_POOL_STATS(KVTIER_POOL_STATS_ZERO)
#undef KVTIER_POOL_STATS_ZERO
}

// ForEachMetric (kvtier/stats_table.h) walks the same table with each
// field's value, as the other tiers' stats do.
TEST(PoolStatsTest, ForEachMetricWalksTheTable) {
  PoolStats s;
  s.blocks_total = 7;
  s.load_misses = 3;
  std::vector<std::string> names;
  uint64_t sum = 0;
  s.ForEachMetric([&](const MetricInfo& m, uint64_t v) {
    names.emplace_back(m.name);
    sum += v;
    EXPECT_EQ(m.kind == MetricKind::kGauge, m.name == "blocks_total" || m.name == "bytes_used" ||
                                                m.name == "bytes_capacity" ||
                                                m.name == "blocks_free" ||
                                                m.name == "blocks_cached" ||
                                                m.name == "sequences" ||
                                                m.name == "packed_layers" ||
                                                m.name == "offloaded_blocks" ||
                                                m.name == "offloaded_sequences")
        << m.name;
  });
  EXPECT_EQ(names.size(), 23u);
  EXPECT_EQ(names.front(), "bytes_used");
  EXPECT_EQ(names.back(), "window_freed_blocks");
  EXPECT_EQ(sum, 10u);
}

}  // namespace
}  // namespace kvtier
