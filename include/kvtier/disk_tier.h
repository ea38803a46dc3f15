// DiskTier: the persistent, verified, crash-safe block store on local disk
// (DESIGN.md §4–5, docs/disk-tier.md).
//
// A block is the bytes of one block file (include/kvtier/block_file.h). The
// tier stores them as they are, one file per block:
//
//   <dir>/blocks/<first 2 hex>/<64 hex key>.safetensors
//   <dir>/blocks/<2 hex>/<64 hex>.safetensors.tmp.<pid>.<n>   (being written)
//   <dir>/quarantine/                                        (rejected files)
//   <dir>/index.sqlite                                       (WAL mode)
//
// and verifies every read with DecodeBlock (structure, expected key, expected
// layout signature, checksum): a file that fails is quarantined and the read
// is a miss, never wrong bytes. Store() returns at once; background writers
// write each block to a unique temp name in its final folder, rename it into
// place and then commit its index row (in kFsync mode: fsync file, rename,
// fsync folder, commit). A block is readable from the pending-write buffer
// until its row is committed.
//
// The SQLite index is the fast path for restart and the shared accounting
// for every process using the folder: Open() serves hits at once while a
// bounded background reconcile adopts files with no row, drops rows with no
// file, removes temp files of dead writers and enforces the limit. Any number
// of processes, and of layouts, may share one folder; capacity (bytes,
// entries, retention, free disk) counts them all, LRU by last access.
//
// File, folder, clock and thread access goes through the Env given to
// Open(). SQLite does its own file I/O on index.sqlite through its VFS; that
// is the one exception.
//
// Ownership: Open() returns the only owner. The Env must outlive the tier.
// Destroying the tier closes it (see Close()).
//
// Thread safety: every method may be called from any number of threads at
// once, except that nothing may be called concurrently with or after the
// destructor.
#ifndef KVTIER_DISK_TIER_H_
#define KVTIER_DISK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/options.h"
#include "kvtier/stats.h"
#include "kvtier/status.h"

namespace kvtier {

// What one reconcile pass found and did.
struct ReconcileReport {
  uint64_t files_seen = 0;       // block files found on disk
  uint64_t adopted = 0;          // files with no row that got one
  uint64_t rows_dropped = 0;     // rows whose file was gone
  uint64_t temps_removed = 0;    // temp files of dead writers removed
  uint64_t quarantined = 0;      // foreign or unreadable files moved away
  uint64_t quarantine_removed = 0;  // quarantined files past their retention
  uint64_t evicted = 0;          // blocks removed to get under the limit
  uint64_t expired = 0;          // blocks removed by retention
};

class DiskTier {
 public:
  // Opens (creating if needed) the cache folder options.dir. Returns
  // InvalidArgument for bad options (naming the field), an IOError if the
  // folder or the index cannot be opened. A corrupt index.sqlite is moved
  // to quarantine/ and rebuilt from the files by the reconcile.
  // REQUIRES: env != nullptr, outliving the tier.
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options, Env* env);

  virtual ~DiskTier() = default;
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // True if a block of this tier's signature is pending or indexed for
  // `key`. No file I/O; a later Load() may still miss (file gone, corrupt).
  virtual bool Contains(const BlockKey& key) = 0;
  // The byte size of the block Contains() would report, or nullopt.
  virtual std::optional<uint64_t> SizeOf(const BlockKey& key) = 0;

  // Reads the block into `dst` (one copy) and verifies it. Returns its size,
  // or nullopt on a miss (absent, other signature, expired, file gone,
  // corrupt: the last is quarantined). On a miss the contents of `dst` are
  // unspecified. InvalidArgument if `dst` is smaller than the block (the
  // message names both sizes; SizeOf() tells the size first).
  virtual Result<std::optional<size_t>> Load(const BlockKey& key, std::span<std::byte> dst) = 0;
  // Load() of each key into the matching buffer, in parallel on the read
  // threads. REQUIRES: keys.size() == dsts.size().
  virtual std::vector<Result<std::optional<size_t>>> LoadMany(
      std::span<const BlockKey> keys, std::span<const std::span<std::byte>> dsts) = 0;

  // Queues `block` (the bytes of a block file for `key`, of this tier's
  // signature) for writing and returns. The header is checked first:
  // InvalidArgument if it is malformed or names another key or signature.
  // When the queue is full Store() waits up to queue_wait_micros, then writes
  // inline (OnPressure::kWriteInline, returning the write's status) or drops
  // the block (kDrop: ResourceExhausted, counted). A key already pending or
  // on disk is not written again. FailedPrecondition after Close().
  virtual Status Store(const BlockKey& key, SharedBlock block) = 0;

  // Removes the block: cancels a pending write, deletes its row and unlinks
  // its file (seed 000's delete_block). True if anything was removed.
  virtual Result<bool> Erase(const BlockKey& key) = 0;
  // Cancels a pending write and drops the index row but keeps the file: the
  // next reconcile re-derives the row from the file's own header (seed 000's
  // forget_block). True if anything was removed.
  virtual Result<bool> Forget(const BlockKey& key) = 0;
  // Erases every block of every signature in the folder and cancels every
  // pending write. Returns the number of block files removed.
  virtual Result<uint64_t> Clear() = 0;

  // Waits until every store accepted before the call is written and indexed
  // (or has failed, which is counted), and flushes buffered access times.
  virtual Status Flush() = 0;
  // Evicts (LRU, all signatures) and expires until the folder is within its
  // effective limit, however many files that takes. Returns bytes freed.
  virtual Result<uint64_t> EnforceLimit() = 0;
  // Runs one full reconcile pass on the caller's thread and returns what it
  // did (also done in the background at Open() unless disabled).
  virtual Result<ReconcileReport> Reconcile() = 0;
  // Blocks until the background reconcile started by Open() has finished.
  virtual void WaitForBackgroundReconcile() = 0;

  virtual DiskTierStats Stats() = 0;

  // Stops accepting stores, writes everything queued, stops the background
  // threads and closes the index. Idempotent; later calls other than Stats()
  // return FailedPrecondition (or miss).
  virtual Status Close() = 0;

 protected:
  DiskTier() = default;
};

}  // namespace kvtier

#endif  // KVTIER_DISK_TIER_H_
