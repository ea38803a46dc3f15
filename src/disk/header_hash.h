// HeaderHash: a 64-bit XXH3 of a block file's header (the 8-byte length and
// the JSON), kept in the block's index row.
//
// The block checksum (DESIGN.md §4) covers only the data section, so a bit
// flip in a metadata value such as token_count or created_at can leave a
// file that still decodes. The disk tier records this hash when it writes or
// adopts a file and compares it on every read, so such a file is a miss and
// is quarantined. 0 means "not recorded"; HeaderHash never returns 0.
//
// Thread safety: pure function.
#ifndef KVTIER_DISK_HEADER_HASH_H_
#define KVTIER_DISK_HEADER_HASH_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvtier::disk {

// The hash of bytes [0, 8 + N) of a block file, N being its little-endian
// header length; 0 if `file` is shorter than that.
uint64_t HeaderHash(std::span<const std::byte> file);

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_HEADER_HASH_H_
