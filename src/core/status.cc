#include "kvtier/status.h"

#include <cerrno>
#include <cstring>

namespace kvtier {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kNotFound: return "NotFound";
    case StatusCode::kCorruption: return "Corruption";
    case StatusCode::kInvalidArgument: return "InvalidArgument";
    case StatusCode::kResourceExhausted: return "ResourceExhausted";
    case StatusCode::kIOError: return "IOError";
    case StatusCode::kUnavailable: return "Unavailable";
    case StatusCode::kFailedPrecondition: return "FailedPrecondition";
    case StatusCode::kInternal: return "Internal";
  }
  return "Unknown";
}

Status Status::IOError(std::string_view what, int sys_errno) {
  std::string msg(what);
  if (sys_errno != 0) {
    msg += ": ";
    msg += std::strerror(sys_errno);
  }
  StatusCode code = (sys_errno == ENOSPC || sys_errno == EDQUOT) ? StatusCode::kResourceExhausted
                                                                 : StatusCode::kIOError;
  return Status(code, std::move(msg), sys_errno);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(StatusCodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg), sys_errno_);
}

}  // namespace kvtier
