// TieredCache: one object over kvtier's tiers (host RAM, optional disk,
// optional remote Redis) that an engine opens once and asks for blocks by
// key: Match, LoadShared/Load, Preload, Store, Contains/Erase/Clear,
// Flush/Close, Stats. How a block moves between the tiers, loads and
// promotion, the Match index and the remote tier: docs/tiers.md
// (DESIGN.md §1, §7).
//
// Ownership: Open() returns the only owner; the Env must outlive it. A
// LoadFuture may outlive the cache; a Load's buffers, and whatever a
// LoadShared callback uses, must stay valid until its future is ready or
// destroyed. A SharedBlock handed out may be kept (outside the budget).
//
// Thread safety: any method from any number of threads at once; no file
// I/O, SQLite call or callback runs under a lock of the cache. Close() (or
// the destructor) waits for calls in progress; later calls return
// FailedPrecondition (Match: an empty match), except Stats().
#ifndef KVTIER_TIERED_CACHE_H_
#define KVTIER_TIERED_CACHE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/host_tier.h"
#include "kvtier/layout.h"
#include "kvtier/logger.h"
#include "kvtier/remote_tier.h"
#include "kvtier/server_client.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"

namespace kvtier {

namespace cache_internal {
class CacheCore;
class ServedCache;
struct LoadState;
struct LoadFutureAccess;  // the cache's tests: see what a future shares with its load
}  // namespace cache_internal

// How Store() sends a block towards the disk tier.
enum class WritePolicy : uint8_t {
  // A dirty host entry; the disk tier gets it when the host budget evicts
  // it, on Flush() or on Close(). Fastest; a crash loses dirty entries.
  kWriteBack,
  // Queued to the disk tier at once, plus a clean host copy. Needs a disk
  // tier.
  kWriteThrough,
};

// Whether Store() also sends blocks to the remote tier.
enum class RemoteWritePolicy : uint8_t {
  // Every block Store() accepts is queued for the remote tier at once
  // (RemoteTier::Put: byte-bounded queue, never a wait), whatever the local
  // write policy: a write-back block is in Redis before it reaches the
  // disk tier, so evicting it later sends nothing more.
  kEveryStore,
  // Nothing is written: this cache only reads what other hosts stored.
  kReadOnly,
};

// Where a block was found or served from.
enum class CacheTier : uint8_t { kNone = 0, kHost = 1, kDisk = 2, kRemote = 3 };

// "none", "host", "disk", "remote".
std::string_view CacheTierName(CacheTier tier);

struct CacheOptions {
  // --- Host tier ----------------------------------------------------------
  // The RAM tier: `host.capacity_bytes` (default 1 GiB) or
  // `host.shared_budget` (one budget and global LRU order for several
  // caches). `host.eviction_sink` and `host.key_listener` must be empty: the
  // cache wires them (to the disk tier and to its Match index).
  HostTierOptions host;

  // --- Disk tier ----------------------------------------------------------
  // The disk tier's options, or nullopt for a host-only (hot-only) cache, in
  // which dirty entries the budget evicts are dropped and counted. An empty
  // `disk->layout_signature` is filled from `layout_signature` below; a
  // non-empty one must equal it. Default: nullopt.
  std::optional<DiskTierOptions> disk;

  // --- Remote tier --------------------------------------------------------
  // The Redis / Redis Cluster tier below disk (DESIGN.md §7), opened and
  // closed by the cache, or nullopt for none. `remote->layout` is required
  // and its Signature() must equal `layout_signature`. A server that does
  // not answer at open is not an error (lookups are misses, counted)
  // unless `remote->require_server_at_open`. Default: nullopt.
  std::optional<RemoteTierOptions> remote;
  // What Store() sends to the remote tier. Default kEveryStore.
  RemoteWritePolicy remote_write = RemoteWritePolicy::kEveryStore;
  // Match() asks the remote tier (RemoteTier::Exists: one pipelined round
  // trip per node) about the leading keys no local tier holds. It
  // remembers nothing: each Match asks again. Off: Match reports local
  // blocks only (Load still reads remote blocks). Default true.
  bool match_asks_remote = true;

