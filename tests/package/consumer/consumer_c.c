/* Uses the installed C API: prints the block keys of tokens 0..31 (model
 * "pkg", tiny layout), one hex key a line, after a miss on a RAM-only
 * cache. Exits 1 on any error. */
#include <stdint.h>
#include <stdio.h>

#include "kvtier/kvtier_c.h"

int main(void) {
  char signature[256];
  size_t len = 0;
  if (kvtier_layout_signature("tiny", signature, sizeof(signature), &len) != KVTIER_OK) return 1;
  uint32_t tokens[32];
  for (uint32_t i = 0; i < 32; ++i) tokens[i] = i;
  uint8_t keys[2 * 32];
  size_t n = 0;
  if (kvtier_block_keys("pkg", signature, 16, tokens, 32, keys, &n) != KVTIER_OK || n != 2) {
    return 1;
  }
  kvtier_cache* cache = NULL;
  if (kvtier_cache_open("{\"layout\": \"tiny\", \"host_bytes\": 1048576}", &cache) != KVTIER_OK) {
    fprintf(stderr, "%s\n", kvtier_last_error());
    return 1;
  }
  uint8_t buf[16];
  if (kvtier_cache_load(cache, keys, buf, sizeof(buf), &len) != KVTIER_OK || len != 0) return 1;
  kvtier_cache_close(cache);
  for (size_t k = 0; k < n; ++k) {
    for (size_t i = 0; i < 32; ++i) printf("%02x", keys[32 * k + i]);
    printf("\n");
  }
  return 0;
}
