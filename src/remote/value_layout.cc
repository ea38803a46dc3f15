#include "remote/value_layout.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "kvtier/block_file.h"
#include "remote/key_slot.h"

namespace kvtier::remote {
namespace {

uint32_t CeilDiv(uint64_t a, uint64_t b) { return static_cast<uint32_t>((a + b - 1) / b); }

}  // namespace

ValueLayout::ValueLayout(std::string prefix, uint64_t part_bytes, uint64_t data_bytes)
    : prefix_(std::move(prefix)),
      part_bytes_(part_bytes),
      data_bytes_(data_bytes),
      max_value_bytes_(8 + kMaxBlockHeaderBytes + data_bytes),
      min_parts_(CeilDiv(8 + 8 + data_bytes, part_bytes)),
      max_parts_(CeilDiv(8 + kMaxBlockHeaderBytes + data_bytes, part_bytes)) {
  assert(part_bytes >= 4096);
}

uint32_t ValueLayout::PartsFor(uint64_t total) const {
  return std::max<uint32_t>(1, CeilDiv(total, part_bytes_));
}

uint64_t ValueLayout::PartSize(uint64_t total, uint32_t i) const {
  assert(i < PartsFor(total));
  const uint64_t begin = uint64_t{i} * part_bytes_;
  return std::min(part_bytes_, total - begin);
}

std::optional<uint64_t> ValueLayout::TotalFromPrefix(std::span<const std::byte, 8> first) const {
  uint64_t n = 0;
  std::memcpy(&n, first.data(), 8);  // the format is little-endian, as is every host we build on
  if (n > kMaxBlockHeaderBytes) return std::nullopt;
  return 8 + n + data_bytes_;
}

std::string ValueLayout::PartName(const BlockKey& key, uint32_t part) const {
  std::string name;
  name.reserve(prefix_.size() + 66 + 11);
  name += prefix_;
  name += '{';
  name += key.Hex();
  name += '}';
  if (part > 0) {
    name += ':';
    name += std::to_string(part);
  }
  return name;
}

std::vector<std::string> ValueLayout::PartNames(const BlockKey& key, uint32_t n) const {
  std::vector<std::string> names;
  names.reserve(n);
  const std::string base = PartName(key, 0);
  for (uint32_t i = 0; i < n; ++i) {
    names.push_back(i == 0 ? base : base + ":" + std::to_string(i));
  }
  return names;
}

std::string ValueLayout::MacName(const BlockKey& key) const { return PartName(key, 0) + ":mac"; }

uint16_t ValueLayout::SlotOf(const BlockKey& key) { return Crc16(key.Hex()) % kClusterSlots; }

}  // namespace kvtier::remote
