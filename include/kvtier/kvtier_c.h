/* kvtier C API (DESIGN.md §8, docs/c-api.md): a stable C interface to the
 * block keys and the tiered cache (host RAM over an optional disk folder),
 * for engines written in C or languages that bind C. Link with -lkvtier_c
 * (pkg-config kvtier_c, or the CMake target kvtier::kvtier_c).
 *
 * Errors: a function that can fail returns 0 (KVTIER_OK) or a KVTIER_E_*
 * code below, and never lets a C++ exception (out-of-memory included) or a
 * crash out for bad arguments; kvtier_last_error() says what went wrong.
 * A cache miss is not an error.
 *
 * Handles and threads: a kvtier_cache is opaque. Every function may be
 * called from any number of threads at once, on the same cache too;
 * kvtier_cache_close() waits for the calls in progress. A NULL handle is
 * KVTIER_E_INVALID_ARGUMENT (like every NULL pointer); a closed (or never
 * opened) handle is KVTIER_E_FAILED_PRECONDITION.
 *
 * Processes: a cache's threads do not survive fork(). In a forked child
 * every call on a handle the parent opened is KVTIER_E_FAILED_PRECONDITION
 * naming both process ids, and kvtier_cache_close() only releases the
 * handle there (returns 0, joins nothing); the parent's cache is untouched.
 * Open a new cache in the child.
 *
 * Sizes: a function that writes a variable amount into (out, cap) sets *len
 * to the size it needs and returns KVTIER_E_BUFFER_TOO_SMALL when cap is
 * too small; call it with out = NULL, cap = 0 to learn the size first.
 */
#ifndef KVTIER_KVTIER_C_H_
#define KVTIER_KVTIER_C_H_

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define KVTIER_C_API __attribute__((visibility("default")))
#else
#define KVTIER_C_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. The positive ones mirror kvtier::StatusCode. */
enum {
  KVTIER_OK = 0,
  /* A named thing does not exist (e.g. a layout file). */
  KVTIER_E_NOT_FOUND = 1,
  /* Bytes failed validation: structure, key, signature or checksum. */
  KVTIER_E_CORRUPTION = 2,
  /* A malformed argument: a NULL pointer, bad or unknown option, a block
   * whose header does not match its key or the cache's layout. */
  KVTIER_E_INVALID_ARGUMENT = 3,
  /* Out of memory, budget, queue space or disk. */
  KVTIER_E_RESOURCE_EXHAUSTED = 4,
  /* A system call failed (the message names it and its errno text). */
  KVTIER_E_IO = 5,
  /* A tier or service is down. */
  KVTIER_E_UNAVAILABLE = 6,
  /* The call is not allowed in this state: a closed or unknown cache handle. */
  KVTIER_E_FAILED_PRECONDITION = 7,
  /* A broken invariant inside kvtier (a bug: please report it). */
  KVTIER_E_INTERNAL = 8,
  /* The destination is too small; *len says how much is needed. */
  KVTIER_E_BUFFER_TOO_SMALL = 9
};

/* The message of the last call on this thread that failed ("" if none has),
 * at most 1023 bytes. Never NULL. The pointer is the thread's own buffer,
 * valid for the thread's lifetime; its text stays until the next failing
 * call on this thread (calls that succeed leave it alone). */
KVTIER_C_API const char* kvtier_last_error(void);

/* "OK", "NOT_FOUND", ..., "BUFFER_TOO_SMALL"; "UNKNOWN" for other values. */
KVTIER_C_API const char* kvtier_error_name(int code);

/* The library version, e.g. "0.1.0". */
KVTIER_C_API const char* kvtier_version(void);

/* Block keys v1 (DESIGN.md §3): the 32-byte keys of the n / block_tokens full
 * blocks of tokens[0..n), the same as `kvtier key`. keys_out must hold
 * (n / block_tokens) * 32 bytes (it may be NULL when that is 0); *n_keys
 * receives the number of keys written. `signature` is a layout signature
 * (kvtier_layout_signature()). */
