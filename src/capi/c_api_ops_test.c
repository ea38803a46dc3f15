/* Tests of kvtier_cache_load_many, _contains, _erase, _clear and _prometheus
 * through libkvtier_c.so only: per tier (RAM and disk, a folder shared by
 * two caches as two processes share it, Redis).
 *
 * Needs the kvtier CLI (KVTIER_CLI, set by ctest: `kvtier synth --out`
 * makes the block files) and a Redis server (KVTIER_TEST_REDIS_URL, which
 * scripts/test exports). Prints "N checks, M failed" and exits non-zero on
 * any failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvtier_c.h"

#include "c_test_check.h"

enum { kBlocks = 8, kMaxBlockBytes = 1 << 16 };

struct Block {
  uint8_t key[32];
  uint8_t* bytes;
  size_t len;
};

static struct Block g_blocks[kBlocks];
static size_t g_num_blocks = 0;
static uint8_t g_keys[kBlocks * 32];

static int Unhex(const char* hex, uint8_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    unsigned v;
    if (sscanf(hex + 2 * i, "%2x", &v) != 1) return 0;
    out[i] = (uint8_t)v;
  }
  return 1;
}

/* Makes 8 tiny block files with `kvtier synth --out` (a seed of this run's
 * own, so the keys are new to a shared Redis server) and reads them in. */
static void MakeBlocks(const char* dir) {
  const char* cli = getenv("KVTIER_CLI");
  if (cli == NULL || cli[0] == '\0') {
    fprintf(stderr, "KVTIER_CLI is not set (run through ctest)\n");
    exit(2);
  }
  const long seed = (long)getpid() * 1000003L + (long)time(NULL);
  char command[2048];
  snprintf(command, sizeof(command),
           "'%s' synth --layout tiny --random 128 --seed %ld --out '%s/files' --json >/dev/null",
           cli, seed, dir);
  CHECK(system(command) == 0);
  char path[1024];
  snprintf(path, sizeof(path), "%s/files", dir);
  DIR* d = opendir(path);
  CHECK(d != NULL);
  if (d == NULL) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && g_num_blocks < kBlocks) {
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
    memcpy(g_keys + 32 * g_num_blocks, b->key, 32);
    ++g_num_blocks;
  }
  closedir(d);
}

static kvtier_cache* Open(const char* options) {
  kvtier_cache* c = NULL;
  CHECK_RC(kvtier_cache_open(options, &c), KVTIER_OK, "");
  return c;
}

static void StoreAll(kvtier_cache* c) {
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK_RC(kvtier_cache_store(c, g_blocks[i].key, g_blocks[i].bytes, g_blocks[i].len), KVTIER_OK,
             "");
  }
  CHECK_RC(kvtier_cache_flush(c), KVTIER_OK, "");
}

static int TierOf(kvtier_cache* c, size_t i) {
  int tier = -1;
  CHECK_RC(kvtier_cache_contains(c, g_blocks[i].key, &tier), KVTIER_OK, "");
  return tier;
}

/* The families of Prometheus text (format 0.0.4), or -1 (printing the
 * line) at the first that breaks how kvtier writes it: each `# TYPE NAME`
 * line right after `# HELP NAME TEXT` of the same family, TEXT not empty and
 * escaping only \\ and \n, and every other line a sample. A newline inside
 * a help text leaves a line between the two: -1. */
