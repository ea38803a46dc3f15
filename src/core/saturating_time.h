// Saturating arithmetic for durations and timestamps.
//
// Options, flags and file headers carry times a user or an attacker can make
// huge (retention_seconds = INT64_MAX, created_at = -2^62). Scaling or
// subtracting them in plain int64_t overflows (undefined behaviour, in
// practice a wrap that turns "keep for ever" into "expire everything").
// These helpers clamp to [INT64_MIN, INT64_MAX] instead, so a huge retention
// keeps everything and a hostile timestamp is only very old or very new.
//
// Thread safety: pure functions.
#ifndef KVTIER_CORE_SATURATING_TIME_H_
#define KVTIER_CORE_SATURATING_TIME_H_

#include <cstdint>
#include <limits>

namespace kvtier {

inline constexpr int64_t kMicrosPerSecond = 1'000'000;

// a + b, clamped to the int64_t range.
constexpr int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    return b > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return out;
}

// a - b, clamped to the int64_t range.
constexpr int64_t SaturatingSub(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_sub_overflow(a, b, &out)) {
    return b < 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
  }
  return out;
}

// a × b, clamped to the int64_t range.
constexpr int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    return (a < 0) == (b < 0) ? std::numeric_limits<int64_t>::max()
                              : std::numeric_limits<int64_t>::min();
  }
  return out;
}

// `seconds` in microseconds, clamped to the int64_t range.
constexpr int64_t SecondsToMicros(int64_t seconds) {
  return SaturatingMul(seconds, kMicrosPerSecond);
}

// The instant `age_us` before `now_us` (clamped): anything created before
// it is older than `age_us`. With age_us = INT64_MAX nothing real is older.
constexpr int64_t CutoffBefore(int64_t now_us, int64_t age_us) {
  return SaturatingSub(now_us, age_us);
}

}  // namespace kvtier

#endif  // KVTIER_CORE_SATURATING_TIME_H_