  // --- Server -------------------------------------------------------------
  // "unix:PATH": this cache is a client of the host's `kvtier serve`
  // (kvtier/server_client.h, docs/server.md) instead of opening tiers of
  // its own: `host`, `disk` and `remote` are the daemon's and are not used
  // (disk and remote must be unset). Hits come from the daemon's arena
  // (reported as kHost) after it promoted them from its disk or remote
  // tier; a daemon that is down makes loads and matches misses and stores
  // Unavailable; Clear and Preload are FailedPrecondition; Flush is the
  // daemon's (it writes back on eviction and at SIGTERM). Default: empty.
  std::string server;
  // With `server`: how long one call waits for the daemon (connect
  // included) before it counts as down; milliseconds, > 0. Default 1000.
  uint64_t server_timeout_ms = 1000;

  // --- Blocks -------------------------------------------------------------
  // The layout signature (ModelLayout::Signature()) of every block this
  // cache holds. Required.
  std::string layout_signature;
  // Store() checks each block's header first (structure, that its key is
  // the key it is stored under, its signature) and refuses bad blocks with
  // InvalidArgument. Default true.
  bool verify_stores = true;
  // With verify_stores, Store() also computes the data section's checksum
  // (one pass over the block) and refuses a block whose bytes do not match
  // it: no tier then ever hands out a block that fails its own checksum
  // (a host hit is served without one). Default true.
  bool verify_store_checksums = true;

  // --- Policy -------------------------------------------------------------
  // Store()'s policy when StoreOptions does not name one. kWriteThrough
  // needs `disk`. Default kWriteBack.
  WritePolicy write_policy = WritePolicy::kWriteBack;
  // Load() keeps a clean host copy of each block it reads from disk, paid
  // for with host budget reserved before the read; when no budget can be
  // reserved the block is still loaded, just not promoted (counted).
  // Default true.
  bool promote_disk_hits = true;
  // The same for blocks read from the remote tier. Default true.
  bool promote_remote_hits = true;
  // Match() asks the disk tier (DiskTier::Contains: one index lookup, no
  // file read) about a key its in-memory index has no answer for, and
  // remembers a yes. Off: Match only knows disk blocks this cache stored or
  // loaded. Default true.
  bool match_asks_disk = true;
  // Threads that run the disk part of loads (the disk tier reads a batch
  // in parallel on its own read threads, DiskTierOptions::read_threads) and
  // hand out LoadShared()'s host hits of 32 MiB or more, 64 KiB a block on
  // average (so the consumer's copies run on this many threads). 0 = every
  // load runs on the caller's thread and returns a ready future. At most
  // 64. Default 2.
  uint32_t load_threads = 2;
  // Bytes of free read buffers the cache keeps for the next disk reads,
  // already faulted in, instead of returning them to the OS. A buffer that
  // became a host entry comes back when the entry is evicted and dropped.
  // 0 = none kept (every read gets fresh memory). Default 256 MiB.
  uint64_t read_buffer_pool_bytes = uint64_t{256} << 20;
  // Blocks the Match index is sized for up front (0 = grow on demand), at
  // most 2^32. At most 2^20 are reserved at open (about 80 MB); the index
  // grows past that on demand. Default 0.
  uint64_t index_expected_blocks = 0;
  // Milliseconds Close() may spend handing dirty entries to the disk tier
  // (after that, the rest are dropped, counted, and Close() returns
  // Unavailable). The disk tier then finishes the writes it accepted. The
  // remote tier's queue then drains within its own
  // RemoteTierOptions::close_timeout_ms (the rest is dropped, counted in
  // CacheStats::remote->drops_closed).
  // 0 = no bound. Default 60000.
  uint64_t close_timeout_ms = 60'000;

  // --- Events -------------------------------------------------------------
  // Where the tiers report what an operator must see (DESIGN.md §7: a Redis
  // node down and back up, copies dropped, disk pressure, ENOSPC,
  // quarantine, inline writes, failed writes; kvtier/logger.h),
  // rate-limited. Handed to `disk->info_log` and `remote->info_log` where
  // those are null. Not owned; must outlive the cache. nullptr = none.
  // Default nullptr.
  Logger* info_log = nullptr;

