// RemoteTier: blocks shared across hosts through Redis or a Redis Cluster
// (DESIGN.md §7). A block is stored under `<prefix>{<64 hex key>}` (parts
// `:<i>` beyond `part_bytes`), its value the block file byte for byte;
// every value read is verified. A failure of the server is a miss or a
// dropped copy, never an error the engine must handle and never a hang;
// Open() succeeds while the server is down (unless
// require_server_at_open). docs/remote-tier.md describes the calls, the
// failure handling and every option.
//
// Ownership: Open() returns the only owner; the Env must outlive it. A
// SharedBlock returned by Get is the caller's; a block given to Put is held
// until it is written or dropped.
//
// Thread safety: every method from any number of threads at once; nothing
// concurrently with or after the destructor. No lock is held during I/O.
#ifndef KVTIER_REMOTE_TIER_H_
#define KVTIER_REMOTE_TIER_H_

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
#include "kvtier/env.h"
#include "kvtier/latency_histogram.h"
#include "kvtier/layout.h"
#include "kvtier/logger.h"
#include "kvtier/stats_table.h"
#include "kvtier/status.h"

namespace kvtier {

struct RemoteTierOptions {
  // Where the server is (DESIGN.md §7). Required.
  //   redis://[[user]:password@]host[:port][/db]      one server (port 6379
  //                                                    if omitted, db 0)
  //   redis-cluster://[[user]:password@]host:port[,host:port...]
  //                                                    a Redis Cluster, given
  //                                                    by one or more seeds
  // User and password may be percent-encoded (%40 for '@').
  std::string url;

  // The layout of every block this tier serves. Required (must Validate()).
  // Values are checked against it (signature, tensors); its byte size bounds
  // how large a reply may be before it is a protocol error.
  ModelLayout layout;

  // Prepended to every key name: `<prefix>{<hex>}`. One per deployment, so
  // that unrelated deployments sharing a server never see each other's
  // blocks. At most 256 bytes, without '{' or '}' (they would change the
  // Cluster hash tag). Default "kvtier:v1:".
  std::string key_prefix = "kvtier:v1:";

  // Bytes of a block file stored under one name; longer files are split
  // into parts (§7). Other hosts must use the same value to read the parts.
  // At least 4096, at most 512 MiB (Redis's largest string). Default 4 MiB.
  uint64_t part_bytes = uint64_t{4} << 20;

  // Seconds a stored block lives (SET ... EX ttl). 0 = no expiry (the
  // server's maxmemory policy evicts). Default 0.
  uint32_t ttl_seconds = 0;

  // --- Timeouts and failure handling --------------------------------------
  // Milliseconds a TCP connect (plus AUTH/SELECT) may take. > 0.
  // Default 500.
  uint32_t connect_timeout_ms = 500;
  // Milliseconds the server may take to answer one request (or to take
  // one request's bytes), plus 10 ms per MiB the answer carries. After a
  // timeout the connection is dropped and the keys it had not answered are
  // misses (or dropped copies). A whole call (every key of a batch, its
  // connects, retries and backoffs) ends within this too, plus 10 ms per
  // MiB of the whole batch: what is not answered by then is a miss (or a
  // dropped copy), counted in `timeouts`. > 0. Default 2000.
  uint32_t command_timeout_ms = 2000;
  // Milliseconds Exists() — the cache's Match, on an engine's request path —
  // waits for the server, a connect included: an answer later than that is
  // a miss for this call, counted in `exists_late` (and the connection it
  // was on is dropped, a failure toward the breaker). An engine would rather
  // recompute a block than wait for a slow or paused server. > 0.
  // Default 20.
  uint32_t lookup_budget_ms = 20;
  // Bytes per second below which a reply counts as a failed round trip:
  // once a reply's first byte has arrived, its bytes must keep coming at
  // this average rate after a grace of 100 ms, or the call fails as a
  // timeout ("reply trickles at N B/s"), counted in `timeouts`, its
  // connection dropped and a failure toward the node's breaker. A node
  // sending valid replies one byte at a time is then given up like a node
  // that is down, instead of costing a command timeout per call. A reply
  // of B bytes has max(100 ms, B / rate) from its first byte; the default
  // is far under the 100 MiB/s command_timeout_ms already assumes for
  // large values (docs/remote-tier.md, "When things fail"). 0 = off.
  // Default 1 MiB/s.
  uint64_t min_reply_rate = uint64_t{1} << 20;
  // Consecutive failed round trips or connects to one node that open its
  // circuit breaker: calls to that node are immediate misses until the
  // breaker's open time has passed and one probe call succeeds. Round trips
  // answered TRYAGAIN / LOADING / CLUSTERDOWN or with a redirect to the
  // node itself, and values that fail verification, count as failures too.
  // > 0. Default 3.
  uint32_t breaker_failure_threshold = 3;
  // Milliseconds the breaker stays open the first time; doubled after each
  // failed probe up to breaker_max_open_ms. This is also the reconnect
  // backoff. > 0. Default 1000.
  uint32_t breaker_open_ms = 1000;
  // The most milliseconds the breaker stays open. >= breaker_open_ms.
  // Default 30000.
  uint32_t breaker_max_open_ms = 30'000;
  // Fail Open() with Unavailable when no server answers (tools that want a
  // clear error). Off: Open() succeeds with the breaker open. Default false.
  bool require_server_at_open = false;

