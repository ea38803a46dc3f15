// The names inside a cache folder (docs/disk-tier.md):
//
//   <dir>/index.sqlite                                   SQLite index (WAL)
//   <dir>/index.lock                                     who has the folder open
//   <dir>/blocks/<2 hex>/<64 hex>.safetensors             one block file
//   <dir>/blocks/<2 hex>/<64 hex>.safetensors.tmp.<pid>.<n>  being written
//   <dir>/quarantine/<unix s>-<pid>-<n>-<original name>   rejected files
//
// Hex is lowercase; the subfolder is the key's first byte. Temp names carry
// the writer's pid and a process-wide counter, so concurrent writers of the
// same key in any processes never share a temp file, and the reconcile can
// tell a dead writer's leftovers from a live one's.
//
// Thread safety: FolderLayout is immutable; NextUniqueCounter() and the
// LiveTempFiles registry are safe from any thread.
#ifndef KVTIER_DISK_FOLDER_LAYOUT_H_
#define KVTIER_DISK_FOLDER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "kvtier/block_key.h"

namespace kvtier::disk {

inline constexpr std::string_view kBlocksDirName = "blocks";
inline constexpr std::string_view kQuarantineDirName = "quarantine";
inline constexpr std::string_view kIndexFileName = "index.sqlite";
inline constexpr std::string_view kLockFileName = "index.lock";
inline constexpr std::string_view kBlockSuffix = ".safetensors";
inline constexpr std::string_view kTempMarker = ".safetensors.tmp.";

class FolderLayout {
 public:
  explicit FolderLayout(std::string dir) : dir_(std::move(dir)) {}

  const std::string& dir() const { return dir_; }
  std::string IndexPath() const;
  // <dir>/index.lock (folder_lock.h).
  std::string LockPath() const;
  std::string BlocksDir() const;
  std::string QuarantineDir() const;
  // <dir>/blocks/<2 hex of prefix>
  std::string Subdir(uint8_t prefix) const;
  std::string BlockPath(const BlockKey& key) const;
  std::string TempPath(const BlockKey& key, int pid, uint64_t counter) const;
  // A fresh quarantine name for a file called `original`.
  std::string QuarantinePath(std::string_view original, int64_t unix_s, int pid,
                             uint64_t counter) const;

 private:
  std::string dir_;
};

// Two lowercase hex digits.
std::string HexByte(uint8_t b);

enum class EntryKind {
  kBlock,    // <64 hex>.safetensors with the right prefix
  kTemp,     // <64 hex>.safetensors.tmp.<pid>.<n>
  kForeign,  // anything else
};

struct ParsedEntry {
  EntryKind kind = EntryKind::kForeign;
  BlockKey key;
  int pid = 0;
};

// Classifies a name found in blocks/<prefix as 2 hex>/.
ParsedEntry ParseBlockDirEntry(std::string_view name, uint8_t prefix);

// The unix seconds a quarantine name records, or -1 if it is not one of ours.
int64_t QuarantineTimeOf(std::string_view name);

// A process-wide counter for unique temp and quarantine names.
uint64_t NextUniqueCounter();

// Temp files this process is writing right now, across all tiers, so a
// reconcile never removes a live writer's file even when two tiers in one
// process share a folder.
class LiveTempFiles {
 public:
  static void Add(const std::string& path);
  static void Remove(const std::string& path);
  static bool Contains(const std::string& path);
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_FOLDER_LAYOUT_H_
