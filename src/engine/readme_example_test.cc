// The README's C++ example (docs/readme-example.md), compiled and run so it
// cannot rot. The code between the [readme-example] markers must equal the
// code block of docs/readme-example.md; the last test checks that.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/engine_test_util.h"
#include "kvtier/block_pool.h"
#include "kvtier/tiered_backing_store.h"
#include "kvtier/tiered_cache.h"
#include "testing/status_matchers.h"

namespace {

// What the example calls "your model": the tiny preset's layout, and K/V
// for a position that are a function of the tokens up to it. ComputeKV also
// reads the previous position's K back through the pool's block table and
// counts any byte that is not what it wrote, so a wrong cached block shows.
class MyModel {
 public:
  kvtier::ModelLayout Layout() const { return *kvtier::ModelLayout::Preset("tiny"); }
  std::string Id() const { return "readme-model"; }

  std::pair<std::vector<std::byte>, std::vector<std::byte>> ComputeKV(
      kvtier::BlockPool& pool, uint64_t seq, uint32_t layer, std::span<const uint32_t> prompt,
      size_t pos) {
    if (pos > 0) Check(pool, seq, layer, prompt, pos - 1);
    return {Row(layer, 0, prompt, pos), Row(layer, 1, prompt, pos)};
  }

  int checked = 0;
  int wrong = 0;

 private:
  static constexpr size_t kHeads = 2, kDim = 16, kBytes = 2;  // tiny: 2 KV heads of 16, F16

  // One token's [kv_heads, head_dim] F16 bytes of state `state`.
  static std::vector<std::byte> Row(uint32_t layer, uint32_t state,
                                    std::span<const uint32_t> prompt, size_t pos) {
    uint64_t h = 1469598103934665603ull ^ (layer * 2 + state);
    for (size_t i = 0; i <= pos; ++i) h = (h ^ prompt[i]) * 1099511628211ull;
    std::vector<std::byte> row(kHeads * kDim * kBytes);
    for (size_t i = 0; i < row.size(); ++i) row[i] = static_cast<std::byte>((h >> (i % 56)) & 0xff);
    return row;
  }