  // --- Connections and batching --------------------------------------------
  // Connections kept per node; a call that finds all of them busy waits for
  // one (up to its deadline). > 0, at most 64. Default 4.
  uint32_t connections_per_node = 4;
  // Bytes of replies (values) in flight on one connection: more requests
  // are pipelined only while the replies they ask for stay within this
  // bound (two requests are always in flight), so that the server does not
  // buffer a long queue of large replies. Small requests (EXISTS) all go in
  // one round trip. > 0. Default 8 MiB.
  uint64_t pipeline_max_bytes = uint64_t{8} << 20;

  // --- Writes ----------------------------------------------------------------
  // Threads that drain the write queue. > 0, at most 64. Default 2.
  uint32_t writer_threads = 2;
  // Bytes of blocks waiting to be written. A Put() that does not fit is
  // dropped and counted (the local tiers still hold the block). A block
  // larger than the bound is accepted only into an empty queue. > 0.
  // Default 256 MiB.
  uint64_t queue_max_bytes = uint64_t{256} << 20;
  // Before sending a batch, ask which of its blocks the server already has
  // (one pipelined round trip: GETRANGE of each value's head, EXISTS of its
  // other parts) and skip those: hosts sharing a server do not send the
  // same block twice. Default true.
  bool skip_existing = true;
  // Put()/PutSync() check the block's header first (structure, that it
  // names the key it is stored under, the layout signature) and refuse bad
  // blocks with InvalidArgument. The data checksum is not computed.
  // Default true.
  bool verify_puts = true;
  // Milliseconds Close() waits for the queue to drain; what is left then is
  // dropped and counted. 0 = no bound. Default 10000.
  uint64_t close_timeout_ms = 10'000;

  // --- Signed values (DESIGN.md §7) ----------------------------------------
  // Key files of at least 32 random bytes each (read through the Env at
  // Open()). Empty: values are neither signed nor checked. Otherwise the
  // first key signs every stored value (`<prefix>{<hex>}:mac`, in the same
  // transaction as the value) and a value is served only if its `:mac` is
  // signed by one of the keys; any other value is a miss, counted in
  // `mac_failures`, and deleted. Add a new key second on every host, then
  // move it first, then retire the old one: keys rotate without a flag day.
  std::vector<std::string> mac_keys;

  // --- TLS (rediss:// and rediss-cluster:// URLs) ----------------------------
  // TLS 1.2 or later; the server's certificate is always verified (there is
  // no switch that turns that off) and its host name checked: the URL's
  // host, or a Cluster node's announced address (an IP address is matched
  // against the certificate's IP SANs); SNI names the host when it is a
  // name. Files are PEM; read once, by Open(). Unused by redis:// URLs.
  // CA certificates that verify the servers. Empty = the system store.
  std::string tls_ca_file;
  // A client certificate (chain) and its private key, for servers started
  // with `tls-auth-clients`. Both or neither.
  std::string tls_cert_file;
  std::string tls_key_file;
  // The name checked against the certificate (and sent as SNI) instead of
  // each node's host, e.g. when Cluster nodes announce IP addresses but the
  // certificates name a DNS name. Empty = each node's host.
  std::string tls_server_name;