  // OK, or InvalidArgument whose message starts with the bad field's name
  // (disk fields as "disk.<field>", remote ones as "remote.<field>").
  Status Validate() const;
};

// Per-call options of Store().
struct StoreOptions {
  // Overrides CacheOptions::write_policy for this call. Default: none.
  std::optional<WritePolicy> write_policy;
};

// What Match() found.
struct MatchResult {
  // Leading blocks of the chain that are available.
  size_t blocks = 0;
  // The fastest tier holding each of them (tiers.size() == blocks).
  std::vector<CacheTier> tiers;
  size_t host_blocks = 0;    // of `blocks`, those in the host tier
  size_t disk_blocks = 0;    // ... and those only on disk
  size_t remote_blocks = 0;  // ... and those only in the remote tier
};

// The outcome of one key of a Load() or LoadShared().
struct LoadedBlock {
  CacheTier tier = CacheTier::kNone;  // kNone = a miss
  // The block file's size: Load wrote this many bytes to the front of its
  // buffer.
  uint64_t bytes = 0;
  // LoadShared only: the verified block file (null on a miss). A host hit
  // is the host entry's own buffer; a disk or remote hit is the buffer it
  // was read into (and, when promoted, the new host entry's).
  SharedBlock block;
};

// Receives block `index` (a position in the keys of a LoadShared call).
using LoadedBlockCallback = std::function<void(size_t index, const LoadedBlock& block)>;

// Per-call options of LoadShared().
struct SharedLoadOptions {
  // Called exactly once per key, as its block lands (a miss: tier kNone,
  // block null), from the calling thread before LoadShared returns or from
  // a load or disk read thread, possibly several at once for different
  // keys, in no particular order. The future is ready only after every
  // call has returned. It must not call Close() or destroy the cache.
  // Set: LoadFuture::Get() reports tier and bytes, not the blocks, so a
  // buffer nobody else keeps goes back to the read buffer pool as soon as
  // the callback returns. Empty: Get() holds every block. Default: empty.
  LoadedBlockCallback on_block;
  // A size query (the C API's kvtier_cache_load with dst = NULL): the keys
  // are not counted in lookups, hits or misses, since the caller loads the
  // block it asked about next and that load is the one that counts.
  bool uncounted = false;
  // Per key, which tensors of its block the caller needs (block_file.h
  // TensorMask); empty (or shorter than the keys) = whole blocks. A key
  // with a mask selecting a subset is read partially where a tier can: the
  // disk tier preads the header and the selected tensors only, verifying
  // each against tensor_checksums (DiskTier::LoadTensorBuffers); the host
  // tier hands out the block it holds (whole, verified when stored). Such a
  // block is the whole file's size with only the header and the selected
  // tensors' bytes valid, so it is never promoted into the host tier (a
  // whole remote read still is).
  std::vector<TensorMask> tensor_masks;
};

// The metrics of one cache, X(name, kind, help) (kvtier/stats_table.h), in
// parts by where they come from. Counters count events since Open().
// What the cache counts itself:
#define KVTIER_CACHE_COUNTERS(X)                                                                \
  /* Lookups (Load), per key */                                                                 \
  X(lookups, kCounter, "keys asked of Load")                                                    \
  X(hits_host, kCounter, "blocks served from the host tier")                                    \
  X(hits_disk, kCounter, "blocks served from the disk tier")                                    \
  X(hits_remote, kCounter, "blocks served from the remote tier")                                \
  X(misses, kCounter, "keys no tier served")                                                    \
  X(load_errors, kCounter, "keys whose destination was too small")                              \
  X(loads_cancelled, kCounter, "Loads cancelled before their disk reads")                       \
  /* Match */                                                                                   \
  X(matches, kCounter, "Match() calls")                                                         \
  X(match_blocks, kCounter, "blocks Match() calls reported available")                          \
  X(match_disk_probes, kCounter, "index misses checked with the disk tier")                     \
  X(stale_disk_hints, kCounter, "disk hints found wrong (a read missed, a write failed)")       \
  X(match_remote_probes, kCounter, "keys Match asked the remote tier about")                    \
  X(match_remote_found, kCounter,                                                               \
    "keys Match asked the remote tier about that it reported present")                          \
  /* Remote reads (Load, LoadShared) */                                                         \
  X(remote_lookups, kCounter, "keys no local tier served, asked of the remote tier")            \
  X(remote_misses, kCounter,                                                                    \
    "keys asked of the remote tier that it did not serve (absent, down, bad value)")            \
  /* Stores */                                                                                  \
  X(stores, kCounter, "blocks accepted by Store()")                                             \
  X(store_errors, kCounter, "blocks Store() refused")                                           \
  X(store_bypasses, kCounter, "write-back blocks the host budget could not take: sent to disk") \
  /* Drops after queueing: RemoteTierStats::drops_* */                                          \
  X(remote_puts_queued, kCounter, "stored blocks queued for the remote tier")                   \
  X(remote_puts_dropped, kCounter,                                                              \
    "stored blocks the remote tier refused at once (queue full, node down)")                    \
  /* Bytes each way */                                                                          \
  X(bytes_stored, kCounter, "bytes given to Store()")                                           \
  X(bytes_loaded_host, kCounter, "bytes of host hits handed to callers (copied or shared)")     \
  X(bytes_loaded_disk, kCounter, "bytes of disk hits handed to callers (copied or shared)")     \
  X(bytes_loaded_remote, kCounter, "bytes of remote hits handed to callers (copied or shared)") \
  X(bytes_written_back, kCounter, "dirty bytes handed to the disk tier")                        \
  X(bytes_written_through, kCounter, "write-through bytes handed to the disk tier")             \
  X(bytes_promoted, kCounter, "disk/remote bytes that became host entries (not copied)")        \
  /* Movement between tiers */                                                                  \
  X(write_backs, kCounter, "dirty blocks handed to the disk tier (eviction, Flush, Close)")     \
  X(write_back_errors, kCounter, "write-backs the disk tier refused")                           \
  X(promotions, kCounter, "disk/remote hits (Load, Preload) now in the host tier")              \
  X(promotion_failures, kCounter, "disk/remote hits not promoted (no budget, Put refused)")     \
  X(remote_promotions, kCounter, "promotions of remote hits (counted in promotions too)")       \
  X(reservation_failures, kCounter, "host budget reservations refused")                         \
  X(preloads, kCounter, "blocks Preload() brought into RAM")                                    \
  X(close_dropped, kCounter, "dirty blocks Close() could not hand down in time")                \
  /* Latency, µs */                                                                            \
  X(load_latency, kHistogram, "time from a Load() call until its future is ready")              \
  X(store_latency, kHistogram, "time of one Store() call")
// The Match index, at the time of the call:
#define KVTIER_CACHE_INDEX_GAUGES(X)                                                 \
  X(index_keys, kGauge, "keys any tier holds, in the Match index")                   \
  X(index_host_keys, kGauge, "keys the host tier holds, in the Match index")         \
  X(index_disk_keys, kGauge, "keys the disk tier holds, in the Match index (hints)") \
  X(index_bytes, kGauge, "bytes of memory the Match index's table takes")
// Read buffers (CacheOptions::read_buffer_pool_bytes):
#define KVTIER_CACHE_READ_BUFFER_STATS(X)                                                \
  X(read_buffers, kCounter, "read buffers disk reads were given")                        \
  X(read_buffers_reused, kCounter, "read buffers that were recycled (no page faults)")   \
  X(read_buffer_fresh_bytes, kCounter, "bytes of new memory allocated for read buffers") \
  X(read_buffers_prefaulted, kCounter, "read buffers added by PrefaultReadBuffers")      \
  X(read_buffer_free_bytes, kGauge, "bytes of read buffers kept for the next reads")
#define KVTIER_CACHE_STATS(X)       \
  KVTIER_CACHE_COUNTERS(X)          \
  KVTIER_CACHE_INDEX_GAUGES(X)      \
  KVTIER_CACHE_READ_BUFFER_STATS(X) \
  X(hit_ratio, kRatio, "(hits_host + hits_disk + hits_remote) / lookups; 0 with no lookups")

// A snapshot of one cache: KVTIER_CACHE_STATS as fields, and each tier's
// own stats.
struct CacheStats {
  KVTIER_CACHE_STATS(KVTIER_STATS_FIELD)
  // Per tier.
  HostTierStats host;
  HostBudgetStats host_budget;
  std::optional<DiskTierStats> disk;      // nullopt in a host-only cache
  std::optional<RemoteTierStats> remote;  // nullopt without a remote tier

