/* Tests of the C API (include/kvtier/kvtier_c.h) through libkvtier_c.so only.
 *
 * Needs the kvtier CLI (KVTIER_CLI, set by ctest): `kvtier key` gives the
 * expected keys and `kvtier synth --out` makes the block files that are
 * stored. Prints "N checks, M failed" and exits non-zero on any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvtier_c.h"

#include "c_test_check.h"

enum { kMaxBlocks = 16, kMaxBlockBytes = 1 << 16 };

static const char* Cli(void) {
  const char* cli = getenv("KVTIER_CLI");
  if (cli == NULL || cli[0] == '\0') {
    fprintf(stderr, "KVTIER_CLI is not set (run through ctest)\n");
    exit(2);
  }
  return cli;
}

/* Runs a shell command and returns its stdout (malloc'ed) or NULL. */
static char* RunCommand(const char* command) {
  FILE* p = popen(command, "r");
  if (p == NULL) return NULL;
  size_t cap = 1 << 16, used = 0;
  char* out = malloc(cap);
  if (out == NULL) {
    pclose(p);
    return NULL;
  }
  size_t n;
  while ((n = fread(out + used, 1, cap - 1 - used, p)) > 0) {
    used += n;
    if (used == cap - 1) break;
  }
  out[used] = '\0';
  if (pclose(p) != 0) {
    free(out);
    return NULL;
  }
  return out;
}

static void Hex(const uint8_t* bytes, size_t n, char* out) {
  static const char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

static int Unhex(const char* hex, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 0;
    out[i] = (uint8_t)v;
  }
  return 1;
}

static char g_signature[512];

static void TestKeysEqualCli(void) {
  size_t len = 0;
  CHECK_RC(kvtier_layout_signature("tiny", g_signature, sizeof(g_signature), &len), KVTIER_OK, "");
  CHECK(len == strlen(g_signature) && len > 0);
  char small[8];
  CHECK_RC(kvtier_layout_signature("tiny", small, sizeof(small), &len), KVTIER_E_BUFFER_TOO_SMALL,
           "needs");
  CHECK(len == strlen(g_signature));

  /* 10 tokens, 4 per block: two keys, two tokens left over. */
  const uint32_t tokens[] = {7, 1, 2, 3, 4, 5, 6, 70000, 8, 9};
  uint8_t keys[2 * 32];
  size_t n_keys = 99;
  CHECK_RC(kvtier_block_keys("c-test-model", g_signature, 4, tokens, 10, keys, &n_keys), KVTIER_OK,
           "");
  CHECK(n_keys == 2);

  char command[1024];
  snprintf(command, sizeof(command),
           "'%s' key --model c-test-model --signature '%s' --block-tokens 4 "
           "--tokens 7,1,2,3,4,5,6,70000,8,9 --json",
           Cli(), g_signature);
  char* out = RunCommand(command);
  CHECK(out != NULL);
  if (out == NULL) return;
  for (size_t i = 0; i < n_keys; ++i) {
    char hex[65];
    Hex(keys + 32 * i, 32, hex);
    CHECK(strstr(out, hex) != NULL);
  }
  free(out);

  /* Fewer tokens than a block: no keys, keys_out may be NULL. */
  CHECK_RC(kvtier_block_keys("c-test-model", g_signature, 4, tokens, 3, NULL, &n_keys), KVTIER_OK,
           "");
  CHECK(n_keys == 0);
  CHECK_RC(kvtier_block_keys("c-test-model", g_signature, 0, tokens, 10, keys, &n_keys),
           KVTIER_E_INVALID_ARGUMENT, "block_tokens");
}

struct Block {
  uint8_t key[32];
  uint8_t* bytes;
  size_t len;
};

static struct Block g_blocks[kMaxBlocks];
/* Differs per run, so that the keys are new to a shared Redis server. */
static long g_seed = 11;
static size_t g_num_blocks = 0;

static int CompareBlocks(const void* a, const void* b) {
  return memcmp(((const struct Block*)a)->key, ((const struct Block*)b)->key, 32);
}

/* Makes block files with `kvtier synth --out` and reads them in. Their order
 * in the chain is not needed here, so they are sorted by key. */
