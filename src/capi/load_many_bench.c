/* kvtier_cache_load_many from C against its limits, in the same run.
 *
 * Restores every block of a disk-tier folder (one prefix, e.g. made by
 * `kvtier synth --layout L --random N --cache DIR`) with one
 * kvtier_cache_load_many call into the caller's buffers, and times:
 *
 *   cold    load_many on a freshly opened cache (empty RAM), page cache
 *           dropped first (--drop-caches, root only);
 *   pread   a plain pread loop over the same files on --threads threads
 *           (the disk tier's read threads by default), page cache dropped
 *           the same way;
 *   direct  the same files read with O_DIRECT on 16 threads (queue depth
 *           16), page cache dropped the same way. The disk's limit is the
 *           faster of the two loops (as in `kvtier bench pool`);
 *   host    load_many of the same keys again: host hits (the cold load
 *           promoted them), one copy each on the caller's thread;
 *   memcpy  one thread's memcpy of the same bytes from RAM: the host
 *           limit.
 *
 * Prints one line per run and a last line with the medians of each GB/s
 * and of the per-run ratios cold / limit and host / memcpy.
 *
 * Without --drop-caches the figures compare unlike reads: the disk tier
 * reads blocks of 1 MiB or more with O_DIRECT by default (docs/options.md,
 * disk_direct_io_reads), from the device whatever the page cache holds,
 * while the pread loop reads the page cache.
 *
 * --prefault opens the cache with read_buffer_prefault_bytes (and a read
 * buffer pool) of the folder's size: the cold load reads into buffers
 * faulted in at open instead of paying a page fault per fresh page.
 *
 *   build/release/load_many_c_bench --layout qwen2.5-0.5b --dir DIR --drop-caches
 *
 * Needs only kvtier_c.h and libkvtier_c. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "kvtier/kvtier_c.h"

#define MAX_RUNS 16

typedef struct {
  char** paths;
  uint8_t* keys; /* count × 32 */
  size_t* sizes;
  size_t count;
  size_t cap;
} BlockSet;

static BlockSet g_set;

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void Die(const char* what, int rc) {
  fprintf(stderr, "load_many_c_bench: %s: %s (%s)\n", what, kvtier_error_name(rc),
          kvtier_last_error());
  exit(1);
}

