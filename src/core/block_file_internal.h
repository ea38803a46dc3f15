// Pieces shared by the block file encoder, decoder and header parser.
// Not API: include only from src/core/block_file*.cc and safetensors*.cc.
#ifndef KVTIER_CORE_BLOCK_FILE_INTERNAL_H_
#define KVTIER_CORE_BLOCK_FILE_INTERNAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t's size, for stack states
#include <xxhash.h>

#include "kvtier/block_file.h"

namespace kvtier::internal {

// The Corruption status for a rejected block file: the message is
// "block file rejected [<reason name>]: <detail>", which BlockFileErrorOf()
// parses back.
Status Reject(BlockFileError reason, std::string_view detail);

// Deepest nesting a header needs is 3 (object → entry → shape); one more
// level lets a nested shape report itself as a bad shape.
inline constexpr int kHeaderMaxDepth = 4;
// Most dimensions a tensor shape may have.
inline constexpr size_t kMaxTensorRank = 8;
// Prefix of the checksum metadata value.
inline constexpr std::string_view kChecksumPrefix = "xxh3-128:";

// XXH3-128 (seed 0) through libxxhash's x86 dispatcher, which picks the
// widest vector unit the CPU has (AVX-512, AVX2, SSE2) at run time; the
// plain entry points of Debian's build are SSE2 only, 4x slower on AVX-512.
// The hash value is the same either way.
XXH128_hash_t Xxh3Hash128(const void* data, size_t size);
void Xxh3Update128(XXH3_state_t* state, const void* data, size_t size);

// Lowercase hex of `n` bytes into `out` (2n chars).
void HexLower(const uint8_t* bytes, size_t n, char* out);
// Parses exactly 2n lowercase hex digits; false on anything else.
bool ParseHexLower(std::string_view hex, uint8_t* bytes, size_t n);

// A quoted, bounded copy of untrusted text for error messages.
std::string Quote(std::string_view text, size_t max_chars = 64);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_BLOCK_FILE_INTERNAL_H_