static void MakeBlocks(const char* dir) {
  char command[1024];
  snprintf(command, sizeof(command),
           "'%s' synth --layout tiny --random 128 --seed %ld --out '%s/files' --json", Cli(),
           g_seed, dir);
  char* out = RunCommand(command);
  CHECK(out != NULL);
  free(out);
  char path[1024];
  snprintf(path, sizeof(path), "%s/files", dir);
  DIR* d = opendir(path);
  CHECK(d != NULL);
  if (d == NULL) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && g_num_blocks < kMaxBlocks) {
    if (strlen(e->d_name) != 64 + strlen(".safetensors")) continue;
    struct Block* b = &g_blocks[g_num_blocks];
    if (!Unhex(e->d_name, b->key, 32)) continue;
    char file[sizeof(path) + sizeof(e->d_name) + 2];
    snprintf(file, sizeof(file), "%s/%s", path, e->d_name);
    FILE* f = fopen(file, "rb");
    CHECK(f != NULL);
    if (f == NULL) continue;
    b->bytes = malloc(kMaxBlockBytes);
    b->len = fread(b->bytes, 1, kMaxBlockBytes, f);
    fclose(f);
    CHECK(b->len > 0 && b->len < kMaxBlockBytes);
    ++g_num_blocks;
  }
  closedir(d);
  qsort(g_blocks, g_num_blocks, sizeof(g_blocks[0]), CompareBlocks);
}

/* Reads the unsigned integer after "\"name\": " in a JSON text; -1 if absent. */
static long long JsonCount(const char* json, const char* name) {
  char pattern[128];
  snprintf(pattern, sizeof(pattern), "\"%s\":", name);
  const char* p = strstr(json, pattern);
  if (p == NULL) return -1;
  return strtoll(p + strlen(pattern), NULL, 10);
}

static long long StatsCount(kvtier_cache* cache, const char* name) {
  static char json[1 << 16];
  size_t len = 0;
  if (kvtier_cache_stats_json(cache, json, sizeof(json), &len) != KVTIER_OK) return -2;
  return JsonCount(json, name);
}

/* Two caches ("hosts", no folder shared) on the Redis server of
 * KVTIER_TEST_REDIS_URL (scripts/test starts it): what one stores, the
 * other loads from Redis, then from its own RAM. */
static void TestRemoteShared(void) {
  const char* url = getenv("KVTIER_TEST_REDIS_URL");
  ++g_checks;
  if (url == NULL || url[0] == '\0' || strlen(url) > 512) {
    ++g_failed;
    fprintf(stderr,
            "KVTIER_TEST_REDIS_URL is not set: run through scripts/test, or start servers with "
            "`eval \"$(scripts/redis-servers start DIR)\"` first\n");
    return;
  }
  if (g_num_blocks == 0) return;
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"remote\": \"%s\"}", url);
  kvtier_cache* a = NULL;
  kvtier_cache* b = NULL;
  CHECK_RC(kvtier_cache_open(options, &a), KVTIER_OK, "");
  CHECK_RC(kvtier_cache_open(options, &b), KVTIER_OK, "");
  if (a == NULL || b == NULL) {
    kvtier_cache_close(a);
    kvtier_cache_close(b);
    return;
  }
  uint8_t chain[kMaxBlocks * 32];
  for (size_t i = 0; i < g_num_blocks; ++i) memcpy(chain + 32 * i, g_blocks[i].key, 32);
  size_t matched = 99;
  CHECK_RC(kvtier_cache_match(b, chain, g_num_blocks, &matched), KVTIER_OK, "");
  CHECK(matched == 0);
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK_RC(kvtier_cache_store(a, g_blocks[i].key, g_blocks[i].bytes, g_blocks[i].len), KVTIER_OK,
             "");
  }
  CHECK_RC(kvtier_cache_flush(a), KVTIER_OK, ""); /* waits for the remote queue */
  CHECK(StatsCount(a, "remote_puts_queued") == (long long)g_num_blocks);
  CHECK_RC(kvtier_cache_match(b, chain, g_num_blocks, &matched), KVTIER_OK, "");
  CHECK(matched == g_num_blocks);
  uint8_t* buf = malloc(kMaxBlockBytes);
  for (int round = 0; round < 2 && buf != NULL; ++round) {
    for (size_t i = 0; i < g_num_blocks; ++i) {
      size_t len = 0;
      memset(buf, 0xAB, kMaxBlockBytes);
      CHECK_RC(kvtier_cache_load(b, g_blocks[i].key, buf, kMaxBlockBytes, &len), KVTIER_OK, "");
      CHECK(len == g_blocks[i].len);
      CHECK(memcmp(buf, g_blocks[i].bytes, g_blocks[i].len) == 0);
    }
  }
  free(buf);
  /* Round 1 from Redis, round 2 from b's RAM (promoted). */
  CHECK(StatsCount(b, "hits_remote") == (long long)g_num_blocks);
  CHECK(StatsCount(b, "hits_host") == (long long)g_num_blocks);
  CHECK(StatsCount(b, "remote_misses") == 0); /* "misses" is also a key of "host" */
  kvtier_cache_close(a);
  kvtier_cache_close(b);
}

