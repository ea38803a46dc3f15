#include "bindings/option_table.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/json_strict.h"
#include "kvtier/env.h"

namespace kvtier::bindings {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxQuotedChars = 60;
// A config file larger than this is not a config file.
constexpr uint64_t kMaxConfigBytes = 1 << 20;
constexpr uint64_t kU32 = std::numeric_limits<uint32_t>::max();
constexpr uint64_t kU64 = std::numeric_limits<uint64_t>::max();
constexpr uint64_t kI64 = std::numeric_limits<int64_t>::max();
constexpr uint64_t kUs = 1;
constexpr uint64_t kMs = 1000;
constexpr uint64_t kSec = 1000 * 1000;

enum class Kind {
  kSize,
  kDuration,
  kCount,
  kBool,
  kString,
  kOptString,
  kEnum,
  kFraction,
  kMode,
  kPathList,  // one path (a string) or a list of them
  kAddress,   // "HOST:PORT", or a port (a string or an integer); null = none
};

// A parsed value: `u` for sizes (bytes), durations (in the row's unit),
// counts, enums (the choice's index) and modes; `b`, `s`, `d` otherwise.
struct Value {
  uint64_t u = 0;
  bool b = false;
  std::string s;
  std::optional<std::string> opt;
  double d = 0;
  std::vector<std::string> list;
};

using Setter = std::function<void(CacheSpec&, const Value&)>;

struct Row {
  const char* name;
  Kind kind;
  const char* default_text;
  const char* doc;
  const char* field;  // path in CacheSpec, as CacheOptions::Validate() names it
  Setter set;
  uint64_t max = kU64;                 // sizes, counts, durations (in `unit`)
  uint64_t unit = kMs;                 // durations: microseconds per field unit
  std::vector<const char*> choices{};  // enums
};

#define KVTIER_SET(expr) [](CacheSpec& s, const Value& v) { expr; }

const std::vector<Row>& Table() {
  static const std::vector<Row>* rows = new std::vector<Row>{
      // --- Layout and cache -------------------------------------------------
      {"layout", Kind::kString, "(required)",
       "A layout preset (`tiny`, `qwen2.5-0.5b`, `llama3-8b`, `gpt-oss-20b`, `qwen3-next-80b`, "
       "`llama3-8b-q4`) or a layout JSON file (docs/layouts.md).",
       "layout", KVTIER_SET(s.layout = v.s)},
      {"block_tokens", Kind::kCount, "the layout's", "Tokens per block; 0 keeps the layout's own.",
       "block_tokens", KVTIER_SET(s.block_tokens = static_cast<uint32_t>(v.u)), kU32},
      {"write_policy",
       Kind::kEnum,
       "write_back",
       "`write_back`: a store is a dirty RAM entry, written to disk when evicted, on flush or "
       "close; `write_through`: queued to the disk tier at once (needs `disk_dir`). What each "
       "can lose to a crash: docs/tiers.md.",
       "write_policy",
       KVTIER_SET(s.cache.write_policy =
                      v.u == 0 ? WritePolicy::kWriteBack : WritePolicy::kWriteThrough),
       kU64,
       kMs,
       {"write_back", "write_through"}},
      {"remote_write",
       Kind::kEnum,
       "every_store",
       "`every_store`: every stored block is queued for the remote tier; `read_only`: this "
       "cache only reads what other hosts stored.",
       "remote_write",
       KVTIER_SET(s.cache.remote_write =
                      v.u == 0 ? RemoteWritePolicy::kEveryStore : RemoteWritePolicy::kReadOnly),
       kU64,
       kMs,
       {"every_store", "read_only"}},
      {"verify_stores", Kind::kBool, "true",
       "A store checks the block's header (structure, key, layout signature) first.",
       "verify_stores", KVTIER_SET(s.cache.verify_stores = v.b)},
      {"verify_store_checksums", Kind::kBool, "true",
       "With verify_stores, a store also checks the block's data checksum (one pass over it), so "
       "no tier ever serves a block that fails its own checksum.",
       "verify_store_checksums", KVTIER_SET(s.cache.verify_store_checksums = v.b)},
      {"promote_disk_hits", Kind::kBool, "true",
       "A load from disk keeps a clean RAM copy (when RAM budget can be reserved).",
       "promote_disk_hits", KVTIER_SET(s.cache.promote_disk_hits = v.b)},
      {"promote_remote_hits", Kind::kBool, "true", "The same for loads from the remote tier.",
       "promote_remote_hits", KVTIER_SET(s.cache.promote_remote_hits = v.b)},
      {"match_asks_disk", Kind::kBool, "true",
       "match() asks the disk index about keys this process has not seen (no file read).",
       "match_asks_disk", KVTIER_SET(s.cache.match_asks_disk = v.b)},
      {"match_asks_remote", Kind::kBool, "true",
       "match() asks the remote tier (one pipelined round trip: GETRANGE of each value's head, "
       "EXISTS of its other parts) about keys no local tier holds.",
       "match_asks_remote", KVTIER_SET(s.cache.match_asks_remote = v.b)},
      {"load_threads", Kind::kCount, "2",
       "Threads that run the disk part of loads; 0 = on the caller's thread. At most 64.",
       "load_threads", KVTIER_SET(s.cache.load_threads = static_cast<uint32_t>(v.u)), 64},
      {"read_buffer_pool_bytes", Kind::kSize, "256 MiB",
       "Free read buffers kept for the next disk reads (with `server`: for the blocks copied "
       "out of the daemon's arena); 0 = none.",
       "read_buffer_pool_bytes", KVTIER_SET(s.cache.read_buffer_pool_bytes = v.u)},
      {"read_buffer_prefault_bytes", Kind::kSize, "0",
       "Read buffers of this layout's block size faulted in at open (kept in the pool, so at "
       "most `read_buffer_pool_bytes`), so that the first restores into RAM pay no page "
       "faults; 0 = none. Costs that much RAM from open on.",
       "read_buffer_prefault_bytes", KVTIER_SET(s.read_buffer_prefault_bytes = v.u)},
      {"index_expected_blocks", Kind::kCount, "0",
       "Blocks the match index is sized for up front; 0 = grow on demand. At most 2^32.",
       "index_expected_blocks", KVTIER_SET(s.cache.index_expected_blocks = v.u), uint64_t{1} << 32},
      {"close_timeout", Kind::kDuration, "60s",
       "How long close() may spend writing dirty entries down to disk; 0 = no bound.",
       "close_timeout_ms", KVTIER_SET(s.cache.close_timeout_ms = v.u)},
      // --- Host tier --------------------------------------------------------
      {"host_bytes", Kind::kSize, "(required; CLI: per command)", "RAM for the host tier, > 0.",
       "host.capacity_bytes", KVTIER_SET(s.cache.host.capacity_bytes = v.u)},
      {"host_policy",
       Kind::kEnum,
       "lru",
       "RAM eviction order: `lru`, or `reuse` (blocks never read back go first; "
       "docs/replay.md).",
       "host.eviction_policy",
       KVTIER_SET(s.cache.host.eviction_policy =
                      v.u == 0 ? HostEvictionPolicy::kLru : HostEvictionPolicy::kReuse),
       kU64,
       kMs,
       {"lru", "reuse"}},
      // --- Disk tier --------------------------------------------------------
      {"disk_dir", Kind::kOptString, "none (no disk tier)",
       "The disk-tier folder, created if missing; several processes may share it.", "disk.dir",
       KVTIER_SET(s.disk_dir = v.opt)},
      {"disk_max_bytes", Kind::kSize, "10 GiB",
       "Bytes of block files the folder may hold (all layouts); 0 = free disk only.",
       "disk.max_bytes", KVTIER_SET(s.disk.max_bytes = v.u)},
      {"disk_max_entries", Kind::kCount, "0", "Block files the folder may hold; 0 = unlimited.",
       "disk.max_entries", KVTIER_SET(s.disk.max_entries = v.u)},
      {"disk_retention", Kind::kDuration, "0",
       "Age after which a block is removed; 0 = forever. Whole seconds.", "disk.retention_seconds",
       KVTIER_SET(s.disk.retention_seconds = static_cast<int64_t>(v.u)), kI64, kSec},
      {"disk_free_space_fraction", Kind::kFraction, "0.99",
       "Fraction of (tracked + free disk bytes) the cache may use, in (0, 1].",
       "disk.free_space_fraction", KVTIER_SET(s.disk.free_space_fraction = v.d)},
      {"disk_free_space_ttl", Kind::kDuration, "2s",
       "How long a free-disk-space reading is reused.", "disk.free_space_ttl_micros",
       KVTIER_SET(s.disk.free_space_ttl_micros = v.u), kU64, kUs},
      {"disk_max_unlinks_per_store", Kind::kCount, "32",
       "Most block files one store removes to make room, > 0.", "disk.max_unlinks_per_store",
       KVTIER_SET(s.disk.max_unlinks_per_store = static_cast<uint32_t>(v.u)), kU32},
      {"disk_writer_threads", Kind::kCount, "2",
       "Background writer threads; 0 = every store writes on the caller's thread.",
       "disk.writer_threads", KVTIER_SET(s.disk.writer_threads = static_cast<uint32_t>(v.u)), kU32},
      {"disk_queue_max_bytes", Kind::kSize, "0 (10% of RAM, 64 MiB..8 GiB)",
       "Bytes of blocks waiting for a writer (readable meanwhile); 0 = derived from RAM.",
       "disk.queue_max_bytes", KVTIER_SET(s.disk.queue_max_bytes = v.u)},
      {"disk_queue_wait", Kind::kDuration, "1s",
       "How long a store waits for queue room before `disk_on_pressure` applies.",
       "disk.queue_wait_micros", KVTIER_SET(s.disk.queue_wait_micros = v.u), kU64, kUs},
      {"disk_commit_batch_bytes", Kind::kSize, "1 MiB",
       "Bytes a writer commits in one index transaction; 0 = one block at a time.",
       "disk.commit_batch_bytes", KVTIER_SET(s.disk.commit_batch_bytes = v.u)},
      {"disk_on_pressure",
       Kind::kEnum,
       "write_inline",
       "When the queue stays full: `write_inline` (write on the caller's thread, never "
       "loses a block) or `drop` (drop and count it).",
       "disk.on_pressure",
       KVTIER_SET(s.disk.on_pressure = v.u == 0 ? OnPressure::kWriteInline : OnPressure::kDrop),
       kU64,
       kMs,
       {"write_inline", "drop"}},
      {"disk_durability",
       Kind::kEnum,
       "checksum",
       "`checksum`: no fsync, torn files are caught by their checksum; `fsync`: file, "
       "folder and index synced, so a flushed block survives a power loss. docs/tiers.md.",
       "disk.durability",
       KVTIER_SET(s.disk.durability = v.u == 0 ? Durability::kChecksum : Durability::kFsync),
       kU64,
       kMs,
       {"checksum", "fsync"}},
      {"disk_direct_io_reads", Kind::kBool, "true",
       "Read large blocks with O_DIRECT into aligned buffers (skips the page cache).",
       "disk.direct_io_reads", KVTIER_SET(s.disk.direct_io_reads = v.b)},
      {"disk_direct_io_min_bytes", Kind::kSize, "1 MiB",
       "Smaller blocks are read through the page cache.", "disk.direct_io_min_bytes",
       KVTIER_SET(s.disk.direct_io_min_bytes = v.u)},
      {"disk_read_threads", Kind::kCount, "4",
       "Threads a batch load reads with; 0 = the caller's thread only.", "disk.read_threads",
       KVTIER_SET(s.disk.read_threads = static_cast<uint32_t>(v.u)), kU32},
      {"disk_sqlite_busy_timeout", Kind::kDuration, "10s",
       "How long an index call waits on another process's lock.", "disk.sqlite_busy_timeout_ms",
       KVTIER_SET(s.disk.sqlite_busy_timeout_ms = static_cast<uint32_t>(v.u)), kU32},
      {"disk_touch_flush_interval", Kind::kDuration, "1s",
       "How often buffered last-access times reach the index (LRU order).",
       "disk.touch_flush_interval_ms",
       KVTIER_SET(s.disk.touch_flush_interval_ms = static_cast<uint32_t>(v.u)), kU32},
      {"disk_reconcile_on_open", Kind::kBool, "true",
       "Reconcile folder and index in the background at open.", "disk.reconcile_on_open",
       KVTIER_SET(s.disk.reconcile_on_open = v.b)},
      {"disk_stale_temp", Kind::kDuration, "1h",
       "Without advisory locks: age after which a temp file is abandoned. Whole seconds.",
       "disk.stale_temp_seconds", KVTIER_SET(s.disk.stale_temp_seconds = static_cast<int64_t>(v.u)),
       kI64, kSec},
      {"disk_quarantine_retention", Kind::kDuration, "7 days (168h)",
       "How long quarantined files are kept; 0 = until `kvtier gc`. Whole seconds.",
       "disk.quarantine_retention_seconds",
       KVTIER_SET(s.disk.quarantine_retention_seconds = static_cast<int64_t>(v.u)), kI64, kSec},
      {"disk_file_permissions", Kind::kMode, "0600",
       "Mode bits of block files and the index (an integer, or octal digits as a string).",
       "disk.file_permissions", KVTIER_SET(s.disk.file_permissions = static_cast<uint32_t>(v.u))},
      {"disk_dir_permissions", Kind::kMode, "0700",
       "Mode bits of the folders the tier creates; must include 0700.", "disk.dir_permissions",
       KVTIER_SET(s.disk.dir_permissions = static_cast<uint32_t>(v.u))},
      // --- Remote tier ------------------------------------------------------
      {"remote", Kind::kOptString, "none (no remote tier)",
       "A Redis URL: `redis://[[user]:password@]host[:port][/db]` or "
       "`redis-cluster://host:port[,host:port...]`; `rediss://`, `rediss-cluster://` over TLS "
       "(docs/remote-tier.md).",
       "remote.url", KVTIER_SET(s.remote = v.opt)},
      {"remote_prefix", Kind::kString, "kvtier:v1:",
       "Prepended to every Redis key; one per deployment. At most 256 bytes, no `{` `}`.",
       "remote.key_prefix", KVTIER_SET(s.remote_tier.key_prefix = v.s)},
      {"remote_part_bytes", Kind::kSize, "4 MiB",
       "Bytes stored under one Redis name; longer blocks are split. Every host must agree.",
       "remote.part_bytes", KVTIER_SET(s.remote_tier.part_bytes = v.u)},
      {"remote_ttl", Kind::kDuration, "0",
       "Expiry of stored blocks (SET EX); 0 = none. Whole seconds.", "remote.ttl_seconds",
       KVTIER_SET(s.remote_tier.ttl_seconds = static_cast<uint32_t>(v.u)), kU32, kSec},
      {"remote_connect_timeout", Kind::kDuration, "500ms",
       "How long a TCP connect (with AUTH/SELECT) may take, > 0.", "remote.connect_timeout_ms",
       KVTIER_SET(s.remote_tier.connect_timeout_ms = static_cast<uint32_t>(v.u)), kU32},
      {"remote_command_timeout", Kind::kDuration, "2s",
       "How long the server may take per request, and a whole call's deadline (plus 10 ms "
       "per MiB), > 0.",
       "remote.command_timeout_ms",
       KVTIER_SET(s.remote_tier.command_timeout_ms = static_cast<uint32_t>(v.u)), kU32},
      {"remote_breaker_failure_threshold", Kind::kCount, "3",
       "Consecutive failures that open a node's circuit breaker, > 0.",
       "remote.breaker_failure_threshold",
       KVTIER_SET(s.remote_tier.breaker_failure_threshold = static_cast<uint32_t>(v.u)), kU32},
      {"remote_breaker_open", Kind::kDuration, "1s",
       "How long an open breaker waits first (doubled per failed probe).", "remote.breaker_open_ms",
       KVTIER_SET(s.remote_tier.breaker_open_ms = static_cast<uint32_t>(v.u)), kU32},
      {"remote_breaker_max_open", Kind::kDuration, "30s",
       "The longest a breaker stays open, >= `remote_breaker_open`.", "remote.breaker_max_open_ms",
       KVTIER_SET(s.remote_tier.breaker_max_open_ms = static_cast<uint32_t>(v.u)), kU32},
      {"remote_require_server_at_open", Kind::kBool, "false",
       "Opening fails (Unavailable) when no server answers; off: lookups are misses.",
       "remote.require_server_at_open", KVTIER_SET(s.remote_tier.require_server_at_open = v.b)},
      {"remote_connections_per_node", Kind::kCount, "4", "Connections per node, 1..64.",
       "remote.connections_per_node",
       KVTIER_SET(s.remote_tier.connections_per_node = static_cast<uint32_t>(v.u)), kU32},
      {"remote_pipeline_max_bytes", Kind::kSize, "8 MiB",
       "Bytes of replies in flight on one connection, > 0.", "remote.pipeline_max_bytes",
       KVTIER_SET(s.remote_tier.pipeline_max_bytes = v.u)},
      {"remote_writer_threads", Kind::kCount, "2", "Threads that send stored blocks, 1..64.",
       "remote.writer_threads",
       KVTIER_SET(s.remote_tier.writer_threads = static_cast<uint32_t>(v.u)), kU32},
      {"remote_queue_max_bytes", Kind::kSize, "256 MiB",
       "Bytes of blocks waiting to be sent; more are dropped and counted, > 0.",
       "remote.queue_max_bytes", KVTIER_SET(s.remote_tier.queue_max_bytes = v.u)},
      {"remote_skip_existing", Kind::kBool, "true",
       "Ask which blocks the server has before sending a batch (EXISTS) and skip those.",
       "remote.skip_existing", KVTIER_SET(s.remote_tier.skip_existing = v.b)},
      {"remote_verify_puts", Kind::kBool, "true", "Check a block's header before sending it.",
       "remote.verify_puts", KVTIER_SET(s.remote_tier.verify_puts = v.b)},
      {"remote_lookup_budget", Kind::kDuration, "20ms",
       "How long a match waits for Redis (a connect included); a later answer is a miss for "
       "that call, counted in `exists_late`. > 0.",
       "remote.lookup_budget_ms",
       KVTIER_SET(s.remote_tier.lookup_budget_ms = static_cast<uint32_t>(v.u)), kU32},
      {"remote_min_reply_rate", Kind::kSize, "1 MiB",
       "Bytes per second a reply must keep arriving at, after a 100 ms grace from its first "
       "byte; a slower one fails as a timeout that counts toward the node's breaker. 0 = off.",
       "remote.min_reply_rate", KVTIER_SET(s.remote_tier.min_reply_rate = v.u)},
      {"remote_mac_keys", Kind::kPathList, "none (values unsigned)",
       "Key files (at least 32 random bytes each) that sign stored values; the first signs, "
       "all verify. A host with keys serves only values signed by one of them "
       "(docs/remote-tier.md, Security).",
       "remote.mac_keys", KVTIER_SET(s.remote_tier.mac_keys = v.list)},
      {"remote_close_timeout", Kind::kDuration, "10s",
       "How long close() waits for the send queue to drain; 0 = no bound.",
       "remote.close_timeout_ms", KVTIER_SET(s.remote_tier.close_timeout_ms = v.u)},
      {"remote_tls_ca_file", Kind::kString, "\"\" (the system store)",
       "PEM CA certificates that verify the servers of a `rediss://` or `rediss-cluster://` URL.",
       "remote.tls_ca_file", KVTIER_SET(s.remote_tier.tls_ca_file = v.s)},
      {"remote_tls_cert_file", Kind::kString, "\"\"",
       "PEM client certificate (chain) for TLS servers that ask for one; with "
       "`remote_tls_key_file`.",
       "remote.tls_cert_file", KVTIER_SET(s.remote_tier.tls_cert_file = v.s)},
      {"remote_tls_key_file", Kind::kString, "\"\"", "PEM private key of `remote_tls_cert_file`.",
       "remote.tls_key_file", KVTIER_SET(s.remote_tier.tls_key_file = v.s)},
      {"remote_tls_server_name", Kind::kString, "\"\" (each node's host)",
       "Name checked against the servers' certificates (and sent as SNI) instead of each "
       "node's host.",
       "remote.tls_server_name", KVTIER_SET(s.remote_tier.tls_server_name = v.s)},
      // --- Server (kvtier serve) ---------------------------------------------
      {"server", Kind::kOptString, "none (in-process tiers)",
       "`unix:PATH`: the socket of the host's `kvtier serve` daemon, which the daemon listens "
       "on and its clients connect to (docs/server.md).",
       "server", KVTIER_SET(s.server = v.opt)},
      {"server_timeout", Kind::kDuration, "1s",
       "With `server`: how long one call waits for the daemon before it counts as down "
       "(loads and matches are then misses, stores Unavailable).",
       "server_timeout_ms", KVTIER_SET(s.cache.server_timeout_ms = v.u)},
      {"server_namespace_quota", Kind::kSize, "0 (no bound but the arena's)",
       "`kvtier serve` only: the most arena bytes one key namespace's blocks may hold (whole "
       "slots, at least one); a namespace at its quota evicts its own least recent block, never "
       "another's.",
       "serve.namespace_quota_bytes", KVTIER_SET(s.server_namespace_quota_bytes = v.u)},
      {"server_socket_group", Kind::kString, "\"\" (the daemon's user only)",
       "`kvtier serve` only: a group (name or number) given the socket with read and write "
       "(0660): its members' processes may connect, and so read and write every block; the "
       "daemon's user must be a member.",
       "serve.socket_group", KVTIER_SET(s.server_socket_group = v.s)},
      {"server_http", Kind::kAddress, "none (no HTTP)",
       "`kvtier serve` only (a cache refuses it): `HOST:PORT` or a bare `PORT` (on 127.0.0.1) "
       "where the daemon answers HTTP GET `/metrics` (Prometheus text) and `/healthz` "
       "(docs/server.md). HOST is an IPv4 address, `localhost` or `[IPv6]`; port 0 = any free "
       "one, printed at start.",
       "serve.http", KVTIER_SET(s.server_http = v.opt)},
      // --- Key namespace ------------------------------------------------------
      {"key_model_id", Kind::kString, "\"\"",
       "The model id in the block-key namespace (DESIGN.md §3); the layout gives signature "
       "and block_tokens. Used where the cache makes keys (Python `Cache.key_chain`, the "
       "SGLang backend).",
       "key.model_id", KVTIER_SET(s.key.model_id = v.s)},
      {"key_salt", Kind::kString, "\"\"",
       "Tenant salt in the namespace (its UTF-8 bytes; Python also takes bytes).", "key.salt",
       KVTIER_SET(s.key.salt = v.s)},
      {"key_adapter_id", Kind::kString, "\"\"", "Adapter (LoRA) id in the namespace.",
       "key.adapter_id", KVTIER_SET(s.key.adapter_id = v.s)},
      {"key_extra", Kind::kString, "\"\"",
       "Extra namespace bytes (its UTF-8 bytes; Python also takes bytes).", "key.extra",
       KVTIER_SET(s.key.extra = v.s)},
      {"key_shard", Kind::kString, "\"\"",
       "The part of the model's KV this process holds, `tp=<rank>/<size>;pp=...;cp=...` in "
       "canonical form (DESIGN.md §3; each field left out when its size is 1). Empty: the "
       "whole model.",
       "key.shard", KVTIER_SET(s.key.shard = v.s)},
  };
  return *rows;
}

#undef KVTIER_SET

std::string Echo(const json& value) {
  std::string text = value.is_binary() ? "<bytes>" : value.dump();
  if (text.size() > kMaxQuotedChars) text = text.substr(0, kMaxQuotedChars) + "...";
  return text;
}

Status Bad(const Row& row, std::string_view why) {
  return Status::InvalidArgument(std::string(row.name) + ": " + std::string(why));
}

std::string TypeText(const Row& row) {
  switch (row.kind) {
    case Kind::kSize:
      return "size";
    case Kind::kDuration:
      return "duration";
    case Kind::kCount:
      return "integer";
    case Kind::kBool:
      return "bool";
    case Kind::kString:
      return "string";
    case Kind::kOptString:
      return "string or null";
    case Kind::kFraction:
      return "number";
    case Kind::kMode:
      return "file mode";
    case Kind::kPathList:
      return "path or list of paths";
    case Kind::kAddress:
      return "address";
    case Kind::kEnum: {
      std::string t;
      for (const char* c : row.choices) t += (t.empty() ? "" : " | ") + std::string(c);
      return t;
    }
  }
  return "";
}

Result<uint64_t> InRange(const Row& row, uint64_t v, uint64_t max, std::string_view unit) {
  if (v > max) {
    return Bad(row, std::to_string(v) + std::string(unit) + " is larger than the most it takes, " +
                        std::to_string(max) + std::string(unit));
  }
  return v;
}

Result<Value> Parse(const Row& row, const json& value) {
  Value v;
  switch (row.kind) {
    case Kind::kSize: {
      KVTIER_ASSIGN_OR_RETURN(v.u, ParseSize(row.name, value));
      KVTIER_ASSIGN_OR_RETURN(v.u, InRange(row, v.u, row.max, " bytes"));
      return v;
    }
    case Kind::kDuration: {
      KVTIER_ASSIGN_OR_RETURN(const uint64_t micros, ParseDuration(row.name, value));
      if (micros % row.unit != 0) {
        return Bad(row, Echo(value) + " is not a whole number of " +
                            (row.unit == kSec ? "seconds" : "milliseconds"));
      }
      KVTIER_ASSIGN_OR_RETURN(v.u, InRange(row, micros / row.unit, row.max,
                                           row.unit == kSec  ? " s"
                                           : row.unit == kMs ? " ms"
                                                             : " us"));
      return v;
    }
    case Kind::kCount: {
      if (!value.is_number_unsigned()) {
        return Bad(row,
                   "expected an integer 0.." + std::to_string(row.max) + ", got " + Echo(value));
      }
      KVTIER_ASSIGN_OR_RETURN(v.u, InRange(row, value.get<uint64_t>(), row.max, ""));
      return v;
    }
    case Kind::kBool:
      if (!value.is_boolean()) return Bad(row, "expected true or false, got " + Echo(value));
      v.b = value.get<bool>();
      return v;
    case Kind::kOptString:
      if (value.is_null()) return v;
      [[fallthrough]];
    case Kind::kString:
      if (value.is_binary()) {
        const auto& bin = value.get_binary();
        v.s.assign(bin.begin(), bin.end());
      } else if (value.is_string()) {
        v.s = value.get<std::string>();
      } else {
        return Bad(row, std::string("expected a string") +
                            (row.kind == Kind::kOptString ? " or null" : "") + ", got " +
                            Echo(value));
      }
      if (row.kind == Kind::kOptString) {
        if (v.s.empty()) return Bad(row, "must not be empty (null or leave it out for none)");
        v.opt = v.s;
      }
      return v;
    case Kind::kPathList: {
      auto add = [&](const json& item) -> Status {
        if (!item.is_string() || item.get<std::string>().empty()) {
          return Bad(row, "expected a file path (or a list of them), got " + Echo(item));
        }
        v.list.push_back(item.get<std::string>());
        return Status::Ok();
      };
      if (value.is_array()) {
        for (const json& item : value) KVTIER_RETURN_IF_ERROR(add(item));
      } else {
        KVTIER_RETURN_IF_ERROR(add(value));
      }
      return v;
    }
    case Kind::kAddress:
      // A port alone is a number in JSON and on the command line; the
      // daemon checks the form (ServerOptions::Validate).
      if (value.is_null()) return v;
      if (value.is_number_unsigned()) {
        v.opt = std::to_string(value.get<uint64_t>());
      } else if (value.is_string() && !value.get<std::string>().empty()) {
        v.opt = value.get<std::string>();
      } else {
        return Bad(row, "expected \"HOST:PORT\" or a port number (null for none), got " +
                            Echo(value));
      }
      return v;
    case Kind::kFraction:
      if (!value.is_number()) return Bad(row, "expected a number, got " + Echo(value));
      v.d = value.get<double>();
      return v;
    case Kind::kMode: {
      if (value.is_string()) {
        const std::string text = value.get<std::string>();
        uint64_t m = 0;
        if (text.empty() || text.size() > 4 ||
            !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '7'; })) {
          return Bad(row, "expected octal digits such as \"0640\", got " + Echo(value));
        }
        for (char c : text) m = m * 8 + static_cast<uint64_t>(c - '0');
        v.u = m;
      } else if (value.is_number_unsigned()) {
        v.u = value.get<uint64_t>();
      } else {
        return Bad(row, "expected a mode (an integer or octal digits), got " + Echo(value));
      }
      if (v.u > 0777) return Bad(row, "must be within 0..0777, got " + Echo(value));
      return v;
    }
    case Kind::kEnum: {
      if (value.is_string()) {
        const std::string text = value.get<std::string>();
        for (size_t i = 0; i < row.choices.size(); ++i) {
          if (text == row.choices[i]) {
            v.u = i;
            return v;
          }
        }
      }
      return Bad(row, "expected " + TypeText(row) + ", got " + Echo(value));
    }
  }
  return Bad(row, "unknown option kind");
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1])});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// "disk.max_bytes" -> "DiskTierOptions::max_bytes", for the docs.
std::string CppField(const std::string& path) {
  static constexpr std::pair<std::string_view, std::string_view> kStructs[] = {
      {"host.", "HostTierOptions::"},
      {"disk.", "DiskTierOptions::"},
      {"remote.", "RemoteTierOptions::"},
      {"key.", "NamespaceOptions::"},
      {"serve.", "ServerOptions::"},
  };
  if (path == "layout") return "ModelLayout::Resolve";
  if (path == "block_tokens") return "ModelLayout::block_tokens";
  if (path == "read_buffer_prefault_bytes") return "TieredCache::PrefaultReadBuffers";
  for (const auto& [prefix, name] : kStructs) {
    if (path.starts_with(prefix)) return std::string(name) + path.substr(prefix.size());
  }
  return "CacheOptions::" + path;
}

}  // namespace

