/* Tests of the C block codec and namespaced keys (include/kvtier/kvtier_c.h)
 * through libkvtier_c.so only: a C program makes blocks with
 * kvtier_block_encode, stores them in a cache, loads them back and verifies
 * them with kvtier_block_decode; bad bytes and bad arguments get their
 * codes, never a crash; two tensor-parallel ranks (shards) share one folder
 * (and the Redis server of KVTIER_TEST_REDIS_URL when set) and never read
 * each other's blocks. KVTIER_CLI (set by ctest) checks the keys against
 * `kvtier key --shard`. Prints "N checks, M failed", exits non-zero on any
 * failure.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kvtier/kvtier_c.h"

#include "c_test_check.h"

/* The tiny preset: 2 layers x (keys, values), each F16[2,16,16]. */
enum { kTensors = 4, kTensorBytes = 2 * 16 * 16 * 2, kBlockTokens = 16, kBlocks = 3 };

static char g_signature[512];

static void Hex(const uint8_t* bytes, size_t n, char* out) {
  static const char kDigits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[bytes[i] >> 4];
    out[2 * i + 1] = kDigits[bytes[i] & 15];
  }
  out[2 * n] = '\0';
}

/* Tensor bytes that differ per (rank, block, tensor). */
static void FillTensors(uint8_t tensors[kTensors][kTensorBytes], int rank, int block) {
  for (int t = 0; t < kTensors; ++t) {
    for (int i = 0; i < kTensorBytes; ++i) {
      tensors[t][i] = (uint8_t)(rank * 97 + block * 31 + t * 7 + i * 13 + (i >> 8));
    }
  }
}

/* The keys of kBlocks blocks of `tokens` under model "codec-test" and a
 * shard ("" = none); the namespace (the first block's parent) into *ns. */
static int KeysFor(const char* shard, const uint32_t* tokens, uint8_t keys[kBlocks][32],
                   uint8_t ns[32]) {
  char json[1024];
  snprintf(json, sizeof(json),
           "{\"model\": \"codec-test\", \"signature\": \"%s\", \"block_tokens\": %d, "
           "\"shard\": \"%s\"}",
           g_signature, kBlockTokens, shard);
  size_t n = 0;
  int rc = kvtier_block_keys_ns(json, tokens, kBlocks * kBlockTokens, &keys[0][0], &n);
  if (rc != KVTIER_OK || n != kBlocks) return 0;
  return kvtier_block_namespace(json, ns) == KVTIER_OK;
}

/* Encodes block `i` of a chain; malloc'ed bytes, size in *len. */
static uint8_t* Encode(uint8_t keys[kBlocks][32], const uint8_t ns[32], int i, int rank,
                       size_t* len) {
  static uint8_t tensors[kTensors][kTensorBytes];
  FillTensors(tensors, rank, i);
  const void* ptrs[kTensors] = {tensors[0], tensors[1], tensors[2], tensors[3]};
  const uint8_t* parent = i == 0 ? ns : keys[i - 1];
  size_t need = 0;
  if (kvtier_block_encode("tiny", keys[i], parent, ns, ptrs, kTensors, NULL, 0, &need) !=
      KVTIER_E_BUFFER_TOO_SMALL) {
    return NULL;
  }
  uint8_t* out = malloc(need);
  if (out == NULL) return NULL;
  if (kvtier_block_encode("tiny", keys[i], parent, ns, ptrs, kTensors, out, need, len) !=
      KVTIER_OK) {
    free(out);
    return NULL;
  }
  return out;
}

/* Decodes `block` and checks every tensor against FillTensors(rank, i). */
static int DecodesAs(const uint8_t* block, size_t len, const uint8_t key[32], int rank, int i) {
  static uint8_t want[kTensors][kTensorBytes];
  FillTensors(want, rank, i);
  size_t offsets[kTensors], lengths[kTensors];
  if (kvtier_block_decode(block, len, "tiny", key, offsets, lengths, kTensors) != KVTIER_OK) {
    return 0;
  }
  for (int t = 0; t < kTensors; ++t) {
    if (lengths[t] != kTensorBytes || offsets[t] + lengths[t] > len) return 0;
    if (memcmp(block + offsets[t], want[t], kTensorBytes) != 0) return 0;
  }
  return 1;
}

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

