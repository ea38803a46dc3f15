#include "kvtier/disk_tier.h"

#include <algorithm>
#include <cmath>

namespace kvtier {
namespace {

Status Bad(std::string_view field, std::string_view why) {
  return Status::InvalidArgument("DiskTierOptions." + std::string(field) + " " + std::string(why));
}

}  // namespace

Status DiskTierOptions::Validate() const {
  if (dir.empty()) return Bad("dir", "is required (the cache folder)");
  if (dir.find('\0') != std::string::npos) return Bad("dir", "contains a NUL byte");
  if (layout_signature.empty()) {
    return Bad("layout_signature", "is required (ModelLayout::Signature() of the served blocks)");
  }
  if (retention_seconds < 0) return Bad("retention_seconds", "must be >= 0 (0 = keep forever)");
  if (!(free_space_fraction > 0.0 && free_space_fraction <= 1.0)) {
    return Bad("free_space_fraction", "must be in (0, 1]");
  }
  if (max_unlinks_per_store == 0) return Bad("max_unlinks_per_store", "must be > 0");
  if (writer_threads > 256) return Bad("writer_threads", "must be <= 256");
  if (read_threads > 256) return Bad("read_threads", "must be <= 256");
  if (on_pressure != OnPressure::kWriteInline && on_pressure != OnPressure::kDrop) {
    return Bad("on_pressure", "is not a known OnPressure value");
  }
  if (durability != Durability::kChecksum && durability != Durability::kFsync) {
    return Bad("durability", "is not a known Durability value");
  }
  if (sqlite_busy_timeout_ms > 600'000) {
    return Bad("sqlite_busy_timeout_ms", "must be <= 600000 (10 minutes)");
  }
  if (touch_flush_interval_ms == 0) return Bad("touch_flush_interval_ms", "must be > 0");
  if (stale_temp_seconds <= 0) return Bad("stale_temp_seconds", "must be > 0");
  if (quarantine_retention_seconds < 0) {
    return Bad("quarantine_retention_seconds", "must be >= 0 (0 = keep until kvtier gc)");
  }
  if (file_permissions > 0777) return Bad("file_permissions", "must be within 0777");
  if ((file_permissions & 0600) != 0600) {
    return Bad("file_permissions", "must let the owner read and write (0600)");
  }
  if (dir_permissions > 0777) return Bad("dir_permissions", "must be within 0777");
  if ((dir_permissions & 0700) != 0700) {
    return Bad("dir_permissions", "must include owner rwx (0700)");
  }
  return Status::Ok();
}

uint64_t DefaultDiskQueueBytes(uint64_t physical_memory_bytes) {
  constexpr uint64_t kFloor = 64ull << 20;
  constexpr uint64_t kCeiling = 8ull << 30;
  if (physical_memory_bytes == 0) return kFloor;  // unknown: a safe small bound
  uint64_t target = physical_memory_bytes / 10;
  uint64_t hard_cap = std::max<uint64_t>(physical_memory_bytes / 10 * 3, 1);
  return std::min({std::max(target, kFloor), hard_cap, kCeiling});
}

}  // namespace kvtier
