// The CLI's Logger (kvtier/logger.h): every command that opens a cache or a
// tier sets it in the options, so the tiers' events (a Redis node down and
// back up, copies dropped, disk pressure, ENOSPC, quarantine, inline
// writes, failed writes) reach the operator on stderr as
// `kvtier: <level>: <message>`, rate-limited by the tiers. Debug lines are
// left out.
//
// Thread safety: Log() from any thread; lines are written whole.
#ifndef KVTIER_TOOLS_STDERR_LOGGER_H_
#define KVTIER_TOOLS_STDERR_LOGGER_H_

#include "kvtier/logger.h"

namespace kvtier::cli {

// The process's stderr logger; never destroyed (tiers' background threads
// may log while the process exits).
Logger* StderrLog();

}  // namespace kvtier::cli

#endif  // KVTIER_TOOLS_STDERR_LOGGER_H_
