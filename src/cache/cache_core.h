// CacheCore: the implementation behind TieredCache (include/kvtier/
// tiered_cache.h).
//
// Parts: a HostTier on a (private or shared) budget, an optional DiskTier,
// an optional RemoteTier (below disk), the BlockIndex that answers Match, a TaskPool for the load
// parts that leave the caller's thread, a BufferPool that disk reads get their buffers from, and a
// CallGate that lets Close wait for the calls in progress. Wiring: the host tier's key listener
// feeds the index (host bits); its eviction sink hands dirty entries to the disk tier (WriteBack),
// so the sink may run on any thread that made a budget evict, including another cache's on a shared
// budget. Store queues each accepted block for the remote tier; the index never records remote
// presence (another host may evict it at any time), so Match asks RemoteTier::Exists each time.
//
// The cache's own state needs no lock: the tiers, the index, the pool and
// the header verifier are thread-safe, counters are atomic. The only mutex guards the stats
// snapshot Close leaves behind. No I/O, SQLite call or callback runs under
// it.
//
// Lifetime: Close() closes the gate and waits, stops the pool (cancelling
// queued loads, waiting for running ones), writes dirty entries down,
// destroys the host tier (which waits for sink calls in flight) and only
// then closes the disk tier, so no sink call can reach a closed disk tier,
// and last the remote tier (its queue drains within its own
// close_timeout_ms).
//
// Thread safety: as TieredCache.
#ifndef KVTIER_CACHE_CACHE_CORE_H_
#define KVTIER_CACHE_CACHE_CORE_H_

#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "cache/block_index.h"
#include "cache/buffer_pool.h"
#include "cache/cache_counters.h"
#include "cache/call_gate.h"
#include "cache/load_state.h"
#include "cache/task_pool.h"
#include "core/block_verifier.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::cache_internal {

class CacheCore {
 public:
  // REQUIRES: env != nullptr, outliving the core.
  static Result<std::unique_ptr<CacheCore>> Open(CacheOptions options, Env* env);
  ~CacheCore();  // Close()
  CacheCore(const CacheCore&) = delete;
  CacheCore& operator=(const CacheCore&) = delete;

  MatchResult Match(std::span<const BlockKey> chain);
  void HintDiskKeys(std::span<const BlockKey> keys);
  CacheTier Contains(const BlockKey& key);
  Result<bool> Erase(const BlockKey& key);
  Result<uint64_t> Clear();
  Result<LoadFuture> Load(std::span<const BlockKey> keys,
                          std::span<const std::span<std::byte>> dsts);
  Result<LoadFuture> LoadShared(std::span<const BlockKey> keys, SharedLoadOptions options);
  Result<size_t> Preload(std::span<const BlockKey> keys);
  Result<uint64_t> PrefaultReadBuffers(const ModelLayout& layout, uint64_t count);
  Status Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks,
               const StoreOptions& options);
  Status Flush();
  uint64_t ShrinkHost(uint64_t target_bytes, std::span<const BlockKey> protected_keys);
  Status Close();
  CacheStats Stats();
  const std::shared_ptr<SharedHostBudget>& host_budget() const { return budget_; }

 private:
  CacheCore(CacheOptions options, Env* env);
  Status Init();

  // Load and LoadShared: the host part on this thread, the rest handed to
  // the pool (or run here when load_threads is 0).
  Result<LoadFuture> StartLoad(std::shared_ptr<LoadState> st, std::span<const BlockKey> keys,
                               const char* what);
  // The part of a load below the host tier: the disk tier (reserve, read
  // in parallel, hand out, promote), then the remote tier for what the
  // disk did not have. Runs on a pool thread (or the caller's when
  // load_threads is 0).
  void RunLowerPart(const std::shared_ptr<LoadState>& st);
  // Reads positions `todo` of `st` from the remote tier (one pipelined
  // batch per node), hands out and promotes the hits; positions whose mask
  // selects a subset are read partially and never promoted.
  void RunRemotePart(LoadState& st, const std::vector<size_t>& todo);
  // Whether position i of `st` has a mask that selects a strict subset.
  static bool IsPartial(const LoadState& st, size_t i);
  // One part of `st` is done; the last one records the latency and
  // publishes the result.
  void FinishPart(LoadState& st);
  // Gives block i of `st` to its caller (copy, callback or result) and
  // counts it.
  void HandOut(LoadState& st, size_t i, CacheTier tier, const SharedBlock& block);
  void HandOutMiss(LoadState& st, size_t i);
  // A key whose destination was too small: counted, first one kept.
  void NoteLoadError(LoadState& st, size_t pos, const Status& s);
  // Makes a block read from disk or the remote tier a clean host entry,
  // paid for by `r`.
  void Promote(const BlockKey& key, const SharedBlock& block, HostTier::Reservation* r,
               CacheTier from);
  // The disk said it does not have `key`: clears the index's disk hint.
  void NoteDiskMiss(const BlockKey& key);

  // Erase() below the gate: every tier, then the index. `first` keeps the
  // first failure.
  bool EraseEverywhere(const BlockKey& key, Status* first);

  Status StoreOne(const BlockKey& key, const SharedBlock& block, WritePolicy policy);
  // Queues an accepted block for the remote tier; a refusal is counted.
  void PutRemote(const BlockKey& key, const SharedBlock& block);
  Status CheckHeader(const BlockKey& key, const BlockBuffer& block) const;
  // disk_->Store() with the index's disk hint set first (dropped again if
  // the store is refused and the hint was not there before).
  Status StoreOnDisk(const BlockKey& key, const SharedBlock& block);
  // Hands a dirty block to the disk tier (eviction sink, Flush, Close).
  Status WriteBack(const BlockKey& key, const SharedBlock& block);
  // Writes dirty host entries down until `deadline_micros` (env clock);
  // returns how many were left unwritten and the first error.
  Status WriteBackDirty(uint64_t deadline_micros, uint64_t* left);

  CacheStats LiveStats();
  void CopyBufferStats(CacheStats* s) const;
  Status DoClose();

  const CacheOptions options_;
  Env* const env_;
  CallGate gate_;
  CacheCounters counters_;
  BlockIndex index_;
  std::shared_ptr<SharedHostBudget> budget_;
  std::unique_ptr<DiskTier> disk_;      // null in a host-only cache
  std::unique_ptr<RemoteTier> remote_;  // null without a remote tier
  std::unique_ptr<HostTier> host_;      // destroyed by Close
  std::unique_ptr<TaskPool> pool_;      // null when load_threads is 0
  std::shared_ptr<BufferPool> buffers_;
  // CheckHeader's: the headers of one layout's blocks without a JSON parse
  // each (DecodeBlockHeader's verdict either way).
  mutable BlockVerifier store_verifier_;

  std::once_flag close_once_;
  Status close_status_;  // written once inside close_once_

  Mutex final_mu_;
  std::optional<CacheStats> final_stats_ GUARDED_BY(final_mu_);  // set by Close
};

}  // namespace kvtier::cache_internal

#endif  // KVTIER_CACHE_CACHE_CORE_H_
