/* The checks the C API's tests share (c_api_test.c, c_api_ops_test.c,
 * c_codec_test.c): CHECK(cond) and CHECK_RC(rc, want, needle) count into
 * g_checks and g_failed and print what failed with kvtier_last_error().
 * Each test program includes it once, after <stdio.h>, <string.h> and
 * kvtier/kvtier_c.h. */
#ifndef KVTIER_CAPI_C_TEST_CHECK_H_
#define KVTIER_CAPI_C_TEST_CHECK_H_

static int g_checks = 0;
static int g_failed = 0;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    ++g_checks;                                                                                \
    if (!(cond)) {                                                                             \
      ++g_failed;                                                                              \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kvtier_last_error());                                                            \
    }                                                                                          \
  } while (0)

/* rc must equal want, and a failure must leave a message naming `needle`. */
#define CHECK_RC(rc, want, needle)                                                                 \
  do {                                                                                             \
    int rc_ = (rc);                                                                                \
    ++g_checks;                                                                                    \
    if (rc_ != (want) || ((want) != KVTIER_OK && strstr(kvtier_last_error(), (needle)) == NULL)) { \
      ++g_failed;                                                                                  \
      fprintf(stderr, "%s:%d: %s returned %s, want %s with \"%s\" (last error: %s)\n", __FILE__,   \
              __LINE__, #rc, kvtier_error_name(rc_), kvtier_error_name(want), (needle),            \
              kvtier_last_error());                                                                \
    }                                                                                              \
  } while (0)

#endif /* KVTIER_CAPI_C_TEST_CHECK_H_ */