static void TestRoundTrip(const char* dir) {
  MakeBlocks(dir);
  CHECK(g_num_blocks == 8); /* 128 random tokens, 16 per block */
  if (g_num_blocks != 8) return;

  /* A host budget of about two blocks: most blocks go down to disk. */
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": %zu, \"disk_dir\": \"%s/cache\", "
           "\"remote\": null}",
           2 * g_blocks[0].len + 100, dir);
  kvtier_cache* cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK_RC(kvtier_cache_store(cache, g_blocks[i].key, g_blocks[i].bytes, g_blocks[i].len),
             KVTIER_OK, "");
  }
  uint8_t chain[kMaxBlocks * 32];
  for (size_t i = 0; i < g_num_blocks; ++i) memcpy(chain + 32 * i, g_blocks[i].key, 32);
  size_t matched = 99;
  CHECK_RC(kvtier_cache_match(cache, chain, g_num_blocks, &matched), KVTIER_OK, "");
  CHECK(matched == g_num_blocks);

  uint8_t* buf = malloc(kMaxBlockBytes);
  for (size_t i = 0; i < g_num_blocks; ++i) {
    size_t len = 0;
    memset(buf, 0xAB, kMaxBlockBytes);
    CHECK_RC(kvtier_cache_load(cache, g_blocks[i].key, buf, kMaxBlockBytes, &len), KVTIER_OK, "");
    CHECK(len == g_blocks[i].len);
    CHECK(memcmp(buf, g_blocks[i].bytes, g_blocks[i].len) == 0);
  }
  const long long host_hits = StatsCount(cache, "hits_host");
  const long long disk_hits = StatsCount(cache, "hits_disk");
  CHECK(host_hits + disk_hits == (long long)g_num_blocks);
  CHECK(disk_hits >= 1);

  /* A miss: 0 and *len = 0. */
  uint8_t absent[32];
  memset(absent, 0x42, sizeof(absent));
  size_t len = 77;
  CHECK_RC(kvtier_cache_load(cache, absent, buf, kMaxBlockBytes, &len), KVTIER_OK, "");
  CHECK(len == 0);
  /* A chain broken at position 3. */
  memcpy(chain + 3 * 32, absent, 32);
  CHECK_RC(kvtier_cache_match(cache, chain, g_num_blocks, &matched), KVTIER_OK, "");
  CHECK(matched == 3);

  /* Too small a buffer: a clear code, not a partial copy reported as OK. */
  len = 77;
  CHECK_RC(kvtier_cache_load(cache, g_blocks[0].key, buf, g_blocks[0].len - 1, &len),
           KVTIER_E_BUFFER_TOO_SMALL, "cap is");
  CHECK(len == g_blocks[0].len); /* the size to allocate */
  len = 0;
  CHECK_RC(kvtier_cache_load(cache, g_blocks[0].key, NULL, 0, &len), KVTIER_E_BUFFER_TOO_SMALL,
           "cap is 0");
  CHECK(len == g_blocks[0].len);

  /* A block stored under another key's name is refused. */
  CHECK_RC(kvtier_cache_store(cache, absent, g_blocks[0].bytes, g_blocks[0].len),
           KVTIER_E_INVALID_ARGUMENT, "kvtier_cache_store");
  /* Garbage bytes are refused too. */
  CHECK_RC(kvtier_cache_store(cache, absent, "not a block file", 16), KVTIER_E_INVALID_ARGUMENT,
           "kvtier_cache_store");

  kvtier_cache_close(cache);

  /* Reopened: every block now comes from disk, byte for byte. */
  cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) {
    free(buf);
    return;
  }
  for (size_t i = 0; i < g_num_blocks; ++i) {
    len = 0;
    CHECK_RC(kvtier_cache_load(cache, g_blocks[i].key, buf, kMaxBlockBytes, &len), KVTIER_OK, "");
    CHECK(len == g_blocks[i].len);
    CHECK(memcmp(buf, g_blocks[i].bytes, g_blocks[i].len) == 0);
  }
  CHECK(StatsCount(cache, "hits_disk") == (long long)g_num_blocks);
  CHECK(StatsCount(cache, "hits_host") == 0);
  CHECK_RC(kvtier_cache_flush(cache), KVTIER_OK, "");
  kvtier_cache_close(cache);

  /* The handle is dead now: calls fail cleanly, close is a no-op. */
  CHECK_RC(kvtier_cache_load(cache, g_blocks[0].key, buf, kMaxBlockBytes, &len),
           KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK_RC(kvtier_cache_store(cache, g_blocks[0].key, g_blocks[0].bytes, g_blocks[0].len),
           KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK_RC(kvtier_cache_match(cache, chain, 1, &matched), KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK_RC(kvtier_cache_flush(cache), KVTIER_E_FAILED_PRECONDITION, "closed");
  kvtier_cache_close(cache);
  kvtier_cache_close(NULL);
  /* A handle that was never opened. */
  CHECK_RC(kvtier_cache_flush((kvtier_cache*)buf), KVTIER_E_FAILED_PRECONDITION, "never opened");
  free(buf);
}

static void TestNullArguments(const char* dir) {
  kvtier_cache* cache = NULL;
  char options[1024];
  snprintf(options, sizeof(options), "{\"layout\": \"tiny\", \"host_bytes\": 1048576}");
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  uint8_t key[32] = {0};
  uint8_t buf[64];
  size_t n = 0;
  const uint32_t tokens[4] = {1, 2, 3, 4};
  CHECK_RC(kvtier_cache_open(NULL, &cache), KVTIER_E_INVALID_ARGUMENT, "options_json is NULL");
  CHECK(cache == NULL); /* *out is reset on failure */
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  CHECK_RC(kvtier_cache_open(options, NULL), KVTIER_E_INVALID_ARGUMENT, "out is NULL");
  CHECK_RC(kvtier_cache_store(cache, NULL, buf, 1), KVTIER_E_INVALID_ARGUMENT, "key is NULL");
  CHECK_RC(kvtier_cache_store(cache, key, NULL, 1), KVTIER_E_INVALID_ARGUMENT, "block is NULL");
  /* A NULL handle is a NULL argument (docs/c-api.md); c_codec_test.c checks
   * every call. */
  CHECK_RC(kvtier_cache_store(NULL, key, buf, 1), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
  CHECK_RC(kvtier_cache_match(cache, NULL, 1, &n), KVTIER_E_INVALID_ARGUMENT, "keys is NULL");
  CHECK_RC(kvtier_cache_match(cache, key, 1, NULL), KVTIER_E_INVALID_ARGUMENT, "matched is NULL");
  CHECK_RC(kvtier_cache_match(cache, NULL, 0, &n), KVTIER_OK, "");
  CHECK(n == 0);
  CHECK_RC(kvtier_cache_load(cache, NULL, buf, sizeof(buf), &n), KVTIER_E_INVALID_ARGUMENT,
           "key is NULL");
  CHECK_RC(kvtier_cache_load(cache, key, NULL, sizeof(buf), &n), KVTIER_E_INVALID_ARGUMENT,
           "dst is NULL");
  CHECK_RC(kvtier_cache_load(cache, key, buf, sizeof(buf), NULL), KVTIER_E_INVALID_ARGUMENT,
           "len is NULL");
  CHECK_RC(kvtier_cache_stats_json(cache, NULL, 10, &n), KVTIER_E_INVALID_ARGUMENT, "out is NULL");
  CHECK_RC(kvtier_block_keys(NULL, g_signature, 4, tokens, 4, buf, &n), KVTIER_E_INVALID_ARGUMENT,
           "model is NULL");
  CHECK_RC(kvtier_block_keys("m", NULL, 4, tokens, 4, buf, &n), KVTIER_E_INVALID_ARGUMENT,
           "signature is NULL");
  CHECK_RC(kvtier_block_keys("m", g_signature, 4, NULL, 4, buf, &n), KVTIER_E_INVALID_ARGUMENT,
           "tokens is NULL");
  CHECK_RC(kvtier_block_keys("m", g_signature, 4, tokens, 4, NULL, &n), KVTIER_E_INVALID_ARGUMENT,
           "keys_out is NULL");
  CHECK_RC(kvtier_block_keys("m", g_signature, 4, tokens, 4, buf, NULL), KVTIER_E_INVALID_ARGUMENT,
           "n_keys is NULL");
  CHECK_RC(kvtier_layout_signature(NULL, (char*)buf, sizeof(buf), &n), KVTIER_E_INVALID_ARGUMENT,
           "layout is NULL");
  kvtier_cache_close(cache);
  (void)dir;
}

static void TestBadOptions(const char* dir) {
  static const struct {
    const char* json;
    int code;
    const char* needle;
  } kCases[] = {
      {"", KVTIER_E_INVALID_ARGUMENT, "not valid JSON"},
      {"garbage", KVTIER_E_INVALID_ARGUMENT, "not valid JSON"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024", KVTIER_E_INVALID_ARGUMENT, "not valid JSON"},
      {"[1, 2]", KVTIER_E_INVALID_ARGUMENT, "expected a JSON object"},
      {"{\"host_bytes\": 1024}", KVTIER_E_INVALID_ARGUMENT, "layout: is required"},
      {"{\"layout\": \"tiny\"}", KVTIER_E_INVALID_ARGUMENT, "host_bytes: is required"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"colour\": 1}", KVTIER_E_INVALID_ARGUMENT,
       "unknown option 'colour'"},
      {"{\"layout\": \"tiny\", \"host_bytes\": -1}", KVTIER_E_INVALID_ARGUMENT, "host_bytes"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1.5}", KVTIER_E_INVALID_ARGUMENT, "host_bytes"},
      {"{\"layout\": \"tiny\", \"host_bytes\": \"1024\"}", KVTIER_E_INVALID_ARGUMENT, "host_bytes"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 99999999999999999999999}", KVTIER_E_INVALID_ARGUMENT,
       "host_bytes"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 0}", KVTIER_E_INVALID_ARGUMENT, "host_bytes"},
      {"{\"layout\": 7, \"host_bytes\": 1024}", KVTIER_E_INVALID_ARGUMENT, "layout"},
      {"{\"layout\": \"no-such-preset\", \"host_bytes\": 1024}", KVTIER_E_INVALID_ARGUMENT,
       "layout"},
      {"{\"layout\": \"tiny\", \"layout\": \"tiny\", \"host_bytes\": 1024}",
       KVTIER_E_INVALID_ARGUMENT, "given twice"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"disk_dir\": 5}", KVTIER_E_INVALID_ARGUMENT,
       "disk_dir"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"remote\": \"http://127.0.0.1:1\"}",
       KVTIER_E_INVALID_ARGUMENT, "remote.url"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"remote\": \"\"}", KVTIER_E_INVALID_ARGUMENT,
       "remote"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"remote\": 5}", KVTIER_E_INVALID_ARGUMENT,
       "remote"},
      /* Every option of docs/options.md, checked by the one options table. */
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"disk_max_byte\": 1}",
       KVTIER_E_INVALID_ARGUMENT, "did you mean 'disk_max_bytes'"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"disk_max_bytes\": \"1MiB\"}",
       KVTIER_E_INVALID_ARGUMENT, "disk_max_bytes: needs disk_dir"},
      {"{\"layout\": \"tiny\", \"host_bytes\": \"1 parsec\"}", KVTIER_E_INVALID_ARGUMENT,
       "host_bytes: unknown unit"},
      {"{\"layout\": \"tiny\", \"host_bytes\": \"99999999999TiB\"}", KVTIER_E_INVALID_ARGUMENT,
       "host_bytes: '99999999999TiB' is too large"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"write_policy\": \"sometimes\"}",
       KVTIER_E_INVALID_ARGUMENT, "write_policy: expected write_back | write_through"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"write_policy\": \"write_through\"}",
       KVTIER_E_INVALID_ARGUMENT, "write_policy"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"block_tokens\": -1}",
       KVTIER_E_INVALID_ARGUMENT, "block_tokens"},
      {"{\"layout\": \"tiny\", \"host_bytes\": 1024, \"remote\": \"redis://127.0.0.1:1\", "
       "\"remote_command_timeout\": \"5 days\"}",
       KVTIER_E_INVALID_ARGUMENT, "remote_command_timeout: unknown unit"},
      {"{\"config\": 7}", KVTIER_E_INVALID_ARGUMENT, "config: expected a file path"},
  };
  for (size_t i = 0; i < sizeof(kCases) / sizeof(kCases[0]); ++i) {
    kvtier_cache* cache = (kvtier_cache*)&i;
    CHECK_RC(kvtier_cache_open(kCases[i].json, &cache), kCases[i].code, kCases[i].needle);
    CHECK(cache == NULL);
  }
  /* A layout file that does not exist. */
  char options[1024];
  snprintf(options, sizeof(options), "{\"layout\": \"%s/none.json\", \"host_bytes\": 1024}", dir);
  kvtier_cache* cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_E_NOT_FOUND, "none.json");
  /* A config file that does not exist, and one with a bad option. */
  snprintf(options, sizeof(options), "{\"config\": \"%s/none-config.json\"}", dir);
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_E_NOT_FOUND, "none-config.json");
  char path[700];
  snprintf(path, sizeof(path), "%s/bad-config.json", dir);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (f != NULL) {
    fputs("{\"layout\": \"tiny\", \"host_bytes\": \"1MiB\", \"host_polcy\": \"lru\"}", f);
    fclose(f);
  }
  snprintf(options, sizeof(options), "{\"config\": \"%s\"}", path);
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_E_INVALID_ARGUMENT,
           "did you mean 'host_policy'");
}

