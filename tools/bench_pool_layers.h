// `kvtier bench pool --synthetic-layout sliding|hybrid` (issue 21): cold
// restores from disk of a prefix in a layout whose restores need less than
// whole blocks (sliding windows, recurrent layers), against a restore that
// asks for whole blocks, in the same run. Reports what the prefix needs,
// what the pool asked the tiers for, and what the disk tier read.
//
// The layouts are built in code (SyntheticLayout), from before the layout
// JSON had a `window` field.
#ifndef KVTIER_TOOLS_BENCH_POOL_LAYERS_H_
#define KVTIER_TOOLS_BENCH_POOL_LAYERS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_pool.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cli {

// "sliding": 12 layers, K/V BF16 [2, T, 64]; every sixth layer full
// attention, the others a 1024-token window (Gemma 3's 5:1 pattern).
// "hybrid": 12 layers; every fourth full attention (K/V BF16 [2, T, 64]),
// the others recurrent (linear attention: state F32 [4, 64, 64], conv BF16
// [3, 512]), as Qwen3-Next's 3:1. `block_tokens` 0: 256.
Result<ModelLayout> SyntheticLayout(std::string_view name, uint32_t block_tokens);

// Threads of the raw reads: enough requests in flight to keep the device
// busy with either pattern (more than the disk tier's read lanes).
inline constexpr uint32_t kRawReadThreads = 16;

struct LayerBenchSetup {
  ModelLayout layout;
  std::vector<uint32_t> prompt;  // the prefix and one more token
  size_t prefix = 0;             // tokens, whole blocks
  size_t blocks = 0;
  uint32_t repeats = 3;
  bool drop_caches = false;
  Env* env = nullptr;
  // A cache over the bench's disk folder (the same one each call).
  std::function<Result<std::unique_ptr<TieredCache>>()> open_cache;
  // A pool over `store` with `slots` slots, prefaulted or not.
  std::function<Result<std::unique_ptr<BlockPool>>(BlockBackingStore*, uint32_t, bool)> new_pool;
  // The prefix's block files in the cache folder, in block order (for the
  // raw reads: RawRead).
  std::function<Result<std::vector<std::string>>()> block_files;
};

// Writes the prefix through a pool into the cache (closed: on disk), then
// `repeats` times restores it cold into a fresh pool twice: asking for what
// it needs, and asking for whole blocks. Before them, each time, the disk's
// limit for both: plain preads (RawRead, kRawReadThreads threads, cold)
// of the same files, of what a verifying reader of the needed tensors reads
// (each file's header, then its needed tensors, neighbours merged) and of
// the files whole. Fills `out`.
Status RunLayerBench(const LayerBenchSetup& setup, nlohmann::json* out);

// The human-readable lines of RunLayerBench's `out`.
void PrintLayerBench(const nlohmann::json& out);

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_BENCH_POOL_LAYERS_H_
