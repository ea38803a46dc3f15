#include "disk/header_hash.h"

#include <xxhash.h>

namespace kvtier::disk {

uint64_t HeaderHash(std::span<const std::byte> file) {
  if (file.size() < 8) return 0;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  if (n > file.size() - 8) return 0;
  uint64_t h = XXH3_64bits(file.data(), static_cast<size_t>(8 + n));
  return h == 0 ? 1 : h;
}

}  // namespace kvtier::disk