KVTIER_C_API int kvtier_block_keys(const char* model, const char* signature, uint32_t block_tokens,
                                   const uint32_t* tokens, size_t n, uint8_t* keys_out,
                                   size_t* n_keys);

/* Block keys v1 under a full namespace (DESIGN.md §3), given as one JSON
 * object:
 *   "model"        (string, required)   model id, UTF-8
 *   "signature"    (string, required)   layout signature
 *   "block_tokens" (integer, required)  tokens per block, 1..4294967295
 *   "salt_hex"     (string)  tenant salt, as hex ("" = none)
 *   "adapter"      (string)  adapter id, UTF-8 ("" = none)
 *   "extra_hex"    (string)  extra namespace bytes, as hex ("" = none)
 *   "shard"        (string)  the part of the model's KV this process holds,
 *                  canonical "tp=<rank>/<size>;pp=<rank>/<size>;cp=<rank>/<size>"
 *                  with each field left out when its size is 1 ("" = none)
 * Unknown or repeated names, wrong types and non-canonical shards are
 * KVTIER_E_INVALID_ARGUMENT. Keys, tokens and n_keys as kvtier_block_keys();
 * with only model, signature and block_tokens the keys are the same. */
KVTIER_C_API int kvtier_block_keys_ns(const char* namespace_json, const uint32_t* tokens,
                                      size_t n, uint8_t* keys_out, size_t* n_keys);

/* The namespace key (32 bytes) of namespace_json (as kvtier_block_keys_ns):
 * the parent of a chain's first block, which kvtier_block_encode records. */
KVTIER_C_API int kvtier_block_namespace(const char* namespace_json, uint8_t ns_out[32]);

/* The signature of a layout (a preset name or a layout JSON path) into
 * out[0..cap), NUL-terminated; *len receives its length without the NUL.
 * KVTIER_E_BUFFER_TOO_SMALL (with *len set) when cap <= *len. */
KVTIER_C_API int kvtier_layout_signature(const char* layout, char* out, size_t cap, size_t* len);

typedef struct kvtier_cache kvtier_cache;

/* Opens a cache. options_json is one JSON object of options (DESIGN.md §8;
 * docs/options.md lists every one with its type, default and meaning):
 *   "layout"       (string, required)  a preset name or a layout JSON path
 *   "host_bytes"   (size, required)    RAM budget, > 0: bytes or "1GiB"
 *   "block_tokens" (integer)           tokens per block; 0 = the layout's
 *   "disk_dir"     (string or null)    a disk-tier folder, created if missing
 *   "remote"       (string or null)    a Redis URL (redis://host:port or
 *                                      redis-cluster://host:port,...): the
 *                                      remote tier shared by every host
 *   "write_policy" "write_back" | "write_through"; "disk_durability"
 *   "checksum" | "fsync"; "disk_max_bytes", "remote_prefix", ... (all of
 *   docs/options.md). Sizes are integers (bytes) or strings with a unit
 *   ("64MiB", "1.5GB"); durations integers (ms) or strings ("2s", "500ms").
 *   "config"       (string)            a JSON file of options, read first;
 *                                      the other members override it
 * Unknown names (the message names the closest known one), wrong types,
 * bad values, malformed JSON, JSON nested deeper than 32 levels and a name
 * given twice (inline or in the file) are KVTIER_E_INVALID_ARGUMENT.
 * On success *out is a new handle; on failure *out is set to NULL. */
KVTIER_C_API int kvtier_cache_open(const char* options_json, kvtier_cache** out);

/* Stores a block file (DESIGN.md §4) under key. Its header must name the
 * key and the cache's layout signature, and its data match its checksum
 * (option verify_store_checksums, default true): KVTIER_E_INVALID_ARGUMENT
 * otherwise.
 * The bytes are copied; block may be reused when the call returns. */
KVTIER_C_API int kvtier_cache_store(kvtier_cache* cache, const uint8_t key[32], const void* block,
                                    size_t len);

