// Capacity: how much a cache folder may hold and making room for new blocks.
//
// The effective byte limit is min(max_bytes, free_space_fraction × (bytes
// the index tracks + free disk bytes)), counting every layout in the folder.
// Free disk space is read through Env::FreeSpace and reused for
// free_space_ttl_micros, corrected by what this process wrote and freed
// since; an ENOSPC drops the reading so the next decision re-reads it.
//
// Reserve() admits new blocks (a writer's batch): it counts them as in flight
// in this process, evicts expired and then least-recently-accessed files (at
// most max_unlinks_per_store per block) until the indexed bytes plus
// everything in flight fit, and returns a reservation the writer holds until
// the blocks' index rows are committed. Evictions unlink inside the index write transaction, so a
// freed byte is never counted twice by two processes.
//
// Thread safety: all methods are safe from any thread; no I/O or SQLite call
// runs under the mutex.
#ifndef KVTIER_DISK_CAPACITY_H_
#define KVTIER_DISK_CAPACITY_H_

#include <cstdint>
#include <functional>
#include <mutex>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/kill_points.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

class Capacity {
 public:
  // Holds one block's bytes in flight; releases them when destroyed.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Capacity* owner, uint64_t bytes, uint64_t blocks)
        : owner_(owner), bytes_(bytes), blocks_(blocks) {}
    Reservation(Reservation&& o) noexcept : owner_(o.owner_), bytes_(o.bytes_), blocks_(o.blocks_) {
      o.owner_ = nullptr;
    }
    Reservation& operator=(Reservation&& o) noexcept;
    ~Reservation() { Release(); }
    void Release();

   private:
    Capacity* owner_ = nullptr;
    uint64_t bytes_ = 0;
    uint64_t blocks_ = 0;
  };

  // REQUIRES: every pointer outlives this object.
  // `kill_hook` may hold no function (tests only: kill_points.h).
  Capacity(const DiskTierOptions* options, Env* env, DiskIndex* index, const FolderLayout* layout,
           DiskCounters* counters, const KillHook* kill_hook);

  // Admits `blocks` new blocks of `bytes` in all (a writer's batch), with
  // one totals query and at most max_unlinks_per_store victims per block.
  // ResourceExhausted if `bytes` is larger than the effective limit itself;
  // index errors are returned as they are.
  Result<Reservation> Reserve(uint64_t bytes, uint64_t blocks);

  // Expires and evicts with no bound on the number of files until the folder
  // is within its limit (counting blocks in flight here).
  Result<EvictOutcome> EnforceLimit();

  // The limit in force for `tracked_bytes` indexed bytes.
  uint64_t EffectiveLimit(uint64_t tracked_bytes);

  // After an ENOSPC: the next decision reads free space again.
  void InvalidateFreeSpace();
  // Bytes this process put on disk or removed since the last reading.
  void NoteWritten(uint64_t bytes);
  void NoteFreed(uint64_t bytes);

  uint64_t inflight_bytes();

  // Removes a block file for an eviction: OK or NotFound when it is gone.
  Status UnlinkBlock(const BlockKey& key);

 private:
  uint64_t FreeBytes();
  LimitSpec Spec();
  EvictRequest MakeRequest(const LimitSpec& spec, uint64_t reserve_bytes, uint64_t reserve_entries,
                           uint32_t max_victims);
  void Account(const EvictOutcome& out);

  const DiskTierOptions* const options_;
  Env* const env_;
  DiskIndex* const index_;
  const FolderLayout* const layout_;
  DiskCounters* const counters_;
  const KillHook* const kill_hook_;

  Mutex mu_;
  bool free_valid_ GUARDED_BY(mu_) = false;
  uint64_t free_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t free_read_at_us_ GUARDED_BY(mu_) = 0;
  uint64_t written_since_ GUARDED_BY(mu_) = 0;
  uint64_t freed_since_ GUARDED_BY(mu_) = 0;
  uint64_t inflight_bytes_ GUARDED_BY(mu_) = 0;
  uint64_t inflight_blocks_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_CAPACITY_H_