static void TestEncodeDecode(void) {
  uint32_t tokens[kBlocks * kBlockTokens];
  for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); ++i) tokens[i] = (uint32_t)(i * 7);
  uint8_t keys[kBlocks][32], ns[32];
  CHECK(KeysFor("", tokens, keys, ns));

  static uint8_t tensors[kTensors][kTensorBytes];
  FillTensors(tensors, 0, 0);
  const void* ptrs[kTensors] = {tensors[0], tensors[1], tensors[2], tensors[3]};
  size_t len = 0;
  /* The size query, then too small a buffer, then the block. */
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, kTensors, NULL, 0, &len),
           KVTIER_E_BUFFER_TOO_SMALL, "cap is 0");
  const size_t need = len;
  CHECK(need > kTensors * kTensorBytes && need % 8 == 0);
  uint8_t* block = malloc(need + 8);
  if (block == NULL) return;
  len = 0;
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, kTensors, block, need - 1, &len),
           KVTIER_E_BUFFER_TOO_SMALL, "bytes, cap is");
  CHECK(len == need);
  len = 0;
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, kTensors, block, need + 8, &len),
           KVTIER_OK, "");
  CHECK(len == need);
  CHECK(memcmp(block + 8, "{", 1) == 0); /* safetensors: u64 length, then JSON */

  size_t offsets[kTensors], lengths[kTensors];
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], offsets, lengths, kTensors), KVTIER_OK,
           "");
  for (int t = 0; t < kTensors; ++t) {
    CHECK(lengths[t] == kTensorBytes);
    CHECK(offsets[t] + lengths[t] <= len);
    CHECK(memcmp(block + offsets[t], tensors[t], kTensorBytes) == 0);
    if (t > 0) CHECK(offsets[t] == offsets[t - 1] + lengths[t - 1]); /* contiguous */
  }
  CHECK(offsets[kTensors - 1] + lengths[kTensors - 1] == len); /* data ends the file */
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], NULL, NULL, 0), KVTIER_OK, "");

  /* Bytes that are wrong: always KVTIER_E_CORRUPTION, naming the rule. */
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[1], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "key_mismatch");
  CHECK_RC(kvtier_block_decode(block, len - 1, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "data_truncated");
  CHECK_RC(kvtier_block_decode(block, 7, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "file_too_short");
  CHECK_RC(kvtier_block_decode(block, 0, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "file_too_short");
  CHECK_RC(kvtier_block_decode(block, 100, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "header_past_eof");
  block[len] = 0; /* one byte more than the block */
  CHECK_RC(kvtier_block_decode(block, len + 1, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_CORRUPTION, "trailing_bytes");
  /* Another layout: 24 layers of other shapes. */
  CHECK_RC(kvtier_block_decode(block, len, "qwen2.5-0.5b", keys[0], NULL, NULL, 0),
           KVTIER_E_CORRUPTION, "kvtier_block_decode");
  /* Every single flipped byte, header and data, is caught. */
  int caught = 0;
  for (size_t i = 0; i < len; ++i) {
    block[i] ^= 0xFF;
    if (kvtier_block_decode(block, len, "tiny", keys[0], offsets, lengths, kTensors) ==
        KVTIER_E_CORRUPTION) {
      ++caught;
    } else {
      fprintf(stderr, "flipped byte %zu was not caught\n", i);
    }
    block[i] ^= 0xFF;
  }
  CHECK(caught == (int)len);
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], offsets, lengths, kTensors), KVTIER_OK,
           "");

  /* Bad arguments: KVTIER_E_INVALID_ARGUMENT naming the argument. */
  CHECK_RC(kvtier_block_decode(NULL, len, "tiny", keys[0], offsets, lengths, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "block is NULL");
  CHECK_RC(kvtier_block_decode(NULL, 0, "tiny", keys[0], NULL, NULL, 0), KVTIER_E_INVALID_ARGUMENT,
           "block is NULL");
  CHECK_RC(kvtier_block_decode(block, len, NULL, keys[0], offsets, lengths, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "layout is NULL");
  CHECK_RC(kvtier_block_decode(block, len, "tiny", NULL, offsets, lengths, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "key is NULL");
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], NULL, lengths, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "offsets is NULL");
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], offsets, NULL, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "lengths is NULL");
  CHECK_RC(kvtier_block_decode(block, len, "tiny", keys[0], offsets, lengths, 3),
           KVTIER_E_INVALID_ARGUMENT, "the layout has 4 tensors");
  CHECK_RC(kvtier_block_decode(block, len, "no-such-layout", keys[0], offsets, lengths, kTensors),
           KVTIER_E_INVALID_ARGUMENT, "layout");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, 5, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "the layout has 4 tensors");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, NULL, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "tensors is NULL");
  const void* holes[kTensors] = {tensors[0], NULL, tensors[2], tensors[3]};
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, holes, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "tensors[1] (layer_0_state_1) is NULL");
  CHECK_RC(kvtier_block_encode(NULL, keys[0], ns, ns, ptrs, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "layout is NULL");
  CHECK_RC(kvtier_block_encode("tiny", NULL, ns, ns, ptrs, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "key is NULL");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], NULL, ns, ptrs, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "parent is NULL");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, NULL, ptrs, kTensors, NULL, 0, &len),
           KVTIER_E_INVALID_ARGUMENT, "ns is NULL");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, kTensors, NULL, 10, &len),
           KVTIER_E_INVALID_ARGUMENT, "dst is NULL");
  CHECK_RC(kvtier_block_encode("tiny", keys[0], ns, ns, ptrs, kTensors, block, need, NULL),
           KVTIER_E_INVALID_ARGUMENT, "len is NULL");
  CHECK_RC(kvtier_block_encode("nope", keys[0], ns, ns, ptrs, kTensors, block, need, &len),
           KVTIER_E_INVALID_ARGUMENT, "layout");
  free(block);
}