/* Options from a config file and the JSON, sizes with units, write-through
 * with fsync durability: a stored block is on disk when store returns. */
static void TestOptionsAndConfig(const char* dir) {
  char path[700];
  snprintf(path, sizeof(path), "%s/config.json", dir);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  fprintf(f,
          "{\"layout\": \"tiny\", \"host_bytes\": \"1MiB\", \"disk_dir\": \"%s/opts-cache\",\n"
          " \"disk_max_bytes\": \"64MiB\", \"disk_durability\": \"fsync\", \"host_policy\": "
          "\"reuse\", \"disk_queue_wait\": \"2s\", \"write_policy\": \"write_back\"}\n",
          dir);
  fclose(f);
  char options[1024];
  /* The member beside "config" wins over the file's write_back. */
  snprintf(options, sizeof(options),
           "{\"config\": \"%s\", \"write_policy\": \"write_through\", \"disk_writer_threads\": 0}",
           path);
  kvtier_cache* cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  CHECK_RC(kvtier_cache_store(cache, g_blocks[0].key, g_blocks[0].bytes, g_blocks[0].len), KVTIER_OK,
           "");
  /* Written through, inline (no writer threads): persisted already. */
  CHECK(StatsCount(cache, "saves_persisted") == 1);
  kvtier_cache_close(cache);
}

