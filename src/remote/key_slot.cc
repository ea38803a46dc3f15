#include "remote/key_slot.h"

#include <array>

namespace kvtier::remote {
namespace {

constexpr std::array<uint16_t, 256> MakeTable() {
  std::array<uint16_t, 256> t{};
  for (int i = 0; i < 256; ++i) {
    uint16_t crc = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
    }
    t[i] = crc;
  }
  return t;
}

constexpr std::array<uint16_t, 256> kTable = MakeTable();

}  // namespace

uint16_t Crc16(std::string_view data) {
  uint16_t crc = 0;
  for (char c : data) {
    crc = static_cast<uint16_t>((crc << 8) ^ kTable[((crc >> 8) ^ static_cast<uint8_t>(c)) & 0xff]);
  }
  return crc;
}

uint16_t KeySlot(std::string_view key_name) {
  const size_t open = key_name.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key_name.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key_name = key_name.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key_name) % kClusterSlots;
}

}  // namespace kvtier::remote