  // Each entry of KVTIER_CACHE_STATS with its value (not the tiers').
  KVTIER_STATS_FOR_EACH(KVTIER_CACHE_STATS)

  // One JSON object: the fields above, "host", "host_budget", "disk" and
  // "remote" (null when absent) as nested objects, histograms as
  // {"count","sum_us","max_us","p50_us","p99_us","buckets":[...]}.
  std::string ToJson() const;
  // Prometheus text exposition: kvtier_cache_*, kvtier_host_*, kvtier_disk_*,
  // kvtier_remote_*, each family opening with `# HELP` (its help in the
  // table) and `# TYPE`.
  std::string ToPrometheus() const;
};

// The pending result of a Load() or LoadShared(). Move-only. Destroying (or
// reassigning) a future that is not ready cancels the reads not started yet
// (their keys report kNone), waits for the reads and callbacks in flight
// (they write into the caller's buffers or run its callback) and releases
// the host budget they reserved; nothing is promoted then.
class LoadFuture {
 public:
  LoadFuture() = default;
  LoadFuture(LoadFuture&& other) noexcept;
  LoadFuture& operator=(LoadFuture&& other) noexcept;
  LoadFuture(const LoadFuture&) = delete;
  LoadFuture& operator=(const LoadFuture&) = delete;
  ~LoadFuture();