  void Check(kvtier::BlockPool& pool, uint64_t seq, uint32_t layer,
             std::span<const uint32_t> prompt, size_t pos) {
    const std::vector<std::byte> want = Row(layer, 0, prompt, pos);
    const uint32_t bt = Layout().block_tokens;
    auto table = pool.BlockTable(seq);
    if (!table.ok() || table->size() <= pos / bt) {
      ++wrong;
      return;
    }
    auto slot = pool.SlotAddress((*table)[pos / bt]);
    const kvtier::SlotTensorGeometry g = pool.TensorGeometry(layer, 0);
    for (size_t a = 0; a < kHeads && slot.ok(); ++a) {
      const std::byte* got = *slot + g.offset + (a * bt + pos % bt) * kDim * kBytes;
      if (std::memcmp(got, want.data() + a * kDim * kBytes, kDim * kBytes) != 0) ++wrong;
    }
    ++checked;
  }
};

// [readme-example begin]
// Serves prompts one after another; returns how many tokens of each came
// from the cache (pool, RAM or disk) instead of being computed.
kvtier::Result<std::vector<size_t>> Serve(MyModel& model, const std::string& cache_dir,
                                          const std::vector<std::vector<uint32_t>>& prompts) {
  const kvtier::ModelLayout layout = model.Layout();  // K, V per layer: [kv_heads, block, head_dim]
  kvtier::CacheOptions cache_options;                 // RAM tier (1 GiB) over a disk folder
  cache_options.layout_signature = layout.Signature();
  cache_options.disk.emplace().dir = cache_dir;
  KVTIER_ASSIGN_OR_RETURN(auto cache,
                          kvtier::TieredCache::Open(cache_options, kvtier::Env::Default()));
  KVTIER_ASSIGN_OR_RETURN(auto tiers, kvtier::TieredBackingStore::Create(cache.get()));
  kvtier::PoolOptions pool_options;
  pool_options.layout = layout;
  pool_options.key_namespace.model_id = model.Id();
  pool_options.store = tiers.get();  // full blocks go down the tiers as they fill
  KVTIER_ASSIGN_OR_RETURN(auto pool, kvtier::BlockPool::Create(pool_options));

  std::vector<size_t> reused;
  for (uint64_t seq = 0; seq < prompts.size(); ++seq) {
    std::span<const uint32_t> prompt = prompts[seq];
    KVTIER_ASSIGN_OR_RETURN(size_t pos, pool->Allocate(seq, prompt));  // cached prefix
    reused.push_back(pos);
    for (; pos < prompt.size(); ++pos) {
      for (uint32_t layer = 0; layer < layout.layers.size(); ++layer) {
        // Attention reads K/V via pool->BlockTable(seq) and pool->SlotAddress(slot).
        const auto [k, v] = model.ComputeKV(*pool, seq, layer, prompt, pos);
        const std::span<const std::byte> kv[] = {k, v};
        KVTIER_RETURN_IF_ERROR(pool->AppendToken(seq, layer, pos, kv));
      }
      KVTIER_RETURN_IF_ERROR(pool->Advance(seq, prompt.subspan(pos, 1)));
    }
  }
  return reused;  // the pool goes first, then the cache writes its RAM blocks to disk
}
// [readme-example end]

using ::kvtier::engine::testing::TempDir;
using ::kvtier::testing::IsOk;

std::vector<uint32_t> Range(uint32_t from, uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

TEST(ReadmeExampleTest, ReusesPrefixesWithinAndAcrossProcesses) {
  TempDir tmp;
  MyModel model;
  // Two prompts sharing 40 tokens (two full 16-token blocks), then a third
  // process-like run that asks for the first prompt again.
  std::vector<uint32_t> a = Range(1, 50), b = Range(1, 40);
  const std::vector<uint32_t> tail = Range(500, 9);
  b.insert(b.end(), tail.begin(), tail.end());
  auto first = Serve(model, tmp.path(), {a, b});
  ASSERT_THAT(first, IsOk());
  EXPECT_EQ(*first, (std::vector<size_t>{0, 32}));
  auto second = Serve(model, tmp.path(), {a});  // a new cache, pool: served from disk
  ASSERT_THAT(second, IsOk());
  EXPECT_EQ(*second, (std::vector<size_t>{48}));  // 3 full blocks of a
  EXPECT_EQ(model.wrong, 0);
  EXPECT_EQ(model.checked, 2 * (49 + (49 - 32) + (50 - 48)));  // positions > 0 computed, × layers
}

TEST(ReadmeExampleTest, DocsShowTheSameCode) {
  // $KVTIER_SOURCE_DIR (ctest sets it), else this file's own checkout.
  std::string src = std::filesystem::path(__FILE__).parent_path().parent_path().parent_path();
  if (const char* env = std::getenv("KVTIER_SOURCE_DIR"); env != nullptr && *env != '\0') {
    src = env;
  }
  auto read = [](const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string me = read(src + "/src/engine/readme_example_test.cc");
  const std::string doc = read(src + "/docs/readme-example.md");
  ASSERT_FALSE(me.empty()) << "cannot read the sources under " << src;
  const std::string begin = "// [readme-example begin]\n", end = "// [readme-example end]";
  const size_t b = me.find(begin), e = me.find(end);
  ASSERT_NE(b, std::string::npos);
  ASSERT_NE(e, std::string::npos);
  const std::string code = me.substr(b + begin.size(), e - b - begin.size());
  const size_t fence = doc.find("```cpp\n");
  ASSERT_NE(fence, std::string::npos);
  const size_t code_start = fence + 7;
  const size_t fence_end = doc.find("```", code_start);
  ASSERT_NE(fence_end, std::string::npos);
  const std::string shown = doc.substr(code_start, fence_end - code_start);
  // The doc adds the three includes before the function.
  const std::string includes =
      "#include \"kvtier/block_pool.h\"\n"
      "#include \"kvtier/tiered_backing_store.h\"\n"
      "#include \"kvtier/tiered_cache.h\"\n\n";
  EXPECT_EQ(shown, includes + code);
}

}  // namespace