static int PrometheusFamilies(const char* text) {
  int families = 0;
  const char* help = NULL; /* the line before, if a HELP line */
  size_t help_name = 0;    /* the length of its name */
  for (const char* line = text; *line != '\0';) {
    const char* end = strchr(line, '\n');
    if (end == NULL) {
      fprintf(stderr, "Prometheus text without a final newline\n");
      return -1;
    }
    const size_t len = (size_t)(end - line);
    const int is_help = len > 7 && strncmp(line, "# HELP ", 7) == 0;
    const int is_type = len > 7 && strncmp(line, "# TYPE ", 7) == 0;
    int ok = 1;
    if (help != NULL) {
      ok = is_type && strncmp(line + 7, help + 7, help_name + 1) == 0 && line[7 + help_name] == ' ';
      if (ok) ++families;
      help = NULL;
    } else if (is_help) {
      help_name = strcspn(line + 7, " \n");
      const char* t = line + 7 + help_name;
      ok = help_name > 0 && t < end && t + 1 < end; /* a space, then some text */
      for (t = t + 1; ok && t < end; ++t) {
        if (*t == '\\') ok = ++t < end && (*t == '\\' || *t == 'n');
      }
      help = line;
    } else {
      ok = len > 0 && line[0] != '#'; /* a TYPE without its HELP, a blank line */
    }
    if (!ok) {
      fprintf(stderr, "Prometheus text: line breaks the HELP/TYPE rule: %.*s\n", (int)len, line);
      return -1;
    }
    line = end + 1;
  }
  return help == NULL ? families : -1;
}

/* kvtier_cache_prometheus of `c`: every family well formed, and as many
 * as `want`. */
static void CheckPrometheus(kvtier_cache* c, int want) {
  size_t len = 0;
  CHECK_RC(kvtier_cache_prometheus(c, NULL, 0, &len), KVTIER_E_BUFFER_TOO_SMALL, "needs");
  char* text = malloc(len + 256);
  CHECK(text != NULL);
  if (text == NULL) return;
  CHECK_RC(kvtier_cache_prometheus(c, text, len + 256, &len), KVTIER_OK, "");
  const int families = PrometheusFamilies(text);
  CHECK(families == want);
  if (families != want) fprintf(stderr, "%d families, want %d\n", families, want);
  free(text);
}

/* load_many of every block (and one miss) into one arena; checks the bytes. */
static void CheckLoadMany(kvtier_cache* c) {
  uint8_t* arena = malloc((kBlocks + 1) * (size_t)kMaxBlockBytes);
  void* dsts[kBlocks + 1];
  size_t caps[kBlocks + 1], lens[kBlocks + 1];
  uint8_t keys[(kBlocks + 1) * 32];
  memcpy(keys, g_keys, 32 * g_num_blocks);
  memset(keys + 32 * g_num_blocks, 0, 32); /* a key no tier holds */
  for (size_t i = 0; i <= g_num_blocks; ++i) {
    dsts[i] = arena + i * (size_t)kMaxBlockBytes;
    caps[i] = kMaxBlockBytes;
    lens[i] = 99;
  }
  CHECK_RC(kvtier_cache_load_many(c, keys, g_num_blocks + 1, dsts, caps, lens), KVTIER_OK, "");
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK(lens[i] == g_blocks[i].len);
    CHECK(memcmp(dsts[i], g_blocks[i].bytes, g_blocks[i].len) == 0);
  }
  CHECK(lens[g_num_blocks] == 0);
  free(arena);
}

/* A cache on dir/folder with RAM for about two blocks: the rest of
 * g_blocks are on disk only once stored. */
static kvtier_cache* OpenSmallRam(const char* dir, const char* folder) {
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": %zu, \"disk_dir\": \"%s/%s\"}",
           2 * g_blocks[0].len + 100, dir, folder);
  return Open(options);
}

