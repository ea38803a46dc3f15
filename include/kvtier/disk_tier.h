// DiskTier: the persistent, verified, crash-safe block store on local disk
// (DESIGN.md §4–5). One file per block under <dir>/blocks/, a SQLite index
// shared by every process and layout using the folder, every read verified
// (a bad file is quarantined and the read is a miss, never wrong bytes),
// stores queued to background writers (first complete file wins), capacity
// by bytes, entries, retention and free disk. All file, folder, clock and
// thread access goes through the Env given to Open() (SQLite's own I/O on
// index.sqlite excepted). docs/disk-tier.md: the folder, the guarantees,
// every option.
//
// Ownership: Open() returns the only owner; the Env must outlive it.
// Destroying the tier closes it (see Close()).
//
// Thread safety: every method from any number of threads at once; nothing
// concurrently with or after the destructor.
#ifndef KVTIER_DISK_TIER_H_
#define KVTIER_DISK_TIER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/latency_histogram.h"
#include "kvtier/logger.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"

namespace kvtier {

// When a block is durable.
enum class Durability : uint8_t {
  // No fsync. A crash or power loss may lose recent blocks; a torn file is
  // rejected by its checksum when read and quarantined. Fast.
  kChecksum,
  // fsync the file, rename it, fsync its folder, then commit the index row.
  // A block whose Store() was followed by a successful Flush() survives a
  // power loss.
  kFsync,
};

// What Store() does when the write queue is full and stays full for
// `DiskTierOptions::queue_wait_micros`.
enum class OnPressure : uint8_t {
  kWriteInline,  // write the block on the caller's thread (never loses a block)
  kDrop,         // drop the block, count it in `drops`, return ResourceExhausted
};

struct DiskTierOptions {
  // The cache folder. Required. Created (with parents) if missing. Holds
  // blocks/<2 hex>/<64 hex>.safetensors, quarantine/ and index.sqlite.
  std::string dir;

  // The layout signature (ModelLayout::Signature()) of the blocks this tier
  // serves. Required. Blocks of other signatures in the same folder are kept,
  // counted per signature and never served. Store() refuses blocks whose
  // header names another signature.
  std::string layout_signature;

  // --- Capacity ---------------------------------------------------------
  // Bytes of block files the folder may hold, all layouts together, counted
  // as the file system allocates them (whole blocks or pages). The
  // effective limit is min(max_bytes, free_space_fraction × (tracked bytes +
  // free disk bytes)). 0 = no configured limit (free disk still bounds it).
  // Default 10 GiB.
  uint64_t max_bytes = 10ull << 30;
  // Block files the folder may hold, all layouts together. 0 = unlimited.
  // Default 0.
  uint64_t max_entries = 0;
  // Seconds a block is kept after it was written; older blocks are removed
  // by the background maintenance and counted in `expired`. 0 = forever.
  // Any value up to INT64_MAX: the time arithmetic saturates, so a huge
  // retention keeps everything. Default 0.
  int64_t retention_seconds = 0;
  // Fraction of (tracked + free disk bytes) the cache may use, in (0, 1].
  // Default 0.99.
  double free_space_fraction = 0.99;
  // Microseconds a free-disk-space reading is reused before it is read
  // again; an ENOSPC forces a fresh reading. Default 2 s.
  uint64_t free_space_ttl_micros = 2'000'000;
  // Most block files one store unlinks to make room for itself; the rest is
  // left for later stores (and EnforceLimit(), which has no bound). > 0.
  // Default 32.
  uint32_t max_unlinks_per_store = 32;

  // --- Writes -----------------------------------------------------------
  // Background writer threads. 0 = every Store() writes inline on the
  // caller's thread. Default 2.
  uint32_t writer_threads = 2;
  // Bytes of blocks waiting to be written (and readable from RAM meanwhile).
  // 0 = derived from RAM: 10% of physical memory, at least 64 MiB, at most
  // 30% of physical memory and 8 GiB (the reasoning of seed 000's
  // _compute_max_pending_writes, in bytes). A block larger than the bound is
  // still accepted when the queue is empty. Default 0.
  uint64_t queue_max_bytes = 0;
  // Microseconds Store() waits for queue space before it falls back to
  // `on_pressure`. Default 1 s.
  uint64_t queue_wait_micros = 1'000'000;
  // Bytes of blocks a writer thread takes from the queue at once and
  // commits in one index transaction (at least one block, at most 256):
  // the index work of a batch (lookups, reservation, commit) is done once.
  // Other processes see a batch's files when its rows commit, so a shared
  // folder may exceed its limit by up to one batch (or one block, if
  // larger) per writer. 0 = one block at a time. Default 1 MiB.
  uint64_t commit_batch_bytes = 1 << 20;
  // What a store does once the wait above ran out. Default kWriteInline.
  OnPressure on_pressure = OnPressure::kWriteInline;
  // When a block is durable. Default kChecksum.
  Durability durability = Durability::kChecksum;

