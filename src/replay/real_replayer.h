// Real-payload trace replay (`kvtier replay --payload real`): every trace
// block becomes a real block file stored in and loaded from a TieredCache.
//
// Hash id h of the trace maps to the key SHA-256("kvtier-replay-v1\0" ||
// namespace || u64 LE h), where the namespace is the KeyChain namespace of
// model "kvtier-replay" and the layout; its block file holds the tensors
// block_generator.h derives from the key (created_at from the options,
// parent = the previous block's key in the request, or the namespace). The
// key depends on no run-specific input, so that two replays of one trace
// in different processes share blocks through a remote tier. One trace block
// (512 tokens) is one block of the layout, whatever the layout's own
// block_tokens: the layout only sets the bytes a block carries.
//
// Per request, as an engine would: Match the request's keys; Load the
// matched prefix in one call (timed: this is load_GBps; batches of at most
// 256 MiB of buffers); count as hit tokens the leading run of blocks that
// loaded and verified (split by the tier that served each). Then, to touch
// or insert the rest of the request's blocks in order as DESIGN.md §6 says,
// Load each block after the prefix (untimed: most are misses, each a disk
// index probe) and Store it at once if it missed. Every loaded block is
// checked against the generated content (counted verified / wrong; a wrong
// block is never a hit and is stored again). Host only, this is exactly
// the metadata simulator's sequence of touches and inserts.
//
// The host tier holds ram_blocks block files; the disk tier (optional) at
// most disk_blocks block files in a fresh folder; the remote tier
// (optional, below disk) whatever its server holds: blocks an earlier
// replay stored there are hits, which is the point of sharing a server
// (DESIGN.md §7). A block the local tiers lack but Redis has counts as a
// remote hit; the cache promotes it into the host tier.
//
// Thread safety: one thread drives a RealReplayer; the cache it owns uses
// its own threads.
#ifndef KVTIER_REPLAY_REAL_REPLAYER_H_
#define KVTIER_REPLAY_REAL_REPLAYER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/host_tier.h"
#include "kvtier/layout.h"
#include "kvtier/logger.h"
#include "kvtier/remote_tier.h"
#include "kvtier/tiered_cache.h"
#include "replay/simulator.h"
#include "replay/trace_reader.h"

namespace kvtier::replay {

struct RealReplayOptions {
  // Host tier capacity in blocks (× the block file size = its byte
  // budget). 1..kMaxReplayBlocks. The Match index is sized for ram_blocks
  // + disk_blocks: callers cap both at the trace's distinct blocks
  // (DistinctBlocks in sweep.h), which changes no result.
  uint64_t ram_blocks = 0;
  // Disk tier capacity in blocks (its max_entries), at most
  // kMaxReplayBlocks; 0 = no disk tier.
  uint64_t disk_blocks = 0;
  // Disk tier folder: required with disk_blocks > 0, must not exist or be
  // empty (a replay must not find blocks of an earlier run).
  std::string disk_dir;
  // Host tier eviction policy. Default kLru.
  HostEvictionPolicy policy = HostEvictionPolicy::kLru;
  // What a block holds. Must validate.
  ModelLayout layout;
  // The remote tier below the local ones, or nullopt (default). Its
  // `layout` is replaced by `layout`; the rest must validate.
  std::optional<RemoteTierOptions> remote;
  // created_at (unix seconds) of the block files the replay stores. Tools
  // pass the wall clock, so that two processes sharing a server write
  // different bytes for one key. Default 0.
  int64_t created_at = 0;
  // TieredCache load threads. Default 0: one thread drives the replay, so
  // each Load does its disk part on that thread (the disk tier still reads
  // a batch on its own read threads) instead of paying a thread hand-off
  // per call.
  uint32_t load_threads = 0;
  // The cache's logger (CacheOptions::info_log), or nullptr. Not owned.
  Logger* info_log = nullptr;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

struct RealReplayStats {
  ReplayCounts counts;
  uint64_t block_file_bytes = 0;     // size of one block file of the layout
  uint64_t bytes_loaded = 0;         // copied into the replayer's buffers by Load
  uint64_t prefix_bytes_loaded = 0;  // ... by the Loads of matched prefixes
  uint64_t bytes_stored = 0;         // given to Store
  uint64_t bytes_to_disk = 0;        // handed to the disk tier (write-back)
  uint64_t bytes_from_disk = 0;      // loaded from the disk tier
  uint64_t bytes_from_remote = 0;    // loaded from the remote tier
  double load_seconds = 0;           // time in prefix Loads, call until the future was ready
  uint64_t verified = 0;             // loaded blocks equal to the generated content
  uint64_t wrong = 0;                // loaded blocks that were not

  // prefix_bytes_loaded / load_seconds in 1e9 bytes per second (0 without
  // loads).
  double LoadGBps() const;

  // The remote tier's counters after Finish() (nullopt without one): what
  // it stored, skipped as already present, dropped and found bad.
  std::optional<RemoteTierStats> remote;
};

// The key replay uses for trace hash id `id` under namespace `ns`.
BlockKey ReplayBlockKey(const BlockKey& ns, uint64_t id);

class RealReplayer {
 public:
  // Opens the cache. InvalidArgument for bad options (or a non-empty
  // disk_dir); the cache's errors otherwise. REQUIRES: env outlives it.
  static Result<std::unique_ptr<RealReplayer>> Create(Env* env, RealReplayOptions options);
  ~RealReplayer();

  // Replays the next request. An error is a cache call that failed (not a
  // miss, and not a wrong block: those are counted).
  Status Replay(const TraceRequest& request);

  // Closes the cache and completes the stats. Idempotent.
  Status Finish();

  const RealReplayStats& stats() const { return stats_; }
  const BlockKey& ns() const { return ns_; }
  // The cache being replayed into (tests store forged blocks through it).
  TieredCache& cache() { return *cache_; }

 private:
  RealReplayer(Env* env, RealReplayOptions options, BlockKey ns, uint64_t block_file_bytes,
               uint64_t buffer_bytes, std::unique_ptr<TieredCache> cache);
  // Which part of a request a Load covers.
  enum class Phase : uint8_t {
    kPrefix,  // the matched prefix: timed, counted in load_GBps
    kRest,    // the blocks after it: touched, not timed
  };
  // Loads keys_[begin, end) in batches, verifies them, counts hits while
  // *in_prefix holds and collects the positions to store.
  Status LoadRange(const TraceRequest& r, size_t begin, size_t end, Phase phase, bool* in_prefix,
                   std::vector<size_t>* misses);
  Status LoadBatch(const TraceRequest& r, size_t begin, size_t end, Phase phase, bool* in_prefix,
                   std::vector<size_t>* misses);
  // Generates and stores the blocks at these positions of keys_, in order.
  Status StoreBlocks(const std::vector<size_t>& positions);
  void CollectCacheStats();

  Env* const env_;
  const RealReplayOptions options_;
  const BlockKey ns_;
  const uint64_t buffer_bytes_;  // of a load buffer: the longest block file of the layout
  std::unique_ptr<TieredCache> cache_;
  RealReplayStats stats_;
  size_t batch_blocks_ = 1;
  std::vector<BlockBuffer> buffers_;  // batch_blocks_ load destinations
  std::vector<BlockKey> keys_;        // of the current request
  bool finished_ = false;
};

}  // namespace kvtier::replay

#endif  // KVTIER_REPLAY_REAL_REPLAYER_H_