static void TestDisk(const char* dir) {
  kvtier_cache* a = OpenSmallRam(dir, "cache");
  kvtier_cache* b = OpenSmallRam(dir, "cache"); /* the same folder: another process's view */
  if (a == NULL || b == NULL) return;
  StoreAll(a);
  int host = 0, disk = 0;
  for (size_t i = 0; i < g_num_blocks; ++i) {
    const int t = TierOf(a, i);
    host += t == KVTIER_TIER_HOST;
    disk += t == KVTIER_TIER_DISK;
    CHECK(TierOf(b, i) == KVTIER_TIER_DISK);
  }
  CHECK(host >= 1 && disk >= 1 && host + disk == (int)g_num_blocks);
  /* Not b: what b loads would stay in b's own RAM, which a cannot clear
   * (another process's memory). */
  CheckLoadMany(a);

  /* Buffers too small: BUFFER_TOO_SMALL naming one of them. */
  uint8_t small[16];
  void* dsts[2] = {small, small};
  size_t caps[2] = {sizeof(small), sizeof(small)};
  size_t lens[2] = {7, 7};
  CHECK_RC(kvtier_cache_load_many(a, g_keys, 2, dsts, caps, lens), KVTIER_E_BUFFER_TOO_SMALL,
           "smaller than the block");
  CHECK(lens[0] == 0 && lens[1] == 0);
  CHECK_RC(kvtier_cache_load_many(a, NULL, 0, NULL, NULL, NULL), KVTIER_OK, "");
  CHECK_RC(kvtier_cache_load_many(a, g_keys, 1, NULL, caps, lens), KVTIER_E_INVALID_ARGUMENT,
           "NULL");

  int erased = -1;
  CHECK_RC(kvtier_cache_erase(a, g_blocks[0].key, &erased), KVTIER_OK, "");
  CHECK(erased == 1);
  CHECK_RC(kvtier_cache_erase(a, g_blocks[0].key, &erased), KVTIER_OK, "");
  CHECK(erased == 0);
  CHECK(TierOf(a, 0) == KVTIER_TIER_NONE);
  CHECK(TierOf(b, 0) == KVTIER_TIER_NONE);
  CHECK_RC(kvtier_cache_clear(a), KVTIER_OK, "");
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK(TierOf(a, i) == KVTIER_TIER_NONE);
    CHECK(TierOf(b, i) == KVTIER_TIER_NONE);
    size_t len = 99;
    CHECK_RC(kvtier_cache_load(b, g_blocks[i].key, NULL, 0, &len), KVTIER_OK, "");
    CHECK(len == 0);
  }

  /* Prometheus text: a size query first, as for kvtier_cache_stats_json. */
  size_t len = 0;
  CHECK_RC(kvtier_cache_prometheus(a, NULL, 0, &len), KVTIER_E_BUFFER_TOO_SMALL, "needs");
  CHECK(len > 0);
  /* Counters may grow a digit between the two calls: room to spare. */
  char* text = malloc(len + 256);
  size_t len2 = 0;
  CHECK_RC(kvtier_cache_prometheus(a, text, len + 256, &len2), KVTIER_OK, "");
  CHECK(len2 > 0 && strlen(text) == len2);
  CHECK(strstr(text, "kvtier_cache_stores") != NULL);
  CHECK(strstr(text, "kvtier_disk_") != NULL);
  free(text);
  /* Every family opens with its HELP: the cache's, the host tier's and its
   * budget's (72), and the disk tier's (37). */
  CheckPrometheus(a, 72 + 37);
  /* ... as PrometheusFamilies tells (the rejected ones print their line). */
  CHECK(PrometheusFamilies("# HELP a x \\\\ \\n\n# TYPE a gauge\na 1\n") == 1);
  CHECK(PrometheusFamilies("# TYPE a gauge\na 1\n") == -1);
  CHECK(PrometheusFamilies("# HELP a two\nlines\n# TYPE a gauge\na 1\n") == -1);
  CHECK(PrometheusFamilies("# HELP a x\\y\n# TYPE a gauge\na 1\n") == -1);
  CHECK(PrometheusFamilies("# HELP a x\n# TYPE b gauge\nb 1\n") == -1);
  CHECK(PrometheusFamilies("# HELP a \n# TYPE a gauge\na 1\n") == -1);

  /* NULL arguments and closed handles. */
  int tier = 5;
  CHECK_RC(kvtier_cache_contains(a, NULL, &tier), KVTIER_E_INVALID_ARGUMENT, "key is NULL");
  CHECK_RC(kvtier_cache_contains(a, g_keys, NULL), KVTIER_E_INVALID_ARGUMENT, "tier is NULL");
  CHECK_RC(kvtier_cache_erase(a, NULL, &erased), KVTIER_E_INVALID_ARGUMENT, "key is NULL");
  CHECK_RC(kvtier_cache_prometheus(a, NULL, 0, NULL), KVTIER_E_INVALID_ARGUMENT, "len is NULL");
  kvtier_cache_close(a);
  kvtier_cache_close(b);
  CHECK_RC(kvtier_cache_contains(a, g_keys, &tier), KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK(tier == KVTIER_TIER_NONE);
  CHECK_RC(kvtier_cache_erase(a, g_keys, NULL), KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK_RC(kvtier_cache_clear(a), KVTIER_E_FAILED_PRECONDITION, "closed");
}

/* The number after "name": in the cache's stats JSON; -1 if absent. */
static long long StatOf(kvtier_cache* c, const char* name) {
  /* The counters move while the cache runs (its background threads count
   * too), so the text can grow between the size query and the copy: ask
   * again with the larger size, as docs/c-api.md tells callers to. */
  size_t len = 0;
  if (kvtier_cache_stats_json(c, NULL, 0, &len) != KVTIER_E_BUFFER_TOO_SMALL) return -1;
  long long v = -1;
  char needle[128];
  snprintf(needle, sizeof(needle), "\"%s\":", name);
  for (int attempt = 0; attempt < 8; ++attempt) {
    char* json = malloc(len + 1);
    if (json == NULL) return -1;
    int rc = kvtier_cache_stats_json(c, json, len + 1, &len);
    if (rc == KVTIER_OK) {
      const char* at = strstr(json, needle);
      if (at != NULL) v = strtoll(at + strlen(needle), NULL, 10);
    }
    free(json);
    if (rc != KVTIER_E_BUFFER_TOO_SMALL) break;
  }
  return v;
}

/* read_buffer_prefault_bytes: buffers for every block (tiny: 4096 data
 * bytes each) faulted in at open; the cold load_many reads into them. */
static void TestPrefault(const char* dir) {
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"disk_dir\": \"%s/prefault\"}",
           dir);
  kvtier_cache* c = Open(options);
  if (c == NULL) return;
  StoreAll(c);
  CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"disk_dir\": \"%s/prefault\", "
           "\"read_buffer_prefault_bytes\": %zu}",
           dir, g_num_blocks * (size_t)4096);
  c = Open(options);
  if (c == NULL) return;
  CHECK(StatOf(c, "read_buffers_prefaulted") == (long long)g_num_blocks);
  CheckLoadMany(c);
  CHECK(StatOf(c, "hits_disk") == (long long)g_num_blocks);
  CHECK(StatOf(c, "read_buffers_reused") == (long long)g_num_blocks);
  CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
  kvtier_cache* bad = NULL;
  CHECK_RC(kvtier_cache_open("{\"layout\": \"tiny\", \"host_bytes\": 1048576, "
                             "\"read_buffer_pool_bytes\": \"1MiB\", "
                             "\"read_buffer_prefault_bytes\": \"2MiB\"}",
                             &bad),
           KVTIER_E_INVALID_ARGUMENT, "raise read_buffer_pool_bytes too");
}