/* *matched = how many leading keys of keys[0..n) (n × 32 bytes) some tier
 * holds. No data is read. */
KVTIER_C_API int kvtier_cache_match(kvtier_cache* cache, const uint8_t* keys, size_t n,
                                    size_t* matched);

/* Copies the block stored under key into dst[0..cap) and sets *len to its
 * size. A miss returns 0 with *len = 0. A block larger than cap returns
 * KVTIER_E_BUFFER_TOO_SMALL with *len = the block's size (dst's contents
 * unspecified): call with dst = NULL, cap = 0 to learn the size first (such
 * a size query is not counted as a lookup or hit in the stats; the load
 * that follows is). */
KVTIER_C_API int kvtier_cache_load(kvtier_cache* cache, const uint8_t key[32], void* dst,
                                   size_t cap, size_t* len);

/* Copies block keys[i] (keys: n × 32 bytes) into dsts[i][0..caps[i]) for
 * every i and sets lens[i] to its size; lens[i] = 0 is a miss. The disk and
 * remote reads run in parallel (one batch, each block verified once) and
 * each block is copied straight into its buffer. A block larger than its
 * caps[i] makes the call return KVTIER_E_BUFFER_TOO_SMALL, the message
 * naming one such position, with every lens[i] = 0 (the blocks that
 * fitted were still copied; kvtier_cache_load with dst = NULL tells a
 * block's size). n = 0 is a no-op; keys, dsts, caps and lens may be NULL
 * only then. */
KVTIER_C_API int kvtier_cache_load_many(kvtier_cache* cache, const uint8_t* keys, size_t n,
                                        void* const* dsts, const size_t* caps, size_t* lens);

/* Which tier holds key, for kvtier_cache_contains(). */
enum {
  KVTIER_TIER_NONE = 0,
  KVTIER_TIER_HOST = 1,
  KVTIER_TIER_DISK = 2,
  KVTIER_TIER_REMOTE = 3
};

/* *tier = the fastest tier holding key (KVTIER_TIER_HOST, _DISK, _REMOTE),
 * or KVTIER_TIER_NONE. No block data is read (the disk tier's index; one
 * Redis GETRANGE of the value's first 8 bytes, its header length). */
KVTIER_C_API int kvtier_cache_contains(kvtier_cache* cache, const uint8_t key[32], int* tier);

/* Removes key's block from every tier (Redis: under the cache's prefix).
 * *erased = 1 if any tier held it, else 0. erased may be NULL. Every tier
 * is asked even when one fails; the first failure is returned
 * (KVTIER_E_UNAVAILABLE: a Redis node did not answer). */
KVTIER_C_API int kvtier_cache_erase(kvtier_cache* cache, const uint8_t key[32], int* erased);

/* Removes every block of this cache's layout from every tier. Blocks of
 * other layouts in the same disk folder or Redis prefix are kept. In Redis
 * it erases the keys the local tiers held, then every other value under the
 * prefix whose header carries this layout's signature, whoever stored it
 * (SCAN of every master; the server's ACL must allow SCAN and GETRANGE). */
KVTIER_C_API int kvtier_cache_clear(kvtier_cache* cache);

/* The cache's counters as Prometheus text (CacheStats::ToPrometheus) into
 * out[0..cap), NUL-terminated, like kvtier_layout_signature(): call with
 * out = NULL, cap = 0 to learn *len first (KVTIER_E_BUFFER_TOO_SMALL). */
KVTIER_C_API int kvtier_cache_prometheus(kvtier_cache* cache, char* out, size_t cap, size_t* len);

/* Writes the dirty RAM entries down to the disk tier and waits until the
 * disk tier has written what it accepted. */
KVTIER_C_API int kvtier_cache_flush(kvtier_cache* cache);

/* The cache's counters as one JSON object (CacheStats::ToJson) into
 * out[0..cap), NUL-terminated, like kvtier_layout_signature(). The
 * counters move while the cache runs, so the text may grow between a size
 * query and the copy: leave room to spare, or call again with the new *len
 * on KVTIER_E_BUFFER_TOO_SMALL (also for kvtier_cache_prometheus()). */