const std::vector<OptionInfo>& Options() {
  static const std::vector<OptionInfo>* infos = [] {
    auto* out = new std::vector<OptionInfo>();
    for (const Row& row : Table()) {
      out->push_back({row.name, TypeText(row), row.default_text, row.doc, row.field});
    }
    return out;
  }();
  return *infos;
}

std::string ClosestOption(std::string_view name) {
  std::string best;
  size_t best_distance = ~size_t{0};
  for (const Row& row : Table()) {
    const size_t d = EditDistance(name, row.name);
    if (d < best_distance) {
      best_distance = d;
      best = row.name;
    }
  }
  return best;
}

Status ApplyOption(std::string_view name, const json& value, CacheSpec* spec) {
  for (const Row& row : Table()) {
    if (name != row.name) continue;
    KVTIER_ASSIGN_OR_RETURN(Value v, Parse(row, value));
    row.set(*spec, v);
    spec->given.insert(row.name);
    return Status::Ok();
  }
  std::string shown(name.substr(0, kMaxQuotedChars));
  return Status::InvalidArgument("unknown option '" + shown + "' (did you mean '" +
                                 ClosestOption(name) +
                                 "'? kvtier.options() and docs/options.md list them)");
}

Status ApplyOptions(const json& object, CacheSpec* spec) {
  if (!object.is_object()) {
    return Status::InvalidArgument("options: expected a JSON object, got " + Echo(object));
  }
  if (auto it = object.find("config"); it != object.end()) {
    if (!it->is_string()) {
      return Status::InvalidArgument("config: expected a file path, got " + Echo(*it));
    }
    KVTIER_RETURN_IF_ERROR(ApplyConfigFile(it->get<std::string>(), spec));
  }
  for (const auto& [name, value] : object.items()) {
    if (name == "config") continue;
    KVTIER_RETURN_IF_ERROR(ApplyOption(name, value, spec));
  }
  return Status::Ok();
}

