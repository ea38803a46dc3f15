// What every C API source file shares: the thread-local message buffer,
// status-to-code mapping and the exception guard (kvtier_c.cc's file
// comment says why they look like this). Internal to libkvtier_c.
#ifndef KVTIER_CAPI_C_STATUS_H_
#define KVTIER_CAPI_C_STATUS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <new>
#include <string>
#include <string_view>

#include "kvtier/block_key.h"
#include "kvtier/kvtier_c.h"
#include "kvtier/status.h"

namespace kvtier::capi {

inline constexpr size_t kMaxMessage = 1024;
// One buffer per thread for the whole library (an inline variable: one
// definition however many files include this).
inline thread_local char t_last_error[kMaxMessage] = "";

// Concatenates the parts into the thread's message buffer, truncated.
inline void SetError(std::initializer_list<std::string_view> parts) {
  size_t used = 0;
  for (std::string_view part : parts) {
    const size_t n = std::min(part.size(), kMaxMessage - 1 - used);
    std::memcpy(t_last_error + used, part.data(), n);
    used += n;
  }
  t_last_error[used] = '\0';
}

inline int Fail(int code, std::string_view fn, std::string_view message) {
  SetError({fn, message});
  return code;
}

inline int CodeOf(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return KVTIER_OK;
    case StatusCode::kNotFound:
      return KVTIER_E_NOT_FOUND;
    case StatusCode::kCorruption:
      return KVTIER_E_CORRUPTION;
    case StatusCode::kInvalidArgument:
      return KVTIER_E_INVALID_ARGUMENT;
    case StatusCode::kResourceExhausted:
      return KVTIER_E_RESOURCE_EXHAUSTED;
    case StatusCode::kIOError:
      return KVTIER_E_IO;
    case StatusCode::kUnavailable:
      return KVTIER_E_UNAVAILABLE;
    case StatusCode::kFailedPrecondition:
      return KVTIER_E_FAILED_PRECONDITION;
    case StatusCode::kInternal:
      return KVTIER_E_INTERNAL;
  }
  return KVTIER_E_INTERNAL;
}

// "fn: message" for a failed status; KVTIER_OK for an OK one.
inline int FromStatus(std::string_view fn, const Status& s) {
  if (s.ok()) return KVTIER_OK;
  SetError({fn, ": ", s.message()});
  return CodeOf(s.code());
}

// Runs body(), which returns a KVTIER_* code, and keeps exceptions in.
template <typename Body>
int Guard(std::string_view fn, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(KVTIER_E_RESOURCE_EXHAUSTED, fn, ": out of memory");
  } catch (const std::exception& e) {
    SetError({fn, ": unexpected exception: ", e.what()});
    return KVTIER_E_INTERNAL;
  } catch (...) {
    return Fail(KVTIER_E_INTERNAL, fn, ": unexpected exception");
  }
}

inline BlockKey KeyOf(const uint8_t* bytes) {
  BlockKey key;
  std::memcpy(key.bytes.data(), bytes, key.bytes.size());
  return key;
}

}  // namespace kvtier::capi

#endif  // KVTIER_CAPI_C_STATUS_H_