/* Make, store, load (after a size query that is not a hit), decode. */
static void TestStoreLoadDecode(const char* dir) {
  uint32_t tokens[kBlocks * kBlockTokens];
  for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); ++i) tokens[i] = (uint32_t)(i + 3);
  uint8_t keys[kBlocks][32], ns[32];
  CHECK(KeysFor("", tokens, keys, ns));
  char options[1024];
  snprintf(options, sizeof(options),
           "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"disk_dir\": \"%s/one\"}", dir);
  kvtier_cache* cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  for (int i = 0; i < kBlocks; ++i) {
    size_t len = 0;
    uint8_t* block = Encode(keys, ns, i, 0, &len);
    CHECK(block != NULL);
    if (block == NULL) continue;
    CHECK_RC(kvtier_cache_store(cache, keys[i], block, len), KVTIER_OK, "");
    free(block);
  }
  CHECK_RC(kvtier_cache_close(cache), KVTIER_OK, "");
  /* Closed: close again is FAILED_PRECONDITION; NULL is INVALID_ARGUMENT. */
  CHECK_RC(kvtier_cache_close(cache), KVTIER_E_FAILED_PRECONDITION, "closed");
  CHECK_RC(kvtier_cache_close(NULL), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");

  /* Reopened: from disk. */
  cache = NULL;
  CHECK_RC(kvtier_cache_open(options, &cache), KVTIER_OK, "");
  if (cache == NULL) return;
  for (int i = 0; i < kBlocks; ++i) {
    size_t len = 0;
    CHECK_RC(kvtier_cache_load(cache, keys[i], NULL, 0, &len), KVTIER_E_BUFFER_TOO_SMALL,
             "cap is 0");
    CHECK(len > 0);
    /* A size query is no lookup and no hit. */
    CHECK(StatsCount(cache, "lookups") == i);
    CHECK(StatsCount(cache, "hits_disk") + StatsCount(cache, "hits_host") == i);
    uint8_t* buf = malloc(len);
    if (buf == NULL) continue;
    size_t got = 0;
    CHECK_RC(kvtier_cache_load(cache, keys[i], buf, len, &got), KVTIER_OK, "");
    CHECK(got == len);
    CHECK(StatsCount(cache, "lookups") == i + 1);
    CHECK(StatsCount(cache, "hits_disk") + StatsCount(cache, "hits_host") == i + 1);
    CHECK(DecodesAs(buf, got, keys[i], 0, i));
    /* Loaded under one key, it is not another key's block. */
    CHECK(!DecodesAs(buf, got, keys[(i + 1) % kBlocks], 0, i));
    free(buf);
  }
  /* A size query for a block nobody stored: a miss, not counted either. */
  uint8_t absent[32];
  memset(absent, 0x77, sizeof(absent));
  size_t len = 99;
  CHECK_RC(kvtier_cache_load(cache, absent, NULL, 0, &len), KVTIER_OK, "");
  CHECK(len == 0);
  CHECK(StatsCount(cache, "lookups") == kBlocks);
  CHECK_RC(kvtier_cache_close(cache), KVTIER_OK, "");
}