Result<json> ReadConfigFile(const std::string& path) {
  Result<std::vector<std::byte>> bytes = Env::Default()->ReadWholeFile(path, kMaxConfigBytes);
  if (!bytes.ok()) return bytes.status().WithContext("config " + path);
  const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  KVTIER_ASSIGN_OR_RETURN(json root, ParseOptionsText(text, "config " + path));
  if (!root.is_object()) {
    return Status::InvalidArgument("config " + path + ": expected a JSON object of options");
  }
  if (root.contains("config")) {
    return Status::InvalidArgument("config " + path + ": a config file cannot name another");
  }
  return root;
}

static_assert(kMaxOptionJsonDepth == internal::kMaxUserJsonDepth);

Result<json> ParseOptionsText(std::string_view text, const std::string& what) {
  const std::optional<internal::JsonError> bad = internal::CheckUserJson(text);
  if (bad.has_value() && bad->kind == internal::JsonErrorKind::kTooDeep) {
    return Status::InvalidArgument(what + ": " + internal::DescribeJsonError(*bad));
  }
  if (bad.has_value() && bad->kind != internal::JsonErrorKind::kDuplicateKey) {
    return Status::InvalidArgument(what + ": not valid JSON (" + internal::DescribeJsonError(*bad) +
                                   ")");
  }
  // nlohmann keeps the last of repeated names: name a repeated option.
  std::string repeated;
  std::set<std::string> top_names;
  const json::parser_callback_t find_repeats = [&](int depth, json::parse_event_t event,
                                                   json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !top_names.insert(parsed.get<std::string>()).second && repeated.empty()) {
      repeated = parsed.get<std::string>();
    }
    return true;
  };
  json root = json::parse(text, find_repeats, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Status::InvalidArgument(what + ": not valid JSON");
  if (!repeated.empty()) {
    return Status::InvalidArgument(what + ": option '" + repeated.substr(0, kMaxQuotedChars) +
                                   "' given twice");
  }
  // A key repeated inside a value (no option takes an object, but say so).
  if (bad.has_value()) return Status::InvalidArgument(what + ": " + internal::DescribeJsonError(*bad));
  return root;
}