  // False for a default-constructed or moved-from future.
  bool valid() const { return state_ != nullptr; }
  // True once Get() would not block. REQUIRES: valid().
  bool Ready() const;
  // Waits, then returns each key's outcome in order. InvalidArgument if a
  // destination was smaller than its block (the message names the first
  // such key's position; the others were still loaded); Unavailable if the
  // cache closed before the load ran. May be called again.
  // REQUIRES: valid().
  Result<std::vector<LoadedBlock>> Get() const;
  // Asks the load to skip the reads it has not started (their keys report
  // kNone) and not to promote; returns at once.
  void Cancel();

 private:
  friend class cache_internal::CacheCore;
  friend class cache_internal::ServedCache;
  friend struct cache_internal::LoadFutureAccess;
  explicit LoadFuture(std::shared_ptr<cache_internal::LoadState> state);
  void Reset();
  std::shared_ptr<cache_internal::LoadState> state_;
};

// The facade. See the file comment.
class TieredCache {
 public:
  // Opens the tiers (creating the disk folder if needed). InvalidArgument
  // naming the bad option; the disk and remote tiers' errors otherwise
  // (a remote server that does not answer is not one, see
  // CacheOptions::remote).
  // REQUIRES: env != nullptr, outliving the cache.
  static Result<std::unique_ptr<TieredCache>> Open(CacheOptions options, Env* env);

  TieredCache(const TieredCache&) = delete;
  TieredCache& operator=(const TieredCache&) = delete;
  // Close(), ignoring its status.
  ~TieredCache();

  // How many leading blocks of `chain` some tier holds, and which. No data
  // I/O: the in-memory index, plus DiskTier::Contains for keys it does not
  // know (CacheOptions::match_asks_disk), then one RemoteTier::Exists call
  // for the leading keys still missing (CacheOptions::match_asks_remote).
  MatchResult Match(std::span<const BlockKey> chain) const;

  // Hands back block keys[i] for each i, from the host tier or else the
  // disk tier or else the remote tier, verified, without copying it (see the file comment and
  // SharedLoadOptions). Each LoadedBlock's `block` holds the bytes; with
  // options.on_block set, each goes to the callback as it lands instead.
  // FailedPrecondition after Close (then no callback runs).
  Result<LoadFuture> LoadShared(std::span<const BlockKey> keys, SharedLoadOptions options = {});

  // The fastest tier that holds `key`, asked in turn without reading any
  // data: HostTier::Contains, DiskTier::Contains (one index lookup; blocks
  // another process stored in a shared folder included), then
  // RemoteTier::Exists (one round trip; a node that is down answers no).
  // kNone on a miss and after Close.
  CacheTier Contains(const BlockKey& key) const;

  // Removes `key`'s block from every tier: the host entry (a dirty one is
  // dropped, not written down), the disk file and row (a pending write is
  // cancelled), the remote value's parts under RemoteTierOptions::prefix,
  // and the Match index's bits. True if any tier held it. Every tier is
  // asked even when one fails; the first failure is returned (Unavailable:
  // a remote node did not answer). FailedPrecondition after Close.
  Result<bool> Erase(const BlockKey& key);

  // Erases every block of this cache's layout signature: every host entry
  // of this cache, every disk block of the signature (after the pending
  // writes land, so none is written afterwards), and, in the remote tier,
  // every key either local tier held and then every other value under the
  // prefix whose header carries this signature (RemoteTier::EraseLayout:
  // SCAN of every master, so blocks other hosts stored go too). Blocks of
  // other signatures in the same folder or Redis prefix are kept, and so
  // are other caches' host entries on a shared budget. Returns the number
  // of distinct keys erased; the first failure as Erase. FailedPrecondition
  // after Close.
  Result<uint64_t> Clear();

