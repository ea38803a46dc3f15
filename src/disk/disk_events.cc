#include "disk/disk_events.h"

#include <algorithm>
#include <cctype>
#include <cstring>

#include "disk/folder_layout.h"

namespace kvtier::disk {
namespace {

bool IsHex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string Mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

}  // namespace

std::string WriteFailureCauseOf(const Status& s) {
  const std::string& m = s.message();
  std::string out;
  out.reserve(m.size());
  const std::string_view temp_marker = kTempMarker;
  for (size_t i = 0; i < m.size();) {
    size_t run = 0;
    while (i + run < m.size() && IsHex(m[i + run])) ++run;
    if (run == 64) {
      out += "<key>";
      i += run;
      continue;
    }
    // ".../blocks/ab/<key>...": the subfolder follows from the key.
    if (m.compare(i, 7, "blocks/") == 0 && i + 9 <= m.size() && IsHex(m[i + 7]) &&
        IsHex(m[i + 8]) && (i + 9 == m.size() || !IsHex(m[i + 9]))) {
      out += "blocks/*";
      i += 9;
      continue;
    }
    if (m.compare(i, temp_marker.size(), temp_marker) == 0) {
      out += temp_marker;
      i += temp_marker.size();
      // <pid>.<counter>
      size_t j = i;
      while (j < m.size() && (IsDigit(m[j]) || m[j] == '.')) ++j;
      if (j > i) out += "*";
      i = j;
      continue;
    }
    if (run > 0) {
      out.append(m, i, run);
      i += run;
    } else {
      out += m[i++];
    }
  }
  // "index: <SQL statement>: <SQLite's message>": the statement's first
  // word says enough.
  constexpr std::string_view kIndex = "index: ";
  if (size_t at = out.find(kIndex); at != std::string::npos) {
    const size_t sql = at + kIndex.size();
    const size_t end = out.find(": ", sql);
    const size_t word = out.find(' ', sql);
    if (end != std::string::npos && end - sql > 32 && word < end) {
      out.replace(sql, end - sql, out.substr(sql, word - sql) + " ...");
    }
  }
  if (s.sys_errno() != 0) {
    const char* text = std::strerror(s.sys_errno());
    if (out.find(text) == std::string::npos) out += std::string(" (") + text + ")";
  }
  return out;
}

void DiskEvents::Attach(Logger* logger, Env* env, std::string dir) {
  log_.Attach(logger, env);
  dir_ = std::move(dir);
}

void DiskEvents::Pressure(uint64_t tracked_bytes, uint64_t effective_limit,
                          uint64_t configured_max_bytes) {
  log_.Emit(kPressure, LogLevel::kWarning, [&] {
    std::string configured = configured_max_bytes == 0
                                 ? std::string("no configured limit")
                                 : "the configured " + Mib(configured_max_bytes);
    return "disk: " + dir_ + ": the file system is nearly full: the cache may hold " +
           Mib(effective_limit) + " now (" + configured + ", " + Mib(tracked_bytes) +
           " held); stores evict older blocks to fit";
  });
}

void DiskEvents::NoSpace(const Status& s) {
  log_.Emit(kNoSpace, LogLevel::kError, [&] {
    return "disk: " + dir_ + ": no space left for a block file (" + WriteFailureCauseOf(s) +
           "); the block is not stored";
  });
}

void DiskEvents::Quarantined(std::string_view path) {
  log_.Emit(kQuarantine, LogLevel::kWarning, [&] {
    return "disk: " + dir_ + ": moved " + std::string(path) +
           " to quarantine/ (it failed verification or is not a block file of this cache)";
  });
}

void DiskEvents::QueueFull(uint64_t queue_max_bytes, bool dropped) {
  log_.Emit(dropped ? kDrop : kInlineWrite, LogLevel::kWarning, [&] {
    return "disk: " + dir_ + ": the write queue (" + Mib(queue_max_bytes) +
           ") stayed full: " +
           (dropped ? std::string("blocks are dropped (on_pressure=drop)")
                    : std::string("blocks are written on the caller's thread")) +
           "; the disk is slower than the stores";
  });
}

void DiskEvents::WriteFailed(const Status& s) {
  std::string cause = WriteFailureCauseOf(s);
  {
    MutexLock lock(&mu_);
    auto it = std::find_if(causes_.begin(), causes_.end(),
                           [&](const WriteFailureCause& c) { return c.cause == cause; });
    if (it != causes_.end()) {
      ++it->count;
    } else if (causes_.size() < DiskTierStats::kMaxWriteFailureCauses) {
      causes_.push_back({cause, 1});
    } else {
      ++other_causes_;
    }
  }
  log_.Emit(kWriteFailed, LogLevel::kError,
            [&] { return "disk: " + dir_ + ": block write failed: " + cause; });
}

void DiskEvents::ReadOnlyFolder(const Status& why) {
  log_.Emit(kReadOnly, LogLevel::kWarning, [&] {
    return "disk: " + dir_ + ": the folder is read-only (" + why.message() +
           "): blocks are served, stores are skipped (read_only_skips), nothing is evicted "
           "or repaired";
  });
}

void DiskEvents::IndexCorrupt(const Status& s, IndexFoundAt found, IndexOutcome outcome,
                              std::string_view detail) {
  std::string_view action;
  Kind kind = kIndexRebuilt;
  switch (outcome) {
    case IndexOutcome::kRebuilt:
      action = "set aside in quarantine/ and rebuilt from the block files";
      break;
    case IndexOutcome::kOpenRefused:
      kind = kIndexOpenRefused;
      action =
          "other processes have the folder open: this open fails, and the first open after they "
          "close it rebuilds the index";
      break;
    case IndexOutcome::kServing:
      kind = kIndexServing;
      action =
          "other processes have the folder open: blocks are served from their files where the "
          "index is not needed, and the index is set aside and rebuilt once they close it";
      break;
    case IndexOutcome::kRebuildFailed:
      kind = kIndexRebuildFailed;
      action = "setting it aside failed, tried again when the damage is met next: ";
      break;
  }
  log_.Emit(kind, LogLevel::kError, [&] {
    return "disk: " + dir_ + ": the index is damaged (found " +
           (found == IndexFoundAt::kOpen ? "at open" : "while serving") + ": " + s.message() +
           "); " + std::string(action) + std::string(detail);
  });
}

void DiskEvents::ReadFailed(const Status& s) {
  log_.Emit(kReadFailed, LogLevel::kError, [&] {
    return "disk: " + dir_ + ": reading a block file failed (" + WriteFailureCauseOf(s) +
           "); the load is a miss";
  });
}

void DiskEvents::ReconcileFailed(const Status& s) {
  log_.Emit(kReconcileFailed, LogLevel::kError, [&] {
    return "disk: " + dir_ + ": the reconcile (folder <-> index repair) failed: " + s.message();
  });
}

std::vector<WriteFailureCause> DiskEvents::WriteFailures() {
  std::vector<WriteFailureCause> out;
  {
    MutexLock lock(&mu_);
    out = causes_;
    if (other_causes_ > 0) out.push_back({"other causes", other_causes_});
  }
  std::stable_sort(out.begin(), out.end(), [](const WriteFailureCause& a,
                                              const WriteFailureCause& b) {
    return a.count > b.count;
  });
  return out;
}

}  // namespace kvtier::disk