  // --- Reads ------------------------------------------------------------
  // Read blocks of at least direct_io_min_bytes with O_DIRECT when the
  // destination buffer is 4096-byte aligned (BlockBuffers always are; file
  // systems that refuse O_DIRECT fall back to buffered reads). A large
  // block then skips the page cache, and the kernel's copy out of it, which
  // a restore would only pay for twice: the host tier is the RAM cache.
  // `kvtier bench disk` measured 0.91-1.36x the raw buffered cold read
  // with it against 0.76-0.93x without, for 3 MiB blocks. Default true.
  bool direct_io_reads = true;
  // Smaller blocks are read through the page cache (O_DIRECT only adds
  // latency to a small read). Default 1 MiB.
  uint64_t direct_io_min_bytes = 1 << 20;
  // Threads LoadMany() and LoadBuffers() read with (the caller's thread
  // helps too). 0 = they read on the caller's thread only. Default 4.
  uint32_t read_threads = 4;

  // --- Index and maintenance --------------------------------------------
  // Milliseconds an index call waits on another process's lock before it
  // reports Unavailable. Default 10000.
  uint32_t sqlite_busy_timeout_ms = 10'000;
  // Milliseconds between flushes of buffered last-access times to the
  // index (LRU order); Flush() and Close() flush at once. Default 1000.
  uint32_t touch_flush_interval_ms = 1000;
  // Run a reconcile pass in the background when the tier opens: adopt files
  // with no index row, drop rows with no file, remove abandoned temp files,
  // quarantine foreign files, enforce the limit. Default true.
  bool reconcile_on_open = true;
  // When reconcile_on_open is off (a short-lived writer such as `kvtier
  // synth --cache`): entries of blocks/ that Open() itself reconciles, on
  // the caller's thread, from a subfolder that changes from open to open:
  // whole subfolders until this many entries were seen. So files a killed
  // writer left without a row (and its temp files) are adopted (or
  // quarantined, if their header does not verify) by every process that
  // writes to the folder, and an open never walks a huge folder whole.
  // 0 = none. Default 4096.
  uint64_t open_reconcile_entries = 4096;
  // Writers hold an advisory lock on their temp files; a temp file no one
  // holds is abandoned and removed by the reconcile. On a file system
  // without advisory locks: seconds after which a temp file is abandoned.
  // > 0. Default 3600.
  int64_t stale_temp_seconds = 3600;
  // Seconds a quarantined file is kept for inspection before the
  // maintenance removes it. 0 = keep until `kvtier gc`. Default 7 days.
  int64_t quarantine_retention_seconds = 7 * 24 * 3600;

  // --- Permissions ------------------------------------------------------
  // Mode bits of block files and the index (seed 003's defaults). Only
  // 0..0777. Default 0600.
  uint32_t file_permissions = 0600;
  // Mode bits of the folders the tier creates. Only 0..0777 and must
  // include owner rwx (0700). Default 0700.
  uint32_t dir_permissions = 0700;

