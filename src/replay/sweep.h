// A capacity sweep (`kvtier replay --sweep`): the trace replayed once per
// (policy, RAM size) point, the points in parallel, plus the references
// every point is read against (unbounded capacity; Belady's MIN at each RAM
// size).
//
// Each point is exactly one single-point replay: the metadata simulator
// (TierSimulator) by default, or a RealReplayer with real, verified block
// bytes when `real_layout` is set. So a sweep row equals what `kvtier
// replay --ram-tokens N` reports for the same flags, to the last digit.
//
// Capacities larger than the trace can fill behave as unbounded, and memory
// follows the trace, not the option: a tier is never given more blocks than
// the trace's distinct block ids (it could not evict with fewer), so a huge
// capacity allocates nothing extra.
//
// Thread safety: RunSweep may be called from any thread; it starts its own
// workers through the Env and calls `on_progress` only on the calling thread.
#ifndef KVTIER_REPLAY_SWEEP_H_
#define KVTIER_REPLAY_SWEEP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvtier/env.h"
#include "kvtier/eviction_policy.h"
#include "kvtier/layout.h"
#include "replay/simulator.h"
#include "replay/trace_reader.h"

namespace kvtier::replay {

// Most RAM sizes in one sweep.
inline constexpr size_t kMaxSweepPoints = 64;

struct SweepOptions {
  // RAM (host tier) capacities in tokens, one point each (floor(N/512)
  // blocks); each in [512, kMaxReplayTokens]. 1..kMaxSweepPoints entries.
  std::vector<uint64_t> ram_tokens;
  // Disk tier capacity in tokens; 0 = no disk tier. At most
  // kMaxReplayTokens and, when set, at least 512. Default 0.
  uint64_t disk_tokens = 0;
  // One curve per policy, in this order; not empty, no repeats.
  std::vector<HostEvictionPolicy> policies = {HostEvictionPolicy::kLru};
  // Points replayed at once (1..256). Default 1.
  uint32_t threads = 1;
  // Set: each point runs a RealReplayer with blocks of this layout
  // (--payload real). Unset: the metadata simulator (--payload none).
  std::optional<ModelLayout> real_layout;
  // Real payload with a disk tier: a folder that does not exist or is
  // empty; point i replays into its own subfolder <disk_dir>/<policy>-<ram
  // tokens>. Required then, refused otherwise.
  std::string disk_dir;
  // Called on RunSweep's own thread, never under a lock, as work completes:
  // (requests replayed so far over all points and references, total).
  std::function<void(uint64_t done, uint64_t total)> on_progress;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

struct SweepRow {
  HostEvictionPolicy policy = HostEvictionPolicy::kLru;
  uint64_t ram_tokens = 0;   // as given
  uint64_t ram_blocks = 0;   // floor(ram_tokens / 512)
  uint64_t disk_tokens = 0;  // as given (0 = no disk tier)
  uint64_t disk_blocks = 0;
  ReplayCounts counts;
  uint64_t belady_hit_tokens = 0;  // Belady's MIN at ram_blocks, no disk
  // Real payload only: loaded blocks checked against their content.
  uint64_t verified = 0;
  uint64_t wrong = 0;

  double BeladyHitRatio() const { return counts.Ratio(belady_hit_tokens); }
};

struct SweepResult {
  // Policy-major: for each policy in the given order, one row per RAM size
  // in the given order.
  std::vector<SweepRow> rows;
  uint64_t requests = 0;
  uint64_t input_tokens = 0;
  uint64_t max_hit_tokens = 0;  // unbounded capacity

  double MaxHitRatio() const;
};

// Distinct block ids in the trace: no tier ever holds more.
uint64_t DistinctBlocks(std::span<const TraceRequest> trace);

// Replays every point. Errors: InvalidArgument for bad options, the first
// failing point's error otherwise (a real replay's cache error, a disk
// folder in use), ResourceExhausted if memory ran out.
Result<SweepResult> RunSweep(Env* env, std::span<const TraceRequest> trace,
                             const SweepOptions& options);

}  // namespace kvtier::replay

#endif  // KVTIER_REPLAY_SWEEP_H_