/* A NULL handle is INVALID_ARGUMENT in every call that takes one. */
static void TestNullHandle(void) {
  uint8_t key[32] = {0};
  uint8_t buf[64] = {0};
  size_t n = 0;
  char text[64];
  CHECK_RC(kvtier_cache_store(NULL, key, buf, 1), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
  CHECK_RC(kvtier_cache_match(NULL, key, 1, &n), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
  CHECK_RC(kvtier_cache_load(NULL, key, buf, sizeof(buf), &n), KVTIER_E_INVALID_ARGUMENT,
           "cache is NULL");
  CHECK_RC(kvtier_cache_load(NULL, key, NULL, 0, &n), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
  CHECK_RC(kvtier_cache_flush(NULL), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
  CHECK_RC(kvtier_cache_stats_json(NULL, text, sizeof(text), &n), KVTIER_E_INVALID_ARGUMENT,
           "cache is NULL");
  CHECK_RC(kvtier_cache_close(NULL), KVTIER_E_INVALID_ARGUMENT, "cache is NULL");
}

static void TestKeysNs(void) {
  const uint32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint8_t a[2 * 32], b[2 * 32];
  size_t n = 0;
  /* Only the required fields: the same keys as kvtier_block_keys. */
  CHECK_RC(kvtier_block_keys("m", "s", 4, tokens, 8, a, &n), KVTIER_OK, "");
  CHECK_RC(kvtier_block_keys_ns("{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4}",
                                tokens, 8, b, &n),
           KVTIER_OK, "");
  CHECK(n == 2 && memcmp(a, b, sizeof(a)) == 0);
  /* Empty optional fields are no fields. */
  CHECK_RC(kvtier_block_keys_ns("{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, "
                                "\"salt_hex\": \"\", \"adapter\": \"\", \"extra_hex\": \"\", "
                                "\"shard\": \"\"}",
                                tokens, 8, b, &n),
           KVTIER_OK, "");
  CHECK(n == 2 && memcmp(a, b, sizeof(a)) == 0);
  /* docs/block-key.md, vector "basic": the namespace. */
  uint8_t ns[32];
  char hex[65];
  CHECK_RC(
      kvtier_block_namespace("{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4}", ns),
      KVTIER_OK, "");
  Hex(ns, 32, hex);
  CHECK(strcmp(hex, "99a4a7d4c66439b08508fe76879688e05f734e84da91e625cfc891e65c2186e0") == 0);
  CHECK_RC(kvtier_block_namespace(NULL, ns), KVTIER_E_INVALID_ARGUMENT, "namespace_json is NULL");
  CHECK_RC(
      kvtier_block_namespace("{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4}", NULL),
      KVTIER_E_INVALID_ARGUMENT, "ns_out is NULL");
  CHECK_RC(kvtier_block_namespace("{\"model\": \"m\"}", ns), KVTIER_E_INVALID_ARGUMENT,
           "signature: is required");
  /* docs/block-key.md, vector "shard-tp" (tests/block_key_vectors.py). */
  CHECK_RC(
      kvtier_block_keys_ns(
          "{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"shard\": \"tp=1/2\"}",
          tokens, 8, b, &n),
      KVTIER_OK, "");
  Hex(b + 32, 32, hex);
  CHECK(strcmp(hex, "a532a079157b9c962606fa431d5200a600b22951a3a7c3ecd361b248e4048e12") == 0);
  /* Vector "shard-mla-pp": salt "tenant-42" as hex. */
  CHECK_RC(kvtier_block_keys_ns("{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, "
                                "\"salt_hex\": \"74656E616E742D3432\", \"shard\": \"pp=1/4\"}",
                                tokens, 8, b, &n),
           KVTIER_OK, "");
  Hex(b, 32, hex);
  CHECK(strcmp(hex, "7776ba985bdcbfb756cd7be7e58ed5eac70eacb33022ff12d99ea325dca1e2fa") == 0);

  static const struct {
    const char* json;
    const char* needle;
  } kBad[] = {
      {"", "not valid JSON"},
      {"[]", "expected a JSON object"},
      {"{\"signature\": \"s\", \"block_tokens\": 4}", "model: is required"},
      {"{\"model\": \"m\", \"block_tokens\": 4}", "signature: is required"},
      {"{\"model\": \"m\", \"signature\": \"s\"}", "block_tokens: is required"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 0}", "block_tokens"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": -4}", "block_tokens"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4.0}", "block_tokens"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": \"4\"}", "block_tokens"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4294967296}", "block_tokens"},
      {"{\"model\": \"\", \"signature\": \"s\", \"block_tokens\": 4}",
       "model_id must not be empty"},
      {"{\"model\": 5, \"signature\": \"s\", \"block_tokens\": 4}", "model: expected a string"},
      {"{\"model\": \"m\", \"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4}",
       "given twice"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"salt\": \"x\"}",
       "unknown name 'salt'"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"salt_hex\": \"abc\"}",
       "salt_hex: an odd number"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"extra_hex\": \"zz\"}",
       "extra_hex: not hex"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"shard\": \"tp=0/1\"}",
       "leave it out"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"shard\": "
       "\"pp=0/2;tp=0/2\"}",
       "in the order tp, pp, cp"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"shard\": \"tp=2/2\"}",
       "rank must be < size"},
      {"{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4, \"shard\": 2}",
       "shard: expected a string"},
  };
  for (size_t i = 0; i < sizeof(kBad) / sizeof(kBad[0]); ++i) {
    n = 99;
    CHECK_RC(kvtier_block_keys_ns(kBad[i].json, tokens, 8, b, &n), KVTIER_E_INVALID_ARGUMENT,
             kBad[i].needle);
    CHECK(n == 0);
  }
  CHECK_RC(kvtier_block_keys_ns(NULL, tokens, 8, b, &n), KVTIER_E_INVALID_ARGUMENT,
           "namespace_json is NULL");
  const char* ok = "{\"model\": \"m\", \"signature\": \"s\", \"block_tokens\": 4}";
  CHECK_RC(kvtier_block_keys_ns(ok, NULL, 8, b, &n), KVTIER_E_INVALID_ARGUMENT, "tokens is NULL");
  CHECK_RC(kvtier_block_keys_ns(ok, tokens, 8, NULL, &n), KVTIER_E_INVALID_ARGUMENT,
           "keys_out is NULL");
  CHECK_RC(kvtier_block_keys_ns(ok, tokens, 8, b, NULL), KVTIER_E_INVALID_ARGUMENT,
           "n_keys is NULL");
  CHECK_RC(kvtier_block_keys_ns(ok, tokens, 3, NULL, &n), KVTIER_OK, "");
  CHECK(n == 0);

  /* The same keys as `kvtier key --shard`. */
  const char* cli = getenv("KVTIER_CLI");
  CHECK(cli != NULL && cli[0] != '\0');
  if (cli == NULL || cli[0] == '\0') return;
  char command[1024];
  snprintf(command, sizeof(command),
           "'%s' key --model m --signature '%s' --block-tokens 16 --shard 'tp=3/8;pp=0/2;cp=1/4' "
           "--tokens 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16",
           cli, g_signature);
  FILE* p = popen(command, "r");
  CHECK(p != NULL);
  if (p == NULL) return;
  char line[128] = "";
  CHECK(fgets(line, sizeof(line), p) != NULL);
  CHECK(pclose(p) == 0);
  uint32_t sixteen[16];
  for (int i = 0; i < 16; ++i) sixteen[i] = (uint32_t)(i + 1);
  char json[1024];
  snprintf(json, sizeof(json),
           "{\"model\": \"m\", \"signature\": \"%s\", \"block_tokens\": 16, "
           "\"shard\": \"tp=3/8;pp=0/2;cp=1/4\"}",
           g_signature);
  CHECK_RC(kvtier_block_keys_ns(json, sixteen, 16, b, &n), KVTIER_OK, "");
  Hex(b, 32, hex);
  CHECK(n == 1 && strncmp(line, hex, 64) == 0);
}

/* Two tensor-parallel ranks of one model: the same tokens, the same layout,
 * different bytes. They share a disk folder (and Redis when there is one)
 * and each reads only its own blocks. Without a shard they would collide. */
static void TestShardRanksShareAFolder(const char* dir) {
  const char* url = getenv("KVTIER_TEST_REDIS_URL");
  const int with_redis = url != NULL && url[0] != '\0' && strlen(url) < 400;
  if (!with_redis) fprintf(stderr, "note: KVTIER_TEST_REDIS_URL is not set: folder only\n");
  uint32_t tokens[kBlocks * kBlockTokens];
  /* New tokens each run, so that the keys are new to a shared Redis. */
  const uint32_t seed = (uint32_t)getpid() * 2654435761u + (uint32_t)time(NULL);
  for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); ++i) {
    tokens[i] = seed + (uint32_t)i;
  }
  static const char* kShards[2] = {"tp=0/2", "tp=1/2"};
  uint8_t keys[2][kBlocks][32], ns[2][32];
  for (int r = 0; r < 2; ++r) CHECK(KeysFor(kShards[r], tokens, keys[r], ns[r]));
  CHECK(memcmp(keys[0], keys[1], sizeof(keys[0])) != 0);
  char options[2 * 1024 + 256];  /* dir and url are at most 1023 bytes each */
  if (with_redis) {
    snprintf(options, sizeof(options),
             "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"disk_dir\": \"%s/shared\", "
             "\"remote\": \"%s\"}",
             dir, url);
  } else {
    snprintf(options, sizeof(options),
             "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"disk_dir\": \"%s/shared\"}", dir);
  }
  kvtier_cache* rank[2] = {NULL, NULL};
  for (int r = 0; r < 2; ++r) CHECK_RC(kvtier_cache_open(options, &rank[r]), KVTIER_OK, "");
  if (rank[0] == NULL || rank[1] == NULL) {
    kvtier_cache_close(rank[0]);
    kvtier_cache_close(rank[1]);
    return;
  }
  /* Rank 0 stores its blocks and flushes them to the folder (and Redis). */
  for (int i = 0; i < kBlocks; ++i) {
    size_t len = 0;
    uint8_t* block = Encode(keys[0], ns[0], i, 0, &len);
    CHECK(block != NULL);
    if (block == NULL) continue;
    CHECK_RC(kvtier_cache_store(rank[0], keys[0][i], block, len), KVTIER_OK, "");
    free(block);
  }
  CHECK_RC(kvtier_cache_flush(rank[0]), KVTIER_OK, "");
  /* Rank 1 asks for the same tokens under its shard: nothing there. */
  size_t matched = 99;
  CHECK_RC(kvtier_cache_match(rank[1], &keys[1][0][0], kBlocks, &matched), KVTIER_OK, "");
  CHECK(matched == 0);
  uint8_t* buf = malloc(1 << 16);
  if (buf == NULL) return;
  for (int i = 0; i < kBlocks; ++i) {
    size_t len = 99;
    CHECK_RC(kvtier_cache_load(rank[1], keys[1][i], buf, 1 << 16, &len), KVTIER_OK, "");
    CHECK(len == 0);
  }
  /* Rank 1 stores its own; then each reads back exactly its own bytes. */
  for (int i = 0; i < kBlocks; ++i) {
    size_t len = 0;
    uint8_t* block = Encode(keys[1], ns[1], i, 1, &len);
    CHECK(block != NULL);
    if (block == NULL) continue;
    CHECK_RC(kvtier_cache_store(rank[1], keys[1][i], block, len), KVTIER_OK, "");
    free(block);
  }
  CHECK_RC(kvtier_cache_flush(rank[1]), KVTIER_OK, "");
  for (int r = 0; r < 2; ++r) CHECK_RC(kvtier_cache_close(rank[r]), KVTIER_OK, "");
  for (int r = 0; r < 2; ++r) {
    /* A fresh process's view: RAM empty, the folder (and Redis) shared. */
    kvtier_cache* c = NULL;
    CHECK_RC(kvtier_cache_open(options, &c), KVTIER_OK, "");
    if (c == NULL) continue;
    CHECK_RC(kvtier_cache_match(c, &keys[r][0][0], kBlocks, &matched), KVTIER_OK, "");
    CHECK(matched == kBlocks);
    for (int i = 0; i < kBlocks; ++i) {
      size_t len = 0;
      CHECK_RC(kvtier_cache_load(c, keys[r][i], buf, 1 << 16, &len), KVTIER_OK, "");
      CHECK(len > 0 && DecodesAs(buf, len, keys[r][i], r, i));
      CHECK(len == 0 || !DecodesAs(buf, len, keys[r][i], 1 - r, i));
    }
    CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
  }
  if (with_redis) {
    /* Another host (no shared folder): rank 1's blocks from Redis only. */
    snprintf(options, sizeof(options),
             "{\"layout\": \"tiny\", \"host_bytes\": 1048576, \"remote\": \"%s\"}", url);
    kvtier_cache* c = NULL;
    CHECK_RC(kvtier_cache_open(options, &c), KVTIER_OK, "");
    if (c != NULL) {
      for (int i = 0; i < kBlocks; ++i) {
        size_t len = 0;
        CHECK_RC(kvtier_cache_load(c, keys[1][i], buf, 1 << 16, &len), KVTIER_OK, "");
        CHECK(len > 0 && DecodesAs(buf, len, keys[1][i], 1, i));
      }
      CHECK(StatsCount(c, "hits_remote") == kBlocks);
      CHECK_RC(kvtier_cache_close(c), KVTIER_OK, "");
    }
  }
  free(buf);
}

int main(void) {
  const char* tmp = getenv("TMPDIR");
  char dir[1024];
  snprintf(dir, sizeof(dir), "%s/kvtier-c-codec-XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 2;
  }
  size_t len = 0;
  CHECK_RC(kvtier_layout_signature("tiny", g_signature, sizeof(g_signature), &len), KVTIER_OK, "");
  TestEncodeDecode();
  TestStoreLoadDecode(dir);
  TestNullHandle();
  TestKeysNs();
  TestShardRanksShareAFolder(dir);

  char command[1200];
  snprintf(command, sizeof(command), "rm -rf '%s'", dir);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", dir);
  printf("%d checks, %d failed\n", g_checks, g_failed);
  return g_failed == 0 ? 0 : 1;
}
