// ValueLayout: how a block file maps to Redis key names and parts
// (DESIGN.md §7).
//
//   <prefix>{<64 hex key>}        part 0: the first part_bytes bytes
//   <prefix>{<64 hex key>}:<i>    part i >= 1: bytes [i*P, min((i+1)*P, T))
//   <prefix>{<64 hex key>}:mac    its signature, when signed (value_mac.h)
//
// A block of this tier's layout has a data section of exactly
// `data_bytes` and a header of at most kMaxBlockHeaderBytes, so its total T
// is known once part 0's first 8 bytes (the header length N) are read:
// T = 8 + N + data_bytes. That bounds every reply before it is read and
// lets a reader allocate the exact buffer up front.
//
// Thread safety: immutable after construction.
#ifndef KVTIER_REMOTE_VALUE_LAYOUT_H_
#define KVTIER_REMOTE_VALUE_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_key.h"

namespace kvtier::remote {

class ValueLayout {
 public:
  // REQUIRES: part_bytes >= 4096, data_bytes <= 4 GiB.
  ValueLayout(std::string prefix, uint64_t part_bytes, uint64_t data_bytes);

  const std::string& prefix() const { return prefix_; }
  uint64_t part_bytes() const { return part_bytes_; }
  uint64_t data_bytes() const { return data_bytes_; }
  // The largest block file of the layout (8 + 1 MiB + data_bytes): no reply
  // may announce more.
  uint64_t max_value_bytes() const { return max_value_bytes_; }
  // Parts every block of the layout has (its header is at least 8 bytes):
  // what Exists() checks.
  uint32_t min_parts() const { return min_parts_; }
  // Parts the largest block of the layout has: what a read asks for.
  uint32_t max_parts() const { return max_parts_; }
  // True when every block of the layout fits in one part (the common case:
  // plain GET/SET, no MGET/MULTI).
  bool single_part() const { return max_parts_ == 1; }

  // Parts of a block file of `total` bytes (at least 1).
  uint32_t PartsFor(uint64_t total) const;
  // Bytes of part `i` of a `total`-byte block file. REQUIRES: i < PartsFor(total).
  uint64_t PartSize(uint64_t total, uint32_t i) const;
  // The block file's total size from its first 8 bytes (u64 LE header
  // length N): 8 + N + data_bytes; nullopt if N > kMaxBlockHeaderBytes.
  std::optional<uint64_t> TotalFromPrefix(std::span<const std::byte, 8> first) const;

  // `<prefix>{<hex>}` (part 0) or `<prefix>{<hex>}:<i>`.
  std::string PartName(const BlockKey& key, uint32_t part) const;
  // `<prefix>{<hex>}:mac`: the signature of a signed value (DESIGN.md §7),
  // on the same node as its parts (same hash tag).
  std::string MacName(const BlockKey& key) const;
  // Names of parts [0, n).
  std::vector<std::string> PartNames(const BlockKey& key, uint32_t n) const;
  // The Cluster slot of every part of `key`.
  static uint16_t SlotOf(const BlockKey& key);

 private:
  std::string prefix_;
  uint64_t part_bytes_;
  uint64_t data_bytes_;
  uint64_t max_value_bytes_;
  uint32_t min_parts_;
  uint32_t max_parts_;
};

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_VALUE_LAYOUT_H_