static void TestRemote(void) {
  const char* url = getenv("KVTIER_TEST_REDIS_URL");
  ++g_checks;
  if (url == NULL || url[0] == '\0' || strlen(url) > 512) {
    ++g_failed;
    fprintf(stderr,
            "KVTIER_TEST_REDIS_URL is not set: run through scripts/test, or start servers with "
            "`eval \"$(scripts/redis-servers start DIR)\"` first\n");
    return;
  }
  char options[1024];
  /* A prefix of its own: clear() erases every tiny block under its prefix
   * (a scan of Redis), and other tests share the server. */
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"remote\": \"%s\", "
           "\"remote_prefix\": \"c-api-ops-%ld:\"}",
           url, (long)getpid());
  kvtier_cache* a = Open(options);
  kvtier_cache* b = Open(options);
  if (a == NULL || b == NULL) return;
  StoreAll(a);
  for (size_t i = 0; i < g_num_blocks; ++i) {
    CHECK(TierOf(a, i) == KVTIER_TIER_HOST);
    CHECK(TierOf(b, i) == KVTIER_TIER_REMOTE);
  }
  CheckLoadMany(b); /* one pipelined batch from Redis */
  CHECK(TierOf(b, 0) == KVTIER_TIER_HOST); /* promoted */
  /* Every family with its HELP: the cache's (72) and the remote tier's (49). */
  CheckPrometheus(b, 72 + 49);
  int erased = -1;
  CHECK_RC(kvtier_cache_erase(a, g_blocks[0].key, &erased), KVTIER_OK, "");
  CHECK(erased == 1);
  CHECK_RC(kvtier_cache_clear(a), KVTIER_OK, "");
  kvtier_cache* c = Open(options); /* a third host: Redis only */
  if (c != NULL) {
    for (size_t i = 0; i < g_num_blocks; ++i) CHECK(TierOf(c, i) == KVTIER_TIER_NONE);
  }
  CHECK(TierOf(b, 1) == KVTIER_TIER_HOST); /* b's own RAM keeps its copies */
  kvtier_cache_close(a);
  kvtier_cache_close(b);
  kvtier_cache_close(c);
}