  // --- Events -----------------------------------------------------------
  // Where the tier reports free-disk pressure, ENOSPC, quarantined files,
  // stores written inline or dropped because the queue was full, and failed
  // block writes (kvtier/logger.h), rate-limited. Not owned; must outlive
  // the tier. A TieredCache sets it to CacheOptions::info_log when null.
  // nullptr = none. Default nullptr.
  Logger* info_log = nullptr;
  // Called with the key of each block Store() accepted that is not on disk
  // after all: its write failed (a full disk, an I/O error, an index that
  // refused its row) or was skipped (a read-only folder). Runs on the
  // thread that wrote it (a writer thread, or the caller of Store()), with
  // no lock held; it must not call back into the tier. A TieredCache sets
  // it to drop its disk hint for the key. nullptr = none. Default nullptr.
  std::function<void(const BlockKey&)> write_failure_listener;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// The write-queue bound used when DiskTierOptions::queue_max_bytes is 0,
// for a machine with `physical_memory_bytes` of RAM.
uint64_t DefaultDiskQueueBytes(uint64_t physical_memory_bytes);

// What DiskTierStats::ToPrometheus() prints.
enum class DiskStatsScope : uint8_t {
  kAll,         // counters, gauges, histograms, per-signature gauges
  kFolderOnly,  // what the folder itself says: gauges of the index and files
  // kFolderOnly without a reference signature to judge by (`kvtier stats
  // --prometheus` without --layout): no compatible_* gauges, and the
  // per-signature gauges carry no `compatible` label.
  kFolderUnjudged,
};

// Blocks and bytes of one layout signature in a shared cache folder.
struct SignatureUsage {
  std::string signature;
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  bool compatible = false;  // equal to the reading tier's own signature
};

// The metrics of a DiskTier, X(name, kind, help) (kvtier/stats_table.h).
// Counters count events in this process since the tier opened.
#define KVTIER_DISK_COUNTERS(X)                                                                \
  X(saves, kCounter, "Store() calls accepted (queued or written inline)")                      \
  X(saves_persisted, kCounter, "blocks renamed into place and indexed")                        \
  X(saves_deduplicated, kCounter, "stores skipped: already queued or on disk")                 \
  X(loads, kCounter, "Load() lookups (LoadMany counts each key)")                              \
  X(hits, kCounter, "loads served verified bytes")                                             \
  X(hits_pending, kCounter, "hits served from the pending-write buffer (counted in hits too)") \
  X(misses, kCounter, "loads that served nothing (any reason)")                                \
  X(incompatible_misses, kCounter, "misses because the block has another layout signature")    \
  X(evictions, kCounter, "block files removed to respect the limit")                           \
  X(expired, kCounter, "block files removed by retention")                                     \
  X(unlink_failures, kCounter, "evictions whose unlink failed (row kept)")                     \
  X(errors, kCounter, "failed writes, index calls, renames")                                   \
  X(inline_writes, kCounter, "stores written on the caller's thread (queue full)")             \
  X(drops, kCounter, "stores dropped under OnPressure::kDrop")                                 \
  X(read_only_skips, kCounter, "stores skipped: the folder is read-only")                      \
  X(quarantined, kCounter, "files moved to quarantine/ (bad, foreign)")                        \
  X(bytes_written, kCounter, "block bytes persisted")                                          \
  X(bytes_read, kCounter, "block bytes served")                                                \
  X(reconcile_passes, kCounter, "completed reconcile passes")                                  \
  X(reconcile_adopted, kCounter, "block files with no index row that reconcile gave one")      \
  X(reconcile_rows_dropped, kCounter, "index rows reconcile dropped: their file was gone")     \
  X(reconcile_temps_removed, kCounter, "temp files of dead writers reconcile removed")         \
  X(load_latency, kHistogram, "time of one Load() that hit")                                   \
  X(write_latency, kHistogram, "time of one block's write + rename + commit")
// Gauges describe this tier now and the shared folder as its index records it.
#define KVTIER_DISK_GAUGES(X)                                                                 \
  X(queue_bytes, kGauge, "bytes of blocks queued or being written")                           \
  X(queue_blocks, kGauge, "blocks queued or being written")                                   \
  X(reconcile_running, kFlag, "1 while a reconcile pass is running, else 0")                  \
  X(entries, kGauge, "indexed block files, all signatures")                                   \
  X(bytes, kGauge, "bytes of the indexed block files (file lengths), all signatures")         \
  X(allocated_bytes, kGauge,                                                                  \
    "bytes the indexed block files take from the disk (whole file system blocks), estimated") \
  X(compatible_entries, kGauge,                                                               \
    "indexed block files of this tier's layout signature (kvtier stats: of --layout's)")      \
  X(compatible_bytes, kGauge,                                                                 \
    "bytes of the indexed block files of this tier's layout signature (kvtier stats: of "     \
    "--layout's)")                                                                            \
  X(configured_max_bytes, kGauge,                                                             \
    "the size limit set in DiskTierOptions::max_bytes, in bytes (0 = none)")                  \
  X(effective_max_bytes, kGauge,                                                              \
    "the size limit in force now, in bytes (held against allocated_bytes)")                   \
  X(quarantine_files, kGauge, "files in quarantine/")
#define KVTIER_DISK_STATS(X) KVTIER_DISK_COUNTERS(X) KVTIER_DISK_GAUGES(X)

// One cause of failed block writes: the error with what differs from block
// to block (its key, its temp file's name) left out, e.g. "index block
// <key>: index: COMMIT: attempt to write a readonly database".
struct WriteFailureCause {
  std::string cause;
  uint64_t count = 0;  // block writes it failed since the tier opened
};

// A snapshot of a DiskTier: KVTIER_DISK_STATS as fields, the folder's
// usage per layout signature, and why block writes failed.
struct DiskTierStats {
  KVTIER_DISK_STATS(KVTIER_STATS_FIELD)
  std::vector<SignatureUsage> per_signature;  // sorted by signature
  // The distinct causes of failed block writes, most frequent first: at
  // most kMaxWriteFailureCauses, the rest added up under the cause
  // "other causes". Their counts add up to the write failures among
  // `errors` (which also counts failed index calls outside a write).
  std::vector<WriteFailureCause> write_failures;
  static constexpr size_t kMaxWriteFailureCauses = 8;