  // --- Events ----------------------------------------------------------------
  // Where the tier reports a node down (its breaker opened), back up, and a
  // full write queue dropping copies (kvtier/logger.h), rate-limited. Not
  // owned; must outlive the tier. A TieredCache sets it to
  // CacheOptions::info_log when null. nullptr = none. Default nullptr.
  Logger* info_log = nullptr;

  // OK, or InvalidArgument naming the bad field (the URL's problem for
  // `url`, "layout.<field>" for the layout).
  Status Validate() const;
};

// The metrics of a RemoteTier, X(name, kind, help) (kvtier/stats_table.h).
// Counters count events since Open().
#define KVTIER_REMOTE_COUNTERS(X)                                                                 \
  /* Reads */                                                                                     \
  X(exists_calls, kCounter, "Exists() calls")                                                     \
  X(exists_keys, kCounter, "keys Exists() calls asked about")                                     \
  X(exists_found, kCounter, "keys Exists() calls found")                                          \
  X(exists_late, kCounter, "keys Exists() gave up on at lookup_budget_ms (a miss for that call)") \
  X(lookups, kCounter, "keys asked of Get/GetMany/GetInto")                                       \
  X(hits, kCounter, "lookups served a verified block")                                            \
  X(misses, kCounter, "lookups that served nothing (any reason)")                                 \
  X(misses_unavailable, kCounter,                                                                 \
    "misses because the node was down, timed out or its breaker open")                            \
  X(bad_values, kCounter, "values that failed verification (bad, partial, foreign, wrong type)")  \
  X(bad_values_deleted, kCounter, "values deleted from the server: bad_values and mac_failures")  \
  X(mac_failures, kCounter, "values not signed by one of mac_keys (deleted too)")                 \
  X(too_small, kCounter, "GetInto() calls whose buffer was too small")                            \
  X(alloc_failures, kCounter, "LoadBuffers() values whose allocator failed")                      \
  X(bytes_read, kCounter, "block bytes served (partial reads: bytes read)")                       \
  /* Writes */                                                                                    \
  X(puts, kCounter, "blocks accepted by Put() (queued)")                                          \
  X(puts_deduplicated, kCounter, "Put() of a key already queued")                                 \
  X(stored, kCounter, "blocks written to the server")                                             \
  X(skipped_existing, kCounter, "blocks not sent: the server had them")                           \
  X(drops_queue_full, kCounter, "copies dropped: queue full")                                     \
  X(drops_unavailable, kCounter, "copies dropped: node down, breaker open, timeout")              \
  X(drops_oom, kCounter, "copies dropped: -OOM from the server")                                  \
  X(drops_error, kCounter, "copies dropped: another error reply, too many redirects")             \
  X(drops_closed, kCounter, "copies dropped by Close()")                                          \
  X(bytes_written, kCounter, "block bytes written")                                               \
  X(erases, kCounter, "blocks Erase() removed")                                                   \
  /* Network */                                                                                   \
  X(connects, kCounter, "connections opened (handshake done)")                                    \
  X(connect_failures, kCounter, "connects or handshakes that failed")                             \
  X(auth_failures, kCounter, "connect failures: the server refused the credentials")              \
  X(tls_failures, kCounter, "connect failures: the TLS handshake or certificate check failed")    \
  X(timeouts, kCounter, "round trips or connects past their deadline")                            \
  X(protocol_errors, kCounter, "replies that broke the protocol or a bound")                      \
  X(io_errors, kCounter, "sockets that failed or closed mid-reply")                               \
  X(error_replies, kCounter, "error replies not handled otherwise")                               \
  X(moved, kCounter, "MOVED redirects followed")                                                  \
  X(asked, kCounter, "ASK redirects followed")                                                    \
  X(retries, kCounter, "TRYAGAIN / CLUSTERDOWN / LOADING backoffs")                               \
  X(redirect_limit, kCounter, "keys given up after 5 redirects")                                  \
  X(topology_refreshes, kCounter, "slot maps loaded (CLUSTER SHARDS / SLOTS)")                    \
  X(topology_failures, kCounter, "refreshes that found no answering node")                        \
  X(breaker_opens, kCounter, "times a node's breaker opened")                                     \
  X(breaker_rejections, kCounter, "node calls refused by an open breaker")                        \
  /* Latency */                                                                                   \
  X(exists_latency, kHistogram, "time of one Exists() call")                                      \
  X(get_latency, kHistogram, "time of one Get/GetMany/GetInto call")                              \
  X(write_latency, kHistogram, "time of one writer batch (EXISTS + SETs)")
// Gauges: the state at the time of the call.
#define KVTIER_REMOTE_GAUGES(X)                             \
  X(queue_bytes, kGauge, "bytes queued or being written")   \
  X(queue_blocks, kGauge, "blocks queued or being written") \
  X(nodes, kGauge, "nodes known (1 for one server)")        \
  X(nodes_down, kGauge, "nodes whose breaker is open now")  \
  X(connections, kGauge, "connections open now")
#define KVTIER_REMOTE_STATS(X) KVTIER_REMOTE_COUNTERS(X) KVTIER_REMOTE_GAUGES(X)

// A snapshot of a RemoteTier: KVTIER_REMOTE_STATS as fields.
struct RemoteTierStats {
  KVTIER_REMOTE_STATS(KVTIER_STATS_FIELD)