  // Tells the Match index that the disk tier holds `keys` without asking
  // it: keys another process stored in a shared folder, or a list an
  // engine kept from an earlier run, so that Match answers from memory
  // from the first request on. A wrong hint costs one disk miss on Load,
  // which clears it (CacheStats::stale_disk_hints). Nothing happens in a
  // host-only cache or after Close.
  void HintDiskKeys(std::span<const BlockKey> keys);

  // Copies block keys[i] into the front of dsts[i], from the host tier or
  // else the disk tier or else the remote tier. Host hits are copied before
  // Load returns; disk and remote reads run on the load threads. InvalidArgument if the spans
  // differ in length; FailedPrecondition after Close. REQUIRES: the buffers stay valid and
  // untouched until the future is ready or destroyed.
  Result<LoadFuture> Load(std::span<const BlockKey> keys,
                          std::span<const std::span<std::byte>> dsts);

  // Allocates up to `count` read buffers for block files of `layout` and
  // faults them in now, so that the first disk restores after a start pay
  // no page faults: what an engine does at startup, as it sizes its KV
  // memory (PoolOptions::prefault_slots). The buffers wait in the read
  // buffer pool, which keeps at most read_buffer_pool_bytes. Returns how
  // many were added. InvalidArgument if the layout is invalid or its
  // signature is not the cache's; ResourceExhausted when memory runs out,
  // or up front, before any buffer, when the buffers would need more than
  // the kernel's MemAvailable (/proc/meminfo, read through the Env);
  // FailedPrecondition after Close.
  Result<uint64_t> PrefaultReadBuffers(const ModelLayout& layout, uint64_t count);

  // Reads the keys that are on disk but not in RAM into the host tier
  // (clean), in order, stopping before the first block that would not fit
  // in the budget's free bytes: it never evicts to make room. Returns the
  // number of blocks brought in. FailedPrecondition after Close.
  Result<size_t> Preload(std::span<const BlockKey> keys);

  // Stores block files (DESIGN.md §4) under their keys, as `options` or
  // CacheOptions::write_policy says. Stops at the first block refused:
  // InvalidArgument (spans of different lengths, a null block, a bad header
  // with verify_stores or bad data with verify_store_checksums, kWriteThrough
  // without a disk tier), or the tier's
  // error. The message names the block's position. Each accepted block is
  // then queued for the remote tier (CacheOptions::remote_write); a copy it
  // drops is counted, never an error.
  Status Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks,
               const StoreOptions& options = {});

  // Hands every dirty host entry to the disk tier (they become clean) and
  // waits until the disk tier has written what it accepted. OK in a
  // host-only cache (nothing to do).
  Status Flush();

  // Evicts this cache's host entries in LRU order until it holds at most
  // `target_bytes`, skipping `protected_keys`; dirty ones go to disk.
  // Returns the bytes evicted. (For every cache on a shared budget, use
  // SharedHostBudget::ShrinkTo.)
  uint64_t ShrinkHost(uint64_t target_bytes, std::span<const BlockKey> protected_keys = {});

  // Stops accepting calls, waits for calls in progress and cancels loads
  // not started, hands every dirty entry to the disk tier within
  // close_timeout_ms, releases this cache's share of the host budget and
  // closes the disk tier (which writes everything queued), then gives the
  // remote tier's queue what is left of close_timeout_ms and closes it.
  // Idempotent.
  Status Close();

  CacheStats Stats() const;
  // Stats().ToPrometheus(): the same counters as Prometheus text.
  std::string Prometheus() const;
  // The host budget this cache draws from (null with CacheOptions::server).
  std::shared_ptr<SharedHostBudget> host_budget() const;

 private:
  explicit TieredCache(std::unique_ptr<cache_internal::CacheCore> core);
  explicit TieredCache(std::unique_ptr<cache_internal::ServedCache> served);
  // Exactly one is set: the in-process tiers, or the daemon's client.
  std::unique_ptr<cache_internal::CacheCore> core_;
  std::unique_ptr<cache_internal::ServedCache> served_;
};

}  // namespace kvtier

#endif  // KVTIER_TIERED_CACHE_H_
