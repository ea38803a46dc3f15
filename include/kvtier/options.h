// Options of every kvtier tier, one struct per tier, composed later into the
// cache's options.
//
// Every field has an in-class default and a comment giving its unit, its
// effect and its default. Each struct's Validate() returns OK or an
// InvalidArgument status whose message starts with the bad field's name.
//
// Thread safety: plain values. A tier copies its options when it opens.
#ifndef KVTIER_OPTIONS_H_
#define KVTIER_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <string>

#include "kvtier/status.h"

namespace kvtier {

// ---------------------------------------------------------------------------
// Disk tier (include/kvtier/disk_tier.h, docs/disk-tier.md)
// ---------------------------------------------------------------------------

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

// Where a test may stop the process (DiskTierOptions::test_kill_hook).
enum class DiskKillPoint : uint8_t {
  kBeforeWrite,        // temp file not created yet
  kMidWrite,           // half of the bytes appended to the temp file
  kBeforeRename,       // temp file complete (and fsynced in kFsync mode)
  kBeforeDirSync,      // renamed, folder not fsynced yet (kFsync mode only)
  kBeforeIndexCommit,  // file in place, index row not committed yet
  kMidEviction,        // eviction transaction open, some victims unlinked
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
  // Bytes of block files the folder may hold, all layouts together. The
  // effective limit is min(max_bytes, free_space_fraction × (tracked bytes +
  // free disk bytes)). 0 = no configured limit (free disk still bounds it).
  // Default 10 GiB.
  uint64_t max_bytes = 10ull << 30;
  // Block files the folder may hold, all layouts together. 0 = unlimited.
  // Default 0.
  uint64_t max_entries = 0;
  // Seconds a block is kept after it was written; older blocks are removed
  // by the background maintenance and counted in `expired`. 0 = forever.
  // Default 0.
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
  // What a store does once the wait above ran out. Default kWriteInline.
  OnPressure on_pressure = OnPressure::kWriteInline;
  // When a block is durable. Default kChecksum.
  Durability durability = Durability::kChecksum;

  // --- Reads ------------------------------------------------------------
  // Read with O_DIRECT when the destination buffer is 4096-byte aligned and
  // large enough for the block rounded up to 4096 bytes (file systems that
  // refuse O_DIRECT fall back to buffered reads). Default false.
  bool direct_io_reads = false;
  // Threads LoadMany() reads with (the caller's thread helps too).
  // 0 = LoadMany() reads on the caller's thread only. Default 4.
  uint32_t read_threads = 4;

  // --- Index and maintenance --------------------------------------------
  // Milliseconds an index call waits on another process's lock before it
  // reports Unavailable. Default 10000.
  uint32_t sqlite_busy_timeout_ms = 10'000;
  // Milliseconds between flushes of buffered last-access times to the
  // index (LRU order); Flush() and Close() flush at once. Default 1000.
  uint32_t touch_flush_interval_ms = 1000;
  // Run a reconcile pass in the background when the tier opens: adopt files
  // with no index row, drop rows with no file, remove temp files of dead
  // processes, quarantine foreign files, enforce the limit. Default true.
  bool reconcile_on_open = true;
  // Seconds after which a temp file whose writer process still exists (a
  // reused pid) is treated as abandoned and removed. > 0. Default 3600.
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

  // --- Tests only -------------------------------------------------------
  // Called at each DiskKillPoint on the thread doing the work; crash tests
  // _exit() there. Must not call back into the tier. Default: none.
  std::function<void(DiskKillPoint)> test_kill_hook;

  // OK, or InvalidArgument naming the bad field.
  Status Validate() const;
};

// The write-queue bound used when DiskTierOptions::queue_max_bytes is 0,
// for a machine with `physical_memory_bytes` of RAM.
uint64_t DefaultDiskQueueBytes(uint64_t physical_memory_bytes);

}  // namespace kvtier

#endif  // KVTIER_OPTIONS_H_
