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
                          "loaded_blocks", "loaded_bytes", "load_misses"));
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

}  // namespace
}  // namespace kvtier
