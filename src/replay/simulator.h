// Metadata-only trace replay: the cache semantics of DESIGN.md §6 over
// block ids, without block bytes.
//
// For each request, in order: its match is the longest run of its leading
// hash ids present in either tier when it arrives; its hit tokens are
// min(512 × match, input_length), split between RAM and disk by the tier
// each matched block was found in at arrival. Then each of its blocks, in
// order, is touched if present (a RAM block moves in the policy's order; a
// disk block is promoted: it moves to RAM as a reused entry) or inserted
// into RAM. RAM evicts by the host tier's EvictionList (the very code the
// HostTier runs) under the chosen HostEvictionPolicy; with a disk tier, RAM
// victims move down to disk, which is LRU and drops its own victims. The
// tiers are exclusive: a block is in at most one.
//
// Also here: the same hit count with unbounded capacity (max_hit_ratio) and
// under Belady's MIN at the RAM capacity (evict the block whose next access
// is farthest in the future; block-level, so an upper reference for block
// policies rather than the optimum of prefix hit tokens).
//
// Thread safety: a TierSimulator is used by one thread at a time; the free
// functions are pure.
#ifndef KVTIER_REPLAY_SIMULATOR_H_
#define KVTIER_REPLAY_SIMULATOR_H_

#include <cstdint>
#include <span>
#include <unordered_map>

#include "kvtier/eviction_policy.h"
#include "replay/trace_reader.h"

namespace kvtier::replay {

// Largest RAM or disk capacity a replay takes, in tokens (2^40): far beyond
// any machine's KV cache, and small enough that blocks × bytes per block
// stays exact. Any capacity over a trace's distinct blocks acts as
// unbounded anyway.
inline constexpr uint64_t kMaxReplayTokens = uint64_t{1} << 40;
inline constexpr uint64_t kMaxReplayBlocks = kMaxReplayTokens / kTraceBlockTokens;

struct SimOptions {
  // RAM tier capacity in trace blocks (--ram-tokens / 512). 1..
  // kMaxReplayBlocks.
  uint64_t ram_blocks = 0;
  // Disk tier capacity in trace blocks (--disk-tokens / 512), at most
  // kMaxReplayBlocks; 0 = no disk tier. Default 0.
  uint64_t disk_blocks = 0;
  // RAM eviction policy. Default kLru.
  HostEvictionPolicy policy = HostEvictionPolicy::kLru;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// Token and block counts of a replay (both payload modes fill it).
struct ReplayCounts {
  uint64_t requests = 0;
  uint64_t input_tokens = 0;       // Σ input_length
  uint64_t hit_tokens = 0;         // Σ min(512 × match, input_length)
  uint64_t hit_tokens_ram = 0;     // the part served by blocks found in RAM
  uint64_t hit_tokens_disk = 0;    // ... found on disk
  uint64_t hit_tokens_remote = 0;  // ... found in the remote tier (real payload only)
  uint64_t blocks = 0;             // block accesses (Σ |hash_ids|)
  uint64_t ram_hits = 0;           // accesses that found the block in RAM
  uint64_t disk_hits = 0;          // accesses that found it on disk (promotions)
  uint64_t remote_hits = 0;        // accesses that found it in the remote tier only
  uint64_t inserts = 0;            // accesses that found it nowhere
  uint64_t ram_evictions = 0;      // RAM victims (moved to disk when there is one)
  uint64_t disk_evictions = 0;     // disk victims (dropped)
  uint64_t ghost_hits = 0;         // inserts the reuse policy remembered

  double HitRatio() const { return Ratio(hit_tokens); }
  double HitRatioRam() const { return Ratio(hit_tokens_ram); }
  double HitRatioDisk() const { return Ratio(hit_tokens_disk); }
  double HitRatioRemote() const { return Ratio(hit_tokens_remote); }
  double Ratio(uint64_t tokens) const {
    return input_tokens == 0 ? 0.0
                             : static_cast<double>(tokens) / static_cast<double>(input_tokens);
  }
};

// Tokens of block `index` (0-based) of a request that count as hit tokens
// when it is matched: min(512, input_length - 512 × index), or 0 past the
// input.
uint64_t BlockHitTokens(const TraceRequest& r, uint64_t index);

class TierSimulator {
 public:
  // REQUIRES: options.Validate().ok()
  explicit TierSimulator(const SimOptions& options);
  TierSimulator(const TierSimulator&) = delete;
  TierSimulator& operator=(const TierSimulator&) = delete;

  // Replays one request (the next in trace order).
  void Replay(const TraceRequest& request);

  const ReplayCounts& counts() const { return counts_; }
  uint64_t ram_blocks_used() const { return ram_.size(); }
  uint64_t disk_blocks_used() const { return disk_.size(); }

 private:
  struct Block {
    uint64_t id = 0;
    bool reused = false;  // owned by the EvictionList
  };
  using List = host_internal::EvictionList<Block>;
  struct Where {
    bool on_disk = false;
    List::iterator it;
  };

  void InsertRam(uint64_t id, host_internal::Admission admission);

  const SimOptions options_;
  List ram_;
  List disk_;
  std::unordered_map<uint64_t, Where> where_;
  ReplayCounts counts_;
};

// Σ hit tokens with unbounded capacity (every block ever seen is present).
uint64_t MaxHitTokens(std::span<const TraceRequest> trace);

// Σ hit tokens with one tier of `capacity_blocks` (> 0; any size) evicting
// by Belady's MIN. Memory: 8 bytes per block access.
uint64_t BeladyHitTokens(std::span<const TraceRequest> trace, uint64_t capacity_blocks);

}  // namespace kvtier::replay

#endif  // KVTIER_REPLAY_SIMULATOR_H_
