// DiskEvents: what a DiskTier tells its Logger (DiskTierOptions::info_log,
// DESIGN.md §7), rate-limited per kind (core/event_log.h), and the table of
// distinct causes of failed block writes behind DiskTierStats::
// write_failures. Every part of the tier reaches it through DiskCounters,
// next to the counters the same events bump.
//
// Thread safety: every method from any thread, after Attach(). The cause
// table has its own mutex; the Logger is called with no lock held.
#ifndef KVTIER_DISK_DISK_EVENTS_H_
#define KVTIER_DISK_DISK_EVENTS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/event_log.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"
#include "kvtier/logger.h"
#include "kvtier/status.h"

namespace kvtier::disk {

// The failed write `s` without what differs between blocks: 64-hex keys
// become "<key>", a block's subfolder "blocks/*", a temp file's pid and
// counter "*". Errno text is appended when the message lacks it (SQLite's
// messages say "disk I/O error" and keep the errno apart).
std::string WriteFailureCauseOf(const Status& s);

class DiskEvents {
 public:
  // REQUIRES: before any other call; `env` outlives this object.
  void Attach(Logger* logger, Env* env, std::string dir);

  // The free disk, not max_bytes, bounds the folder now and a store has to
  // evict for it.
  void Pressure(uint64_t tracked_bytes, uint64_t effective_limit, uint64_t configured_max_bytes);
  // A block file write ran out of space (ENOSPC, EDQUOT).
  void NoSpace(const Status& s);
  // `path` was moved to (or, failing that, removed instead of) quarantine.
  void Quarantined(std::string_view path);
  // The write queue stayed full for queue_wait_micros: the store is written
  // on the caller's thread (dropped = false) or dropped (on_pressure=drop).
  void QueueFull(uint64_t queue_max_bytes, bool dropped);
  // A block write failed with `s`: counted by cause, and logged.
  void WriteFailed(const Status& s);
  // The folder cannot be written (`why`): it is served read-only.
  void ReadOnlyFolder(const Status& why);
  // When a damaged index was found.
  enum class IndexFoundAt : uint8_t { kOpen, kServing };
  // What became of a damaged index.
  enum class IndexOutcome : uint8_t {
    kRebuilt,        // set aside and rebuilt from the block files
    kOpenRefused,    // found at open, others have the folder open: Open() fails
    kServing,        // found while serving, others have the folder open: left alone
    kRebuildFailed,  // setting it aside failed (`detail` says why)
  };
  // The index reported corruption (`s`), at open or while serving; each
  // outcome is its own kind of line (a "rebuilt" is never held back by the
  // "left alone" before it).
  void IndexCorrupt(const Status& s, IndexFoundAt found, IndexOutcome outcome,
                    std::string_view detail = {});
  // Reading a block file failed with an I/O error (EIO): a miss.
  void ReadFailed(const Status& s);
  // A reconcile pass failed with `s`.
  void ReconcileFailed(const Status& s);

  // The cause table (DiskTierStats::write_failures).
  std::vector<WriteFailureCause> WriteFailures();

 private:
  enum Kind : size_t {
    kPressure,
    kNoSpace,
    kQuarantine,
    kInlineWrite,
    kDrop,
    kWriteFailed,
    kReadOnly,
    kIndexRebuilt,
    kIndexOpenRefused,
    kIndexServing,
    kIndexRebuildFailed,
    kReadFailed,
    kReconcileFailed,
  };

  EventLog log_;
  std::string dir_;
  Mutex mu_;
  std::vector<WriteFailureCause> causes_ GUARDED_BY(mu_);  // at most kMaxWriteFailureCauses
  uint64_t other_causes_ GUARDED_BY(mu_) = 0;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_DISK_EVENTS_H_