Status ApplyConfigFile(const std::string& path, CacheSpec* spec) {
  KVTIER_ASSIGN_OR_RETURN(json root, ReadConfigFile(path));
  Status s = ApplyOptions(root, spec);
  return s.ok() ? s : s.WithContext("config " + path);
}

std::string OptionsMarkdown() {
  std::string md =
      "# Options\n\n"
      "<!-- Generated by `kvtier options --markdown` from the options table\n"
      "     (src/bindings/option_table.cc); a test fails when this file differs. -->\n\n"
      "Every option has one name in every language: the keywords of\n"
      "`kvtier.Cache(layout, **options)`, a JSON object for\n"
      "`kvtier.Cache.from_config(path_or_dict)` and the C `kvtier_cache_open(options_json)`\n"
      "(where `{\"config\": \"file.json\"}` reads a file and the other members override it),\n"
      "`--config FILE.json` of every `kvtier` command that opens a cache or a tier (a flag\n"
      "given on the command line wins over the file), and the SGLang backend's extra\n"
      "config. `kvtier.options()` returns this table.\n\n"
      "- **size**: an integer (bytes) or a string with a unit: `B`, `KB`, `MB`, `GB`, `TB`\n"
      "  (powers of 1000), `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024). Fractions are\n"
      "  allowed (`\"1.5GB\"`; a fraction of a byte is dropped). Size flags of the `kvtier`\n"
      "  commands (`gc --max-bytes`, `bench ... --block-bytes`, ...) take the same, a bare\n"
      "  number of bytes, and `K`, `M`, `G`, `T` (powers of 1024: `512M`).\n"
      "- **duration**: an integer (milliseconds) or a string with `ms`, `s`, `min` or `h`\n"
      "  (`\"500ms\"`, `\"2s\"`, `\"1.5h\"`); options kept in whole seconds refuse a rest.\n"
      "- A value larger than the option holds is refused, never wrapped. An unknown name\n"
      "  or a bad value is an InvalidArgument error naming the option (and, for an\n"
      "  unknown name, the closest known one).\n"
      "- Option JSON (a config file, `options_json`, `from_config`) nested deeper than 32\n"
      "  levels, or naming an option twice, is an InvalidArgument error too.\n\n"
      "| name | type | default | meaning | C++ field |\n"
      "|---|---|---|---|---|\n";
  for (const OptionInfo& o : Options()) {
    std::string type = o.type;
    if (type.find(" | ") != std::string::npos) {
      std::string choices;
      size_t start = 0;
      while (start <= type.size()) {
        const size_t bar = std::min(type.find(" | ", start), type.size());
        choices += (choices.empty() ? "`" : " \\| `") + type.substr(start, bar - start) + "`";
        start = bar + 3;
      }
      type = choices;
    }
    md += "| `" + o.name + "` | " + type + " | " + o.default_value + " | " + o.doc + " | `" +
          CppField(o.field) + "` |\n";
  }
  return md;
}

}  // namespace kvtier::bindings