  // Each entry of KVTIER_DISK_STATS with its value (not per_signature).
  KVTIER_STATS_FOR_EACH(KVTIER_DISK_STATS)

  // One JSON object: every field above, histograms as
  // {"count","sum_us","max_us","p50_us","p99_us","buckets":[...]}.
  std::string ToJson() const;
  // Prometheus text exposition: `<prefix>_<name>`, counters end in `_total`,
  // latencies as `<prefix>_*_latency_seconds` histograms, per-signature
  // gauges labelled {signature, compatible}; each family opens with
  // `# HELP` (its help in the table) and `# TYPE`.
  std::string ToPrometheus(std::string_view prefix = "kvtier_disk",
                           DiskStatsScope scope = DiskStatsScope::kAll) const;
};

// What one reconcile pass found and did.
struct ReconcileReport {
  uint64_t files_seen = 0;          // block files found on disk
  uint64_t adopted = 0;             // files with no row that got one
  uint64_t rows_dropped = 0;        // rows whose file was gone
  uint64_t temps_removed = 0;       // temp files of dead writers removed
  uint64_t quarantined = 0;         // foreign or unreadable files moved away
  uint64_t quarantine_removed = 0;  // quarantined files past their retention
  uint64_t evicted = 0;             // blocks removed to get under the limit
  uint64_t expired = 0;             // blocks removed by retention
};

class DiskTier {
 public:
  // Opens (creating if needed) the cache folder options.dir. Returns
  // InvalidArgument for bad options (naming the field), an IOError if the
  // folder or the index cannot be opened. A corrupt index.sqlite is moved
  // to quarantine/ and rebuilt from the files by the reconcile, unless
  // another tier (in any process) has the folder open: then Unavailable,
  // and the file is left alone.
  //
  // A folder this process cannot write (a read-only mount, an image,
  // another user's files: a probe file cannot be created in it with EROFS,
  // EACCES or EPERM) is opened read-only, with one log line: blocks are
  // served (the index read-only, or immutable where SQLite cannot make its
  // shared-memory file), Store() skips every block and counts it in
  // `read_only_skips` (returning OK; write_failure_listener is told), access
  // times are not recorded, nothing is evicted, reconciled or quarantined,
  // and Erase, Forget, Clear, EnforceLimit and Reconcile return
  // FailedPrecondition.
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
  // Contains() for each key, with one index query per 256 keys instead of
  // one per key (each a read transaction of the index). All false once
  // closed or when the index cannot be read.
  virtual std::vector<bool> ContainsMany(std::span<const BlockKey> keys) = 0;

  // Calls fn(key, size) for every indexed block of this tier's signature, in
  // key order (pending writes not included), e.g. to seed an in-memory
  // index. Reads the index in batches; blocks added or removed meanwhile may
  // or may not be seen. The callback must not call back into the tier.
  virtual Status ForEachKey(const std::function<void(const BlockKey&, uint64_t)>& fn) = 0;