static int HexNibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* Collects <64 hex>.safetensors files: the key is the name. */
static int Visit(const char* path, const struct stat* st, int type, struct FTW* ftw) {
  (void)ftw;
  if (type != FTW_F) return 0;
  const char* name = strrchr(path, '/');
  name = name == NULL ? path : name + 1;
  if (strlen(name) != 64 + strlen(".safetensors") || strcmp(name + 64, ".safetensors") != 0) {
    return 0;
  }
  uint8_t key[32];
  for (int i = 0; i < 32; ++i) {
    const int hi = HexNibble(name[2 * i]), lo = HexNibble(name[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    key[i] = (uint8_t)(hi * 16 + lo);
  }
  if (g_set.count == g_set.cap) {
    g_set.cap = g_set.cap == 0 ? 256 : 2 * g_set.cap;
    g_set.paths = realloc(g_set.paths, g_set.cap * sizeof(char*));
    g_set.keys = realloc(g_set.keys, g_set.cap * 32);
    g_set.sizes = realloc(g_set.sizes, g_set.cap * sizeof(size_t));
    if (g_set.paths == NULL || g_set.keys == NULL || g_set.sizes == NULL) return 1;
  }
  g_set.paths[g_set.count] = strdup(path);
  memcpy(g_set.keys + 32 * g_set.count, key, 32);
  g_set.sizes[g_set.count] = (size_t)st->st_size;
  ++g_set.count;
  return 0;
}

static void DropCaches(void) {
  sync();
  FILE* f = fopen("/proc/sys/vm/drop_caches", "w");
  if (f == NULL || fputs("3", f) < 0 || fclose(f) != 0) {
    fprintf(stderr, "load_many_c_bench: --drop-caches: cannot write /proc/sys/vm/drop_caches "
                    "(needs root)\n");
    exit(1);
  }
}

typedef struct {
  size_t first, step;
  uint8_t* buf;
  int direct;
  int failed;
} PreadJob;

#define DIRECT_DEPTH 16
#define DIRECT_ALIGN 4096

static void* PreadThread(void* arg) {
  PreadJob* job = arg;
  for (size_t i = job->first; i < g_set.count; i += job->step) {
    const int fd = open(g_set.paths[i], O_RDONLY | O_CLOEXEC | (job->direct ? O_DIRECT : 0));
    if (fd < 0) {
      job->failed = 1;
      return NULL;
    }
    /* O_DIRECT reads whole pages: the last one comes back short at the
     * file's end. */
    const size_t want = job->direct
                            ? (g_set.sizes[i] + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN
                            : g_set.sizes[i];
    size_t done = 0;
    while (done < g_set.sizes[i]) {
      const ssize_t n = pread(fd, job->buf + done, want - done, (off_t)done);
      if (n <= 0) {
        job->failed = 1;
        break;
      }
      done += (size_t)n;
    }
    close(fd);
  }
  return NULL;
}

/* Seconds for `threads` threads to pread every file whole into one reused
 * buffer each, with O_DIRECT if `direct`. */
static double PreadLoop(int threads, size_t largest, int direct) {
  PreadJob jobs[64];
  pthread_t tids[64];
  const size_t room = (largest + DIRECT_ALIGN - 1) / DIRECT_ALIGN * DIRECT_ALIGN;
  for (int t = 0; t < threads; ++t) {
    jobs[t].first = (size_t)t;
    jobs[t].step = (size_t)threads;
    jobs[t].direct = direct;
    jobs[t].failed = 0;
    void* buf = NULL;
    if (posix_memalign(&buf, DIRECT_ALIGN, room) != 0) exit(1);
    jobs[t].buf = buf;
    memset(jobs[t].buf, 0, room); /* faulted in before the clock starts */
  }
  const double t0 = Now();
  for (int t = 0; t < threads; ++t) pthread_create(&tids[t], NULL, PreadThread, &jobs[t]);
  for (int t = 0; t < threads; ++t) pthread_join(tids[t], NULL);
  const double s = Now() - t0;
  for (int t = 0; t < threads; ++t) {
    if (jobs[t].failed) {
      fprintf(stderr, "load_many_c_bench: %s loop failed\n", direct ? "O_DIRECT" : "pread");
      exit(1);
    }
    free(jobs[t].buf);
  }
  return s;
}

static int CompareDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double Median(const double* v, int n) {
  double tmp[MAX_RUNS];
  memcpy(tmp, v, (size_t)n * sizeof(double));
  qsort(tmp, (size_t)n, sizeof(double), CompareDouble);
  return n % 2 == 1 ? tmp[n / 2] : (tmp[n / 2 - 1] + tmp[n / 2]) / 2;
}

/* One load_many of every key; checks every block was served. */
static double LoadAll(kvtier_cache* c, void* const* dsts, size_t* lens) {
  const double t0 = Now();
  const int rc = kvtier_cache_load_many(c, g_set.keys, g_set.count, dsts, g_set.sizes, lens);
  const double s = Now() - t0;
  if (rc != KVTIER_OK) Die("kvtier_cache_load_many", rc);
  for (size_t i = 0; i < g_set.count; ++i) {
    if (lens[i] != g_set.sizes[i]) {
      fprintf(stderr, "load_many_c_bench: block %zu: %zu bytes, its file has %zu\n", i, lens[i],
              g_set.sizes[i]);
      exit(1);
    }
  }
  return s;
}

int main(int argc, char** argv) {
  const char* layout = NULL;
  const char* dir = NULL;
  int runs = 3, threads = 4, drop = 0, prefault = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "--layout") == 0 && i + 1 < argc) {
      layout = argv[++i];
    } else if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir = argv[++i];
    } else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc) {
      runs = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--threads") == 0 && i + 1 < argc) {
      threads = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--drop-caches") == 0) {
      drop = 1;
    } else if (strcmp(argv[i], "--prefault") == 0) {
      prefault = 1;
    } else {
      fprintf(stderr,
              "usage: %s --layout L --dir DIR [--runs N (1..16)] [--threads T (1..64)] "
              "[--drop-caches] [--prefault]\n",
              argv[0]);
      return 2;
    }
  }
  if (layout == NULL || dir == NULL || runs < 1 || runs > MAX_RUNS || threads < 1 ||
      threads > 64) {
    fprintf(stderr, "load_many_c_bench: --layout and --dir are required (see --help)\n");
    return 2;
  }
  char blocks_dir[4096];
  snprintf(blocks_dir, sizeof(blocks_dir), "%s/blocks", dir);
  if (nftw(blocks_dir, Visit, 16, FTW_PHYS) != 0 || g_set.count == 0) {
    fprintf(stderr, "load_many_c_bench: no block files under %s\n", blocks_dir);
    return 1;
  }
  size_t total = 0, largest = 0;
  for (size_t i = 0; i < g_set.count; ++i) {
    total += g_set.sizes[i];
    if (g_set.sizes[i] > largest) largest = g_set.sizes[i];
  }
  /* The caller's buffers (an engine's KV staging memory), faulted in once. */
  uint8_t* arena = malloc(total);
  uint8_t* copy = malloc(total);
  void** dsts = malloc(g_set.count * sizeof(void*));
  size_t* lens = malloc(g_set.count * sizeof(size_t));
  if (arena == NULL || copy == NULL || dsts == NULL || lens == NULL) return 1;
  memset(arena, 1, total);
  memset(copy, 1, total);
  size_t off = 0;
  for (size_t i = 0; i < g_set.count; ++i) {
    dsts[i] = arena + off;
    off += g_set.sizes[i];
  }
  char options[8192];
  if (prefault) {
    /* The pool has room for every block's buffer, whatever its rounding. */
    snprintf(options, sizeof(options),
             "{\"layout\": \"%s\", \"host_bytes\": %zu, \"disk_dir\": \"%s\", "
             "\"read_buffer_pool_bytes\": %zu, \"read_buffer_prefault_bytes\": %zu}",
             layout, 2 * total + ((size_t)64 << 20), dir, total + (g_set.count << 20), total);
  } else {
    snprintf(options, sizeof(options),
             "{\"layout\": \"%s\", \"host_bytes\": %zu, \"disk_dir\": \"%s\"}", layout,
             2 * total + ((size_t)64 << 20), dir);
  }

  double cold[MAX_RUNS], raw[MAX_RUNS], direct[MAX_RUNS], host[MAX_RUNS], mem[MAX_RUNS];
  double cold_ratio[MAX_RUNS], host_ratio[MAX_RUNS];
  const double gb = (double)total / 1e9;
  printf("layout %s: %zu blocks, %.1f MB, pread threads %d, %s, %s\n", layout, g_set.count,
         total / 1e6, threads, drop ? "cold page cache" : "page cache NOT dropped (pass --drop-caches)",
         prefault ? "read buffers prefaulted" : "fresh read buffers");
  for (int r = 0; r < runs; ++r) {
    if (drop) DropCaches();
    raw[r] = gb / PreadLoop(threads, largest, 0);
    if (drop) DropCaches();
    direct[r] = gb / PreadLoop(DIRECT_DEPTH, largest, 1);
    const double limit = raw[r] > direct[r] ? raw[r] : direct[r];
    kvtier_cache* c = NULL;
    int rc = kvtier_cache_open(options, &c);
    if (rc != KVTIER_OK) Die("kvtier_cache_open", rc);
    if (drop) DropCaches();
    cold[r] = gb / LoadAll(c, dsts, lens);
    host[r] = gb / LoadAll(c, dsts, lens);
    const double t0 = Now();
    memcpy(copy, arena, total);
    mem[r] = gb / (Now() - t0);
    kvtier_cache_close(c);
    cold_ratio[r] = cold[r] / limit;
    host_ratio[r] = host[r] / mem[r];
    printf(
        "run %d: cold %.2f GB/s  pread %.2f GB/s  O_DIRECT %.2f GB/s  (%.2fx the faster)   "
        "host %.2f GB/s  memcpy %.2f GB/s  (%.2fx)\n",
        r + 1, cold[r], raw[r], direct[r], cold_ratio[r], host[r], mem[r], host_ratio[r]);
  }
  const double mc = Median(cold, runs), mr = Median(raw, runs), mh = Median(host, runs),
               mm = Median(mem, runs);
  printf(
      "median of %d: cold %.2f GB/s  pread %.2f GB/s  O_DIRECT %.2f GB/s  cold/limit %.2f   "
      "host %.2f GB/s  memcpy %.2f GB/s  host/memcpy %.2f\n",
      runs, mc, mr, Median(direct, runs), Median(cold_ratio, runs), mh, mm,
      Median(host_ratio, runs));
  return 0;
}
