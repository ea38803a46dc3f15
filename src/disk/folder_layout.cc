#include "disk/folder_layout.h"

#include <atomic>
#include <charconv>
#include <mutex>
#include <unordered_set>

#include "core/fork_safe_mutex.h"
#include "kvtier/env.h"

namespace kvtier::disk {
namespace {

struct TempRegistry {
  ForkSafeMutex mu;
  std::unordered_set<std::string> paths;
};

TempRegistry& Registry() {
  static TempRegistry* registry = new TempRegistry();  // never destroyed
  return *registry;
}

bool IsLowerHex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool IsDigits(std::string_view s) {
  if (s.empty() || s.size() > 19) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string HexByte(uint8_t b) {
  static constexpr char kHex[] = "0123456789abcdef";
  return std::string{kHex[b >> 4], kHex[b & 15]};
}

std::string FolderLayout::IndexPath() const { return JoinPath(dir_, kIndexFileName); }
std::string FolderLayout::LockPath() const { return JoinPath(dir_, kLockFileName); }
std::string FolderLayout::BlocksDir() const { return JoinPath(dir_, kBlocksDirName); }
std::string FolderLayout::QuarantineDir() const { return JoinPath(dir_, kQuarantineDirName); }

std::string FolderLayout::Subdir(uint8_t prefix) const {
  return JoinPath(BlocksDir(), HexByte(prefix));
}

std::string FolderLayout::BlockPath(const BlockKey& key) const {
  return JoinPath(Subdir(key.bytes[0]), key.Hex() + std::string(kBlockSuffix));
}

std::string FolderLayout::TempPath(const BlockKey& key, int pid, uint64_t counter) const {
  return JoinPath(Subdir(key.bytes[0]), key.Hex() + std::string(kTempMarker) + std::to_string(pid) +
                                            "." + std::to_string(counter));
}

std::string FolderLayout::QuarantinePath(std::string_view original, int64_t unix_s, int pid,
                                         uint64_t counter) const {
  return JoinPath(QuarantineDir(), std::to_string(unix_s) + "-" + std::to_string(pid) + "-" +
                                       std::to_string(counter) + "-" + std::string(original));
}

ParsedEntry ParseBlockDirEntry(std::string_view name, uint8_t prefix) {
  ParsedEntry out;
  if (name.size() < 64 + kBlockSuffix.size()) return out;
  std::string_view hex = name.substr(0, 64);
  if (!IsLowerHex(hex)) return out;
  std::optional<BlockKey> key = BlockKey::FromHex(hex);
  if (!key || key->bytes[0] != prefix) return out;
  std::string_view rest = name.substr(64);
  if (rest == kBlockSuffix) {
    out.kind = EntryKind::kBlock;
    out.key = *key;
    return out;
  }
  if (rest.substr(0, kTempMarker.size()) != kTempMarker) return out;
  rest.remove_prefix(kTempMarker.size());
  size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return out;
  std::string_view pid_text = rest.substr(0, dot);
  std::string_view counter_text = rest.substr(dot + 1);
  if (!IsDigits(pid_text) || !IsDigits(counter_text)) return out;
  int64_t pid = 0;
  std::from_chars(pid_text.data(), pid_text.data() + pid_text.size(), pid);
  if (pid <= 0 || pid > INT32_MAX) return out;
  out.kind = EntryKind::kTemp;
  out.key = *key;
  out.pid = static_cast<int>(pid);
  return out;
}

int64_t QuarantineTimeOf(std::string_view name) {
  size_t dash = name.find('-');
  if (dash == std::string_view::npos) return -1;
  std::string_view t = name.substr(0, dash);
  if (!IsDigits(t)) return -1;
  int64_t v = -1;
  std::from_chars(t.data(), t.data() + t.size(), v);
  return v;
}

uint64_t NextUniqueCounter() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

void LiveTempFiles::Add(const std::string& path) {
  TempRegistry& r = Registry();
  MutexLock lock(&r.mu);
  r.paths.insert(path);
}

void LiveTempFiles::Remove(const std::string& path) {
  TempRegistry& r = Registry();
  MutexLock lock(&r.mu);
  r.paths.erase(path);
}

bool LiveTempFiles::Contains(const std::string& path) {
  TempRegistry& r = Registry();
  MutexLock lock(&r.mu);
  return r.paths.count(path) > 0;
}

}  // namespace kvtier::disk