  // Reads the block into `dst` (one copy) and verifies it. A block under
  // 1 MiB (and under direct_io_min_bytes when reads are direct) is read file
  // first, without an index lookup, when retention_seconds is 0: its file
  // must verify on its own, meta_checksum included; any other file or block
  // is sized and judged by its index row (one lookup; LoadBuffers() batches
  // them), the row's header hash included. Returns its size,
  // or nullopt on a miss (absent, other signature, expired, file gone,
  // corrupt: the last is quarantined). On a miss the contents of `dst` are
  // unspecified. InvalidArgument if `dst` is smaller than the block (the
  // message names both sizes; SizeOf() tells the size first).
  virtual Result<std::optional<size_t>> Load(const BlockKey& key, std::span<std::byte> dst) = 0;
  // Load() of each key into the matching buffer, in parallel on the read
  // threads. REQUIRES: keys.size() == dsts.size().
  virtual std::vector<Result<std::optional<size_t>>> LoadMany(
      std::span<const BlockKey> keys, std::span<const std::span<std::byte>> dsts) = 0;

  // Supplies the buffer a block is read into (its exact size).
  using BufferAllocator = std::function<Result<BlockBuffer>(size_t bytes)>;
  // Called once per key as its read finishes (any thread, any order):
  // the verified block, nullopt on a miss, or an error.
  using LoadedBufferCallback =
      std::function<void(size_t index, Result<std::optional<BlockBuffer>> result)>;
  // Reads keys[i] into a buffer from `alloc`, verifies it once (DecodeBlock:
  // structure, key, signature, checksum; header hash vs row, see Load()) and
  // hands it to `done(i, ...)` as soon as it lands, reading in parallel on the
  // read threads (large sequential preads; O_DIRECT where it helps). Pending
  // writes are served from the pending buffer (copied into an `alloc` buffer).
  // Returns after every callback has returned.
  //
  // Misses are as for Load() (a file that fails verification is
  // quarantined). An error is reported for that key alone: `alloc` failing
  // (its status), `alloc` returning a buffer of another size
  // (InvalidArgument), FailedPrecondition after Close(). A buffer `done`
  // does not receive (a miss, an error) is destroyed before `done` is called.
  // `alloc` and `done` are called from the read threads and the caller's
  // thread, possibly at once; they must not call back into the tier.
  virtual void LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                           const LoadedBufferCallback& done) = 0;
  // LoadBuffers() reading only the tensors masks[i] selects of keys[i]
  // (block_file.h TensorMask; masks shorter than keys, or an empty mask,
  // mean whole blocks): the file opened for random access (no kernel
  // readahead), a pread of the header (one, once a header of that length
  // has been read), then one of each run of selected tensors, runs less
  // than 64 KiB apart joined while the gaps add up to at most 1/32 of the
  // selected bytes. The reads of a batch run in lanes (one per read thread
  // and the caller) that ask the device for their next two blocks' header
  // and ranges (RandomAccessFile::Prefetch, at the offsets the last read of
  // that mask found) before they read the one they have. The buffer is the
  // whole file's size with the header and the selected tensors' bytes
  // verified (meta_checksum, the row's header hash, each one's
  // tensor_checksums entry) and the rest unspecified; a selected tensor that
  // fails is a miss and the file is quarantined; the unselected tensors are
  // never read (but for a joined gap). A file without tensor_checksums is
  // read and verified whole. `bytes_read` counts what was read, gaps and
  // prefetched bytes no read used included. The default reads whole blocks
  // (a valid superset).
  virtual void LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                                 const BufferAllocator& alloc, const LoadedBufferCallback& done) {
    (void)masks;
    LoadBuffers(keys, alloc, done);
  }

  // Queues `block` (the bytes of a block file for `key`, of this tier's
  // signature) for writing and returns. The header is checked first:
  // InvalidArgument if it is malformed or names another key or signature.
  // When the queue is full Store() waits up to queue_wait_micros, then writes
  // inline (OnPressure::kWriteInline, returning the write's status) or drops
  // the block (kDrop: ResourceExhausted, counted). A key already pending or
  // on disk is not written again. FailedPrecondition after Close().
  virtual Status Store(const BlockKey& key, SharedBlock block) = 0;

  // Removes the block: cancels a pending write (one being written is waited
  // for, and its writer removes what it wrote), deletes its row and unlinks
  // its file (seed 000's delete_block): no load that starts after it returns
  // finds the block. True if anything was removed.
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