/* What the logger callback of TestLogger saw. */
static int g_log_calls = 0;
static int g_log_level = -1;
static char g_log_message[1024];
static void* g_log_ctx = NULL;

static void RecordLog(void* ctx, int level, const char* message) {
  ++g_log_calls;
  g_log_ctx = ctx;
  g_log_level = level;
  snprintf(g_log_message, sizeof(g_log_message), "%s", message);
}

/* kvtier_cache_set_logger: a block file damaged on disk is quarantined when
 * it is read, and the callback hears of it (DESIGN.md §7). */
static void TestLogger(const char* dir) {
  if (g_num_blocks == 0) return;
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": %zu, \"disk_dir\": \"%s/logcache\"}",
           2 * g_blocks[0].len + 100, dir);
  kvtier_cache* cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  CHECK_RC(kvtier_cache_store(cache, g_blocks[0].key, g_blocks[0].bytes, g_blocks[0].len),
           KVTIER_OK, "");
  CHECK_RC(kvtier_cache_flush(cache), KVTIER_OK, "");
  kvtier_cache_close(cache);

  /* One byte of the tensor data flipped: the checksum no longer matches. */
  char hex[65];
  Hex(g_blocks[0].key, 32, hex);
  char path[1200];
  snprintf(path, sizeof(path), "%s/logcache/blocks/%.2s/%s.safetensors", dir, hex, hex);
  FILE* f = fopen(path, "r+b");
  CHECK(f != NULL);
  if (f == NULL) return;
  CHECK(fseek(f, (long)g_blocks[0].len - 1, SEEK_SET) == 0);
  fputc(g_blocks[0].bytes[g_blocks[0].len - 1] ^ 0xFF, f);
  fclose(f);

  cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  int ctx = 7;
  CHECK_RC(kvtier_cache_set_logger(cache, RecordLog, &ctx), KVTIER_OK, "");
  uint8_t* buf = malloc(kMaxBlockBytes);
  size_t len = 77;
  CHECK_RC(kvtier_cache_load(cache, g_blocks[0].key, buf, kMaxBlockBytes, &len), KVTIER_OK, "");
  CHECK(len == 0); /* a damaged block is a miss, never wrong bytes */
  CHECK(g_log_calls == 1);
  CHECK(g_log_ctx == &ctx);
  CHECK(g_log_level == KVTIER_LOG_WARNING);
  CHECK(strstr(g_log_message, "quarantine") != NULL);
  CHECK(strstr(g_log_message, hex) != NULL);
  /* Off again: NULL is accepted. */
  CHECK_RC(kvtier_cache_set_logger(cache, NULL, NULL), KVTIER_OK, "");
  kvtier_cache_close(cache);
  CHECK_RC(kvtier_cache_set_logger(cache, RecordLog, &ctx), KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK(kvtier_cache_set_logger(NULL, RecordLog, &ctx) != KVTIER_OK);
  CHECK(strstr(kvtier_last_error(), "NULL") != NULL);
  free(buf);
}

int main(void) {
  char dir[] = "/tmp/kvtier-c-api-XXXXXX";
  const char* tmp = getenv("TMPDIR");
  char template_path[1024];
  snprintf(template_path, sizeof(template_path), "%s/kvtier-c-api-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  char* made = mkdtemp(template_path);
  if (made == NULL) made = mkdtemp(dir);
  if (made == NULL) {
    perror("mkdtemp");
    return 2;
  }
  CHECK(strcmp(kvtier_version(), "") != 0);
  CHECK(strcmp(kvtier_error_name(KVTIER_E_CORRUPTION), "CORRUPTION") == 0);
  CHECK(strcmp(kvtier_error_name(12345), "UNKNOWN") == 0);
  TestKeysEqualCli();
  g_seed = (long)getpid() * 1000003L + (long)time(NULL);
  TestRoundTrip(made);
  TestLogger(made);
  TestRemoteShared();
  TestNullArguments(made);
  TestBadOptions(made);
  TestOptionsAndConfig(made);
  for (size_t i = 0; i < g_num_blocks; ++i) free(g_blocks[i].bytes);

  char command[1200];
  snprintf(command, sizeof(command), "rm -rf '%s'", made);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", made);
  printf("%d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
