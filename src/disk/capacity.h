// Capacity: how much a cache folder may hold, making room for new blocks,
// and what to evict (EvictRows: the eviction policy over the row store,
// DiskIndex).
//
// The effective byte limit is min(max_bytes, free_space_fraction × (bytes
// the index tracks + free disk bytes)), counting every layout in the folder.
// Bytes are counted as the file system allocates them (whole blocks or
// pages: a 5,024-byte file takes 8 KiB on tmpfs or ext4), estimated from the
// index's totals with the folder's allocation unit, which Capacity learns
// from a block file's Stat (FileInfo::allocated_bytes); until it has seen
// one it counts file lengths. When a write still finds the disk full (other
// processes' blocks in flight, other data), MakeRoom() evicts at least the
// block's room before the writer tries again.
// Free disk space is read through Env::FreeSpace and reused for
// free_space_ttl_micros, corrected by what this process wrote and freed
// since; an ENOSPC drops the reading so the next decision re-reads it.
//
// Reserve() admits new blocks (a writer's batch): it counts them as in flight
// in this process, evicts expired and then least-recently-accessed files (at
// most max_unlinks_per_store per block) until the indexed bytes plus
// everything in flight fit, and returns a reservation the writer holds until
// the blocks' index rows are committed. Evictions unlink inside the index
// write transaction, so a freed byte is never counted twice by two
// processes.
//
// Thread safety: all methods are safe from any thread. One mutex guards the
// free-space reading and the in-flight totals; no I/O or SQLite call runs
// under it. EvictRows() has no state of its own.
#ifndef KVTIER_DISK_CAPACITY_H_
#define KVTIER_DISK_CAPACITY_H_

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/kill_points.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

// The inputs of the effective byte limit.
struct LimitSpec {
  uint64_t max_bytes = 0;    // configured; 0 = none
  uint64_t max_entries = 0;  // configured; 0 = none
  double free_space_fraction = 0.99;
  uint64_t free_bytes = UINT64_MAX;  // free disk bytes; UINT64_MAX = unknown
};

// min(max_bytes, fraction × (tracked_bytes + free_bytes)).
uint64_t EffectiveLimitBytes(const LimitSpec& spec, uint64_t tracked_bytes);

// Why a store of `blocks` files of `file_bytes` in all, taking `allocated`
// bytes in units of `unit`, does not fit under `limit` (allocated bytes),
// which the free disk (or else max_bytes) sets: one sentence that says what
// exceeds what.
std::string TooLargeMessage(uint64_t file_bytes, uint64_t blocks, uint64_t allocated, uint64_t unit,
                            uint64_t limit, bool free_disk_binds);

struct EvictRequest {
  LimitSpec limit;
  uint64_t alloc_unit = 1;       // rows count as their sizes rounded up to this
  uint64_t reserve_bytes = 0;    // allocated bytes about to be added on top of the rows
  uint64_t reserve_entries = 0;  // files about to be added
  int64_t expire_before_us = 0;  // rows created before this go regardless; 0 = none
  uint32_t max_victims = 0;      // files removed at most; 0 = no bound
};

struct EvictOutcome {
  uint64_t evicted = 0;  // removed for the limit
  uint64_t expired = 0;  // removed for retention
  uint64_t bytes_freed = 0;      // file lengths
  uint64_t allocated_freed = 0;  // ... as allocated (estimated with the unit)
  uint64_t unlink_failures = 0;  // rows kept because their file would not go
  bool within_limit = false;     // rows + reserve fit the limit afterwards
  uint64_t effective_limit = 0;
  IndexTotals after;
};

// Removes a victim's file: OK or kNotFound when it is gone; any other
// status keeps the row.
using UnlinkFn = std::function<Status(const BlockKey&)>;
// Called after the first unlink of an eviction transaction (kill tests).
using EvictHook = std::function<void()>;

// Removes expired rows of `index`, then LRU rows (all signatures) until
// rows + reserve fit the effective limit, unlinking each victim's file
// inside the index's write transaction so no other process counts freed
// space before the file is gone. Unbounded requests run in chunks of
// transactions.
Result<EvictOutcome> EvictRows(DiskIndex* index, const EvictRequest& req, const UnlinkFn& unlink,
                               const EvictHook& hook = {});

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

  // Expires and evicts with no bound on the number of files until the
  // indexed blocks are within the limit. Blocks in flight are not counted:
  // their Reserve() made their room already, and a block whose row has just
  // committed is still in flight until its writer lets the reservation go,
  // so counting both evicted that block itself when the limit held one.
  Result<EvictOutcome> EnforceLimit();

  // After a write of `bytes` failed for lack of space (ENOSPC, SQLITE_FULL):
  // reads free space again and evicts (LRU, at most max_unlinks_per_store
  // files) until the limit holds and at least the room of `bytes` is freed,
  // whatever the accounting says (the disk has the last word). The outcome
  // says whether anything went; if nothing did, the write cannot fit.
  // FailedPrecondition, evicting nothing, if free space is plentiful (at
  // least twice the room plus 64 KiB or an eighth of indexed + free bytes,
  // whichever is more): then the disk is not what refused the write (a
  // quota, no inodes left).
  Result<EvictOutcome> MakeRoom(uint64_t bytes);

  // The limit in force for `tracked_bytes` indexed (allocated) bytes.
  uint64_t EffectiveLimit(uint64_t tracked_bytes);

  // The folder's allocation unit as learned so far (1 until a file was seen).
  uint64_t alloc_unit();
  // Learns the allocation unit from a block file's Stat.
  void NoteAllocation(const FileInfo& info);
  // `bytes` of file rounded up to the allocation unit.
  uint64_t AllocatedFor(uint64_t bytes) { return AllocatedEstimate(bytes, alloc_unit()); }
  // True once NoteAllocation() has seen a file with allocation information.
  bool alloc_unit_known();

  // After an ENOSPC: the next decision reads free space again.
  void InvalidateFreeSpace();
  // Bytes this process put on disk or removed since the last reading.
  void NoteWritten(uint64_t bytes);
  void NoteFreed(uint64_t bytes);

  uint64_t inflight_bytes();

  // Bytes of blocks a writer may take at once: `configured` (the option
  // commit_batch_bytes), but at most 1/32 of the limit last in force, so
  // that the blocks every writer has on disk before their rows commit (and
  // that no one can evict yet) stay a small part of a small disk.
  uint64_t BatchBytes(uint64_t configured);

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
  uint64_t alloc_unit_ GUARDED_BY(mu_) = 1;
  uint64_t last_limit_ GUARDED_BY(mu_) = UINT64_MAX;  // of the latest Reserve()
  bool alloc_unit_known_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_CAPACITY_H_