/* Writes `text` (made of `prefix`, n × `open`, `middle`, n × `close`,
 * `suffix`) to dir/name and returns the path in `path`. */
static void WriteNested(const char* dir, const char* name, const char* prefix, const char* open,
                        const char* middle, const char* close, const char* suffix, size_t n,
                        char* path, size_t cap) {
  snprintf(path, cap, "%s/%s", dir, name);
  FILE* f = fopen(path, "w");
  CHECK(f != NULL);
  if (f == NULL) return;
  fputs(prefix, f);
  for (size_t i = 0; i < n; ++i) fputs(open, f);
  fputs(middle, f);
  for (size_t i = 0; i < n; ++i) fputs(close, f);
  fputs(suffix, f);
  fclose(f);
}

/* Issue 33 items 6 and 7: 100,000-deep JSON inline, in a config file and in
 * a layout file was a SIGSEGV; a key repeated in a config file was taken
 * (last wins); a block whose data fails its own checksum was stored. */
static void TestHostileInput(const char* dir) {
  enum { kDeep = 100000 };
  const char* kPrefix = "{\"layout\": \"tiny\", \"host_bytes\": ";
  char* inline_json = malloc(strlen(kPrefix) + 2 * kDeep + 2);
  CHECK(inline_json != NULL);
  if (inline_json == NULL) return;
  strcpy(inline_json, kPrefix);
  size_t at = strlen(kPrefix);
  memset(inline_json + at, '[', kDeep);
  memset(inline_json + at + kDeep, ']', kDeep);
  strcpy(inline_json + at + 2 * kDeep, "}");
  kvtier_cache* c = (kvtier_cache*)inline_json;
  CHECK_RC(kvtier_cache_open(inline_json, &c), KVTIER_E_INVALID_ARGUMENT,
           "options_json: nested deeper than 32 levels at byte");
  CHECK(c == NULL);
  free(inline_json);

  char path[700], options[1024];
  WriteNested(dir, "deep-config.json", kPrefix, "{\"a\": ", "1", "}", "}", kDeep, path,
              sizeof(path));
  snprintf(options, sizeof(options), "{\"config\": \"%s\"}", path);
  CHECK_RC(kvtier_cache_open(options, &c), KVTIER_E_INVALID_ARGUMENT,
           "deep-config.json: nested deeper than 32 levels at byte");
  WriteNested(dir, "twice-config.json", "{\"layout\": \"tiny\", \"host_bytes\": \"1MiB\", ", "",
              "\"host_bytes\": \"2MiB\"", "", "}", 0, path, sizeof(path));
  snprintf(options, sizeof(options), "{\"config\": \"%s\"}", path);
  CHECK_RC(kvtier_cache_open(options, &c), KVTIER_E_INVALID_ARGUMENT,
           "twice-config.json: option 'host_bytes' given twice");
  WriteNested(dir, "deep-layout.json", "{\"block_tokens\": 16, \"layers\": ", "[", "", "]", "}",
              kDeep, path, sizeof(path));
  snprintf(options, sizeof(options), "{\"layout\": \"%s\", \"host_bytes\": 1024}", path);
  CHECK_RC(kvtier_cache_open(options, &c), KVTIER_E_INVALID_ARGUMENT,
           "layout JSON: nested deeper than 32 levels");

  kvtier_cache* cache = Open("{\"layout\": \"tiny\", \"host_bytes\": \"1MiB\"}");
  if (cache == NULL) return;
  uint8_t* bad = malloc(g_blocks[0].len);
  CHECK(bad != NULL);
  if (bad != NULL) {
    memcpy(bad, g_blocks[0].bytes, g_blocks[0].len);
    bad[g_blocks[0].len - 1] ^= 1; /* the last data byte */
    CHECK_RC(kvtier_cache_store(cache, g_blocks[0].key, bad, g_blocks[0].len),
             KVTIER_E_INVALID_ARGUMENT, "checksum");
    CHECK(TierOf(cache, 0) == KVTIER_TIER_NONE);
    free(bad);
  }
  CHECK_RC(kvtier_cache_store(cache, g_blocks[0].key, g_blocks[0].bytes, g_blocks[0].len),
           KVTIER_OK, "");
  CHECK(TierOf(cache, 0) == KVTIER_TIER_HOST);
  kvtier_cache_close(cache);
}

