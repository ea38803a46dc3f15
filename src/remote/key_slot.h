// Redis Cluster key slots: CRC16 (XMODEM: polynomial 0x1021, initial 0, no
// reflection) of the key's hash tag, mod 16384, as the Cluster spec defines.
//
// Thread safety: pure functions.
#ifndef KVTIER_REMOTE_KEY_SLOT_H_
#define KVTIER_REMOTE_KEY_SLOT_H_

#include <cstdint>
#include <string_view>

namespace kvtier::remote {

inline constexpr uint16_t kClusterSlots = 16384;

// CRC16-XMODEM of `data` ("123456789" gives 0x31C3).
uint16_t Crc16(std::string_view data);

// The slot of a key name: the CRC16 of the text between the first '{' and
// the next '}' if that text is non-empty, else of the whole name; mod 16384.
uint16_t KeySlot(std::string_view key_name);

}  // namespace kvtier::remote

#endif  // KVTIER_REMOTE_KEY_SLOT_H_
