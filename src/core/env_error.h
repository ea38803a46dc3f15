// Statuses and names for file-system errors, shared by every Env implementation
// (POSIX, in-memory, fault-injecting) so that they all report the same codes
// and messages for the same errno.
//
// Thread safety: pure functions.
#ifndef KVTIER_CORE_ENV_ERROR_H_
#define KVTIER_CORE_ENV_ERROR_H_

#include <string_view>

#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier {

// "<op> <path>: <strerror(err)>" with sys_errno() = err. ENOENT gives
// kNotFound, ENOSPC/EDQUOT kResourceExhausted, anything else kIOError.
Status PathError(std::string_view op, std::string_view path, int err);

// "regular file", "folder", "symlink", "FIFO" or "special file".
std::string_view FileTypeName(FileType type);

}  // namespace kvtier

#endif  // KVTIER_CORE_ENV_ERROR_H_