  // Each entry of KVTIER_REMOTE_STATS with its value.
  KVTIER_STATS_FOR_EACH(KVTIER_REMOTE_STATS)

  // One JSON object: every field above, histograms as
  // {"count","sum_us","max_us","p50_us","p99_us","buckets":[...]}.
  std::string ToJson() const;
  // Prometheus text exposition: `<prefix>_<name>`, counters end in
  // `_total`, latencies as `<prefix>_*_latency_seconds` histograms; each
  // family opens with `# HELP` (its help in the table) and `# TYPE`.
  std::string ToPrometheus(std::string_view prefix = "kvtier_remote") const;
};

class RemoteTier {
 public:
  // Parses the URL, validates the options and connects (one connection per
  // server; the Cluster's slot map from its seeds). InvalidArgument for bad
  // options and for a server that refuses AUTH or SELECT (the message says
  // which server and why, never the password); Unavailable when no server
  // answers and `require_server_at_open`. REQUIRES: env outlives the tier.
  static Result<std::unique_ptr<RemoteTier>> Open(const RemoteTierOptions& options, Env* env);

  virtual ~RemoteTier() = default;
  RemoteTier(const RemoteTier&) = delete;
  RemoteTier& operator=(const RemoteTier&) = delete;

  // For each key, whether the server has every part of its block (the part
  // count a block of this layout needs). One pipelined round trip per node.
  // A key whose node is down or did not answer is reported absent. A later
  // Get() may still miss (evicted, bad value).
  virtual std::vector<bool> Exists(std::span<const BlockKey> keys) = 0;

