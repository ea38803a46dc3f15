// Logger: where kvtier tells an operator what its counters alone would not
// (DESIGN.md §7): a Redis node down and back up, a full remote write queue
// dropping copies; on the disk tier free-disk pressure, ENOSPC, a file
// moved to quarantine, a store written inline because the queue was full,
// the cause of a failed block write. LevelDB's `info_log`: the caller
// implements it and sets it in the options (CacheOptions::info_log, which
// the cache hands to its tiers, or DiskTierOptions / RemoteTierOptions
// when a tier is used on its own); nullptr (the default) logs nothing.
//
// Each kind of event reaches the logger at most once per
// kEventLogIntervalMicros; the next line of that kind then says how many
// were suppressed meanwhile. The message is one line of English without a
// trailing newline, starting with the tier ("disk: ...", "remote: ...").
//
// Ownership: the caller owns the Logger; it must outlive every cache and
// tier it is set in.
//
// Thread safety: Log() is called from any thread, kvtier's background
// threads (writers, maintenance) included, possibly from several at once,
// never with a kvtier lock held. It must return quickly, must not throw,
// and must not call back into the cache or tier that logs.
#ifndef KVTIER_LOGGER_H_
#define KVTIER_LOGGER_H_

#include <cstdint>
#include <string_view>

namespace kvtier {

enum class LogLevel : uint8_t {
  kDebug = 0,    // state a developer may want (a failed probe of a down node)
  kInfo = 1,     // back to normal (a node back up)
  kWarning = 2,  // degraded but serving (a node down, copies dropped, pressure)
  kError = 3,    // data a user asked to keep was not kept (a failed write)
};

// "debug", "info", "warning", "error".
std::string_view LogLevelName(LogLevel level);

// The shortest time between two lines of one event kind, in microseconds
// of Env::NowMicros(): 30 s.
inline constexpr uint64_t kEventLogIntervalMicros = 30'000'000;

class Logger {
 public:
  virtual ~Logger() = default;
  // One event; `message` is valid for the call only.
  virtual void Log(LogLevel level, std::string_view message) = 0;
};

}  // namespace kvtier

#endif  // KVTIER_LOGGER_H_