/* Issue 31 item 7: a handle used in a forked child fails cleanly naming
 * both processes (a disk load and a flush hung there); close releases it
 * without joining the parent's threads; the parent's cache still works. */
static void TestFork(const char* dir) {
  kvtier_cache* c = OpenSmallRam(dir, "fork-cache");
  if (c == NULL) return;
  StoreAll(c);
  char want[128];
  snprintf(want, sizeof(want), "opened by process %d and process ", (int)getpid());
  fflush(stdout);
  fflush(stderr);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    alarm(120); /* only a hang gets here */
    g_failed = 0;
    uint8_t buf[kMaxBlockBytes];
    size_t len = 99;
    CHECK_RC(kvtier_cache_load(c, g_blocks[kBlocks - 1].key, buf, sizeof(buf), &len),
             KVTIER_E_FAILED_PRECONDITION, want);
    CHECK_RC(kvtier_cache_flush(c), KVTIER_E_FAILED_PRECONDITION, want);
    int tier = -1;
    CHECK_RC(kvtier_cache_contains(c, g_blocks[0].key, &tier), KVTIER_E_FAILED_PRECONDITION,
             "a fork of it");
    CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
    CHECK_RC(kvtier_cache_flush(c), KVTIER_E_FAILED_PRECONDITION, "closed");
    _exit(g_failed == 0 ? 0 : 1);
  }
  int status = 0;
  CHECK(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  uint8_t buf[kMaxBlockBytes];
  for (size_t i = 0; i < g_num_blocks; ++i) {
    size_t len = 0;
    CHECK_RC(kvtier_cache_load(c, g_blocks[i].key, buf, sizeof(buf), &len), KVTIER_OK, "");
    CHECK(len == g_blocks[i].len && memcmp(buf, g_blocks[i].bytes, len) == 0);
  }
  CHECK_RC(kvtier_cache_flush(c), KVTIER_OK, "");
  CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  char template_path[1024];
  snprintf(template_path, sizeof(template_path), "%s/kvtier-c-ops-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  char* made = mkdtemp(template_path);
  if (made == NULL) {
    perror("mkdtemp");
    return 2;
  }
  MakeBlocks(made);
  CHECK(g_num_blocks == kBlocks); /* 128 random tokens, 16 per block */
  if (g_num_blocks == kBlocks) {
    TestDisk(made);
    TestPrefault(made);
    TestHostileInput(made);
    TestFork(made);
    TestRemote();
  }
  for (size_t i = 0; i < g_num_blocks; ++i) free(g_blocks[i].bytes);
  char command[1200];
  snprintf(command, sizeof(command), "rm -rf '%s'", made);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", made);
  printf("%d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