  // Reads and verifies `key`'s block. nullptr on a miss (absent, node down,
  // timeout, bad value — the last is deleted from the server).
  virtual SharedBlock Get(const BlockKey& key) = 0;
  // Get() of each key, pipelined per node; result[i] is keys[i]'s block or
  // nullptr.
  virtual std::vector<SharedBlock> GetMany(std::span<const BlockKey> keys) = 0;
  // Supplies the buffer a value is read into (exact size: known from the
  // reply before any of its bytes are read), e.g. a recycled, already
  // page-faulted buffer. Called on the caller's thread.
  using BufferAllocator = std::function<Result<BlockBuffer>(size_t bytes)>;
  // Called once per key, in key order, after the batch: the verified block,
  // nullopt on a miss, or the allocator's error for that key alone.
  using LoadedBufferCallback =
      std::function<void(size_t index, Result<std::optional<BlockBuffer>> result)>;
  // GetMany() into buffers from `alloc` (the shape of DiskTier::LoadBuffers,
  // so that a cache can treat both lower tiers alike). A buffer `done` does
  // not receive is destroyed before `done` is called. `alloc` and `done`
  // must not call back into the tier. Returns after every callback.
  virtual void LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                           const LoadedBufferCallback& done) = 0;
  // LoadBuffers() reading only the tensors masks[i] selects of keys[i]
  // (block_file.h TensorMask; masks shorter than keys, or an empty mask,
  // mean whole blocks), the Redis side of DiskTier::LoadTensorBuffers: a
  // GETRANGE of part 0's head for the header (a second one when the header
  // is longer than that head), then a GETRANGE of each selected range on
  // the part(s) holding it, each round pipelined per node. The buffer is
  // the whole file's size with the header and the selected tensors'
  // bytes verified (meta_checksum, each one's tensor_checksums entry) and
  // the rest unspecified; a value that fails (bad header, a checksum, a
  // short or missing part) is a miss, counted in bad_values, and deleted,
  // as a whole read's. Values without tensor_checksums, and every value of
  // a tier with mac_keys (the tag covers the whole file, so a part of it
  // cannot be checked), are read and verified whole. `bytes_read` counts
  // the bytes the server sent. An InvalidArgument result for a mask whose
  // size is not the block's tensor count. Callbacks once per key, in key
  // order, after the batch.
  virtual void LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                                 const BufferAllocator& alloc,
                                 const LoadedBufferCallback& done) = 0;
  // Reads `key`'s block into the front of `dst` and verifies it there.
  // Returns its size, or nullopt on a miss (dst's contents then
  // unspecified). InvalidArgument if `dst` is smaller than the block (the
  // message names both sizes).
  virtual Result<std::optional<size_t>> GetInto(const BlockKey& key, std::span<std::byte> dst) = 0;

  // Queues `block` (the block file of `key`) for the writer threads and
  // returns at once. OK when queued (or already queued: counted as
  // deduplicated); ResourceExhausted when the queue is full and Unavailable
  // when the key's node is down (both: the copy is dropped and counted);
  // InvalidArgument for a bad header (verify_puts); FailedPrecondition after
  // Close(). A queued block may still be dropped later (timeout, -OOM):
  // Stats() counts it.
  virtual Status Put(const BlockKey& key, SharedBlock block) = 0;
  // Writes `block` under `key` on the caller's thread and waits for the
  // server's answer (for tools). OK when stored; Unavailable (down, timeout),
  // ResourceExhausted (-OOM) or another error otherwise. Always sends,
  // whatever skip_existing says.
  virtual Status PutSync(const BlockKey& key, std::span<const std::byte> block) = 0;

  // Deletes every part of `key`'s block. True if anything was deleted;
  // Unavailable when the node is down or did not answer.
  virtual Result<bool> Erase(const BlockKey& key) = 0;
  // Deletes every block of this tier's layout under the prefix, whoever
  // stored it: SCAN <prefix>{*} on every master (each Cluster node serving
  // a slot), then per value a GETRANGE of its header, and DEL of every
  // part (and its `:mac` name) where the header's key and layout signature
  // are this layout's; values of other layouts are kept. Returns how many
  // blocks were deleted. Unavailable when a master cannot be scanned or a
  // request got no answer (blocks not yet deleted then stay). Needs SCAN,
  // GETRANGE and DEL in the server's ACL.
  virtual Result<uint64_t> EraseLayout() = 0;

  // Waits until every block queued before the call is written or dropped.
  virtual Status Flush() = 0;

  virtual RemoteTierStats Stats() = 0;

  // Stops accepting puts, waits up to close_timeout_ms for the queue to
  // drain (the rest is dropped and counted), stops the writers and closes
  // every connection. Idempotent. Afterwards reads miss, Put() returns
  // FailedPrecondition and Stats() still works.
  virtual Status Close() = 0;

 protected:
  RemoteTier() = default;
};

}  // namespace kvtier

#endif  // KVTIER_REMOTE_TIER_H_
