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
 * kvtier_cache_close() waits for the calls in progress, and a call with a
 * closed (or never opened) handle returns KVTIER_E_FAILED_PRECONDITION.
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

/* The message of the last call on this thread that failed ("" if none has).
 * Valid until the next kvtier call on this thread. Never NULL. */
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

/* The signature of a layout (a preset name or a layout JSON path) into
 * out[0..cap), NUL-terminated; *len receives its length without the NUL.
 * KVTIER_E_BUFFER_TOO_SMALL (with *len set) when cap <= *len. */
KVTIER_C_API int kvtier_layout_signature(const char* layout, char* out, size_t cap, size_t* len);

typedef struct kvtier_cache kvtier_cache;

/* Opens a cache. options_json is one JSON object:
 *   "layout"     (string, required)  a preset name or a layout JSON path
 *   "host_bytes" (integer, required) RAM budget in bytes, > 0
 *   "disk_dir"   (string or null)    a disk-tier folder, created if missing
 *   "remote"     (string or null)    a Redis URL (TieredCache has no remote
 *                                    tier yet: KVTIER_E_UNAVAILABLE when set)
 * Unknown names, wrong types and malformed JSON are KVTIER_E_INVALID_ARGUMENT.
 * On success *out is a new handle; on failure *out is set to NULL. */
KVTIER_C_API int kvtier_cache_open(const char* options_json, kvtier_cache** out);

/* Stores a block file (DESIGN.md §4) under key. Its header must name the
 * key and the cache's layout signature (KVTIER_E_INVALID_ARGUMENT otherwise).
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
 * unspecified): call with dst = NULL, cap = 0 to learn the size first. */
KVTIER_C_API int kvtier_cache_load(kvtier_cache* cache, const uint8_t key[32], void* dst,
                                   size_t cap, size_t* len);

/* Writes the dirty RAM entries down to the disk tier and waits until the
 * disk tier has written what it accepted. */
KVTIER_C_API int kvtier_cache_flush(kvtier_cache* cache);

/* The cache's counters as one JSON object (CacheStats::ToJson) into
 * out[0..cap), NUL-terminated, like kvtier_layout_signature(). */
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
 * NULL and already-closed handles are ignored. A failure to write down is
 * reported by kvtier_last_error() (the handle is invalid either way). */
KVTIER_C_API void kvtier_cache_close(kvtier_cache* cache);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVTIER_KVTIER_C_H_ */
