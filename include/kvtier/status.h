// Status and Result<T>: how every kvtier function reports failure.
//
// A Status is a code plus a human-readable message naming what went wrong
// and, for system calls, the errno that caused it. Result<T> holds either a
// value or a non-OK Status. Neither throws. A cache miss is never an error:
// lookups return std::optional or an empty match instead.
//
// Thread safety: both are values; distinct objects may be used from
// different threads freely.
#ifndef KVTIER_STATUS_H_
#define KVTIER_STATUS_H_

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace kvtier {

enum class StatusCode : int {
  kOk = 0,
  kNotFound = 1,           // the named thing does not exist
  kCorruption = 2,         // bytes failed validation (structure, key, checksum)
  kInvalidArgument = 3,    // the caller passed something malformed
  kResourceExhausted = 4,  // out of blocks, budget, queue space or disk
  kIOError = 5,            // a system call failed; sys_errno() says which
  kUnavailable = 6,        // a service or tier is down or closed
  kFailedPrecondition = 7, // the object is not in a state that allows the call
  kInternal = 8,           // a broken invariant inside kvtier
};

std::string_view StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), sys_errno_(sys_errno), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status NotFound(std::string msg) { return {StatusCode::kNotFound, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {StatusCode::kCorruption, std::move(msg)}; }
  static Status InvalidArgument(std::string msg) {
    return {StatusCode::kInvalidArgument, std::move(msg)};
  }
  static Status ResourceExhausted(std::string msg, int sys_errno = 0) {
    return {StatusCode::kResourceExhausted, std::move(msg), sys_errno};
  }
  // Builds an IOError from a failed system call: "<what>: <strerror(err)>".
  static Status IOError(std::string_view what, int sys_errno);
  static Status Unavailable(std::string msg) { return {StatusCode::kUnavailable, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) {
    return {StatusCode::kFailedPrecondition, std::move(msg)};
  }
  static Status Internal(std::string msg) { return {StatusCode::kInternal, std::move(msg)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  // The errno of the failed system call, or 0.
  int sys_errno() const { return sys_errno_; }
  const std::string& message() const { return message_; }
  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(std::string_view context) const;

  bool IsNotFound() const { return code_ == StatusCode::kNotFound; }
  bool IsCorruption() const { return code_ == StatusCode::kCorruption; }
  bool IsInvalidArgument() const { return code_ == StatusCode::kInvalidArgument; }
  bool IsResourceExhausted() const { return code_ == StatusCode::kResourceExhausted; }
  bool IsIOError() const { return code_ == StatusCode::kIOError; }
  bool IsUnavailable() const { return code_ == StatusCode::kUnavailable; }

 private:
  StatusCode code_ = StatusCode::kOk;
  int sys_errno_ = 0;
  std::string message_;
};

// Either a T or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result built from an OK Status");
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result built from an OK Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // OK when a value is held.
  Status status() const { return ok() ? Status() : std::get<Status>(v_); }

  // REQUIRES: ok()
  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  T value_or(T fallback) const& { return ok() ? std::get<T>(v_) : std::move(fallback); }

 private:
  std::variant<Status, T> v_;
};

}  // namespace kvtier

#define KVTIER_CONCAT_INNER_(a, b) a##b
#define KVTIER_CONCAT_(a, b) KVTIER_CONCAT_INNER_(a, b)

// Returns the Status of `expr` from the enclosing function if it is not OK.
#define KVTIER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::kvtier::Status kvtier_status_ = (expr);        \
    if (!kvtier_status_.ok()) return kvtier_status_; \
  } while (0)

// `KVTIER_ASSIGN_OR_RETURN(auto x, F());` declares x from F()'s value or
// returns its Status.
#define KVTIER_ASSIGN_OR_RETURN(lhs, expr) \
  KVTIER_ASSIGN_OR_RETURN_IMPL_(KVTIER_CONCAT_(kvtier_result_, __LINE__), lhs, expr)
#define KVTIER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // KVTIER_STATUS_H_