KVTIER_C_API int kvtier_cache_stats_json(kvtier_cache* cache, char* out, size_t cap, size_t* len);

/* Levels of kvtier_cache_set_logger()'s messages (kvtier/logger.h). */
enum {
  KVTIER_LOG_DEBUG = 0,   /* state a developer may want (a failed probe) */
  KVTIER_LOG_INFO = 1,    /* back to normal (a Redis node back up) */
  KVTIER_LOG_WARNING = 2, /* degraded but serving (a node down, copies dropped) */
  KVTIER_LOG_ERROR = 3    /* a block the caller stored was not kept (a failed write) */
};

/* Sends the cache's events (DESIGN.md §7: a Redis node down and back up,
 * remote copies dropped by a full queue, disk pressure, ENOSPC, quarantined
 * files, inline writes, failed block writes) to fn(ctx, level, message),
 * rate-limited: each kind at most once per 30 s, the next line of a kind
 * saying how many were held back. message is one NUL-terminated line,
 * valid during the call. fn is called from any thread (the cache's
 * background threads too), possibly from several at once; it must return
 * quickly and must not call kvtier functions on this cache. fn = NULL
 * turns logging off. After this returns the previous fn is no longer
 * running and is not called again (nor is any fn after kvtier_cache_close()
 * returns). Events before the first call are not logged. */
KVTIER_C_API int kvtier_cache_set_logger(kvtier_cache* cache,
                                         void (*fn)(void* ctx, int level, const char* message),
                                         void* ctx);

/* Writes dirty entries down, closes the tiers and invalidates the handle.
 * Returns the first failure to write down or close (the handle is invalid
 * either way); KVTIER_E_INVALID_ARGUMENT for NULL and
 * KVTIER_E_FAILED_PRECONDITION for a handle already closed (both harmless). */
KVTIER_C_API int kvtier_cache_close(kvtier_cache* cache);

/* Block files (DESIGN.md §4, docs/block-format.md). `layout` is a preset
 * name or a layout JSON path, as in kvtier_cache_open; a layout has
 * n_tensors = (layers x states per layer) tensors, named layer_{i}_state_{k}
 * and stored in layer-major order.
 *
 * Encodes one full block: key, parent (the previous block's key; the
 * namespace for the first block) and ns (the namespace) are 32 bytes each;
 * tensors[i] points at exactly tensor i's bytes (the layout gives its dtype
 * and shape). The file goes into dst[0..cap) and *len is its size;
 * KVTIER_E_BUFFER_TOO_SMALL with *len set when cap is smaller (dst = NULL,
 * cap = 0 asks for the size; it is the same for every block of a layout).
 * A wrong n_tensors or a NULL pointer is KVTIER_E_INVALID_ARGUMENT. */
KVTIER_C_API int kvtier_block_encode(const char* layout, const uint8_t key[32],
                                     const uint8_t parent[32], const uint8_t ns[32],
                                     const void* const* tensors, size_t n_tensors, void* dst,
                                     size_t cap, size_t* len);

/* Verifies block[0..len) as a disk read does (strict structure, its key =
 * key, its signature and tensors = the layout's, every checksum) and sets
 * offsets[i], lengths[i] to tensor i's bytes: block + offsets[i], no copy.
 * Anything wrong with the bytes (a wrong key, a flipped byte, a truncated
 * block) is KVTIER_E_CORRUPTION naming the rule broken (the reason names of
 * docs/block-format.md); a NULL pointer or an n_tensors other than the
 * layout's is KVTIER_E_INVALID_ARGUMENT. offsets = lengths = NULL with
 * n_tensors = 0 verifies only. */
KVTIER_C_API int kvtier_block_decode(const void* block, size_t len, const char* layout,
                                     const uint8_t key[32], size_t* offsets, size_t* lengths,
                                     size_t n_tensors);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_KVTIER_C_H_ */
