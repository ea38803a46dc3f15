// Pieces shared by the block file encoder, decoder, header parser and
// BlockVerifier. Not API: include only from src/core/block_file*.cc,
// block_verifier.cc and safetensors*.cc.
#ifndef KVTIER_CORE_BLOCK_FILE_INTERNAL_H_
#define KVTIER_CORE_BLOCK_FILE_INTERNAL_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/xxh3.h"
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
// Prefix of the checksum and meta_checksum metadata values.
inline constexpr std::string_view kChecksumPrefix = "xxh3-128:";
// The metadata field that hashes the rest of the header (DESIGN.md §4).
inline constexpr std::string_view kMetaChecksumField = "meta_checksum";
// The metadata field with one checksum per tensor (DESIGN.md §4).
inline constexpr std::string_view kTensorChecksumsField = "tensor_checksums";

// The byte string meta_checksum covers: every `__metadata__` entry but
// meta_checksum, in bytewise key order, as `key 0x00 value 0x00`; then every
// tensor in file order as `name 0x00 dtype 0x00 shape 0x00 begin 0x00 end
// 0x00` (shape: decimal dimensions joined by ',', empty for a scalar).
// Entries and tensors may be added in either interleaving; each list must
// be added in its own order. Shared by the encoder and the decoder; the
// independent check is the Python corpus writer and the vector in
// docs/block-format.md.
class MetaChecksumInput {
 public:
  void Reserve(size_t entry_bytes, size_t tensor_bytes) {
    entries_.reserve(entry_bytes);
    tensors_.reserve(tensor_bytes);
  }
  // REQUIRES: keys in bytewise ascending order, none equal to meta_checksum.
  void AddEntry(std::string_view key, std::string_view value);
  void AddTensor(std::string_view name, std::string_view dtype, std::span<const uint64_t> shape,
                 uint64_t begin, uint64_t end);
  // XXH3-128 (seed 0) of the entries then the tensors, big-endian.
  std::array<uint8_t, 16> Digest() const;
  // The whole byte string (for tests and docs).
  std::string Bytes() const { return entries_ + tensors_; }

 private:
  std::string entries_;
  std::string tensors_;
};

// Xxh3Hash128, Xxh3Update128: core/xxh3.h.

// Lowercase hex of `n` bytes into `out` (2n chars).
void HexLower(const uint8_t* bytes, size_t n, char* out);
// Parses exactly 2n lowercase hex digits; false on anything else.
bool ParseHexLower(std::string_view hex, uint8_t* bytes, size_t n);
// Each char's value as a lowercase hex digit; 0xFF for any other char.
const std::array<uint8_t, 256>& HexDigitValues();

// Canonical decimal: no leading zeros, optional '-' only if `allow_negative`
// and never "-0". Fits in int64.
bool ParseCanonicalInt(std::string_view s, bool allow_negative, int64_t* out);

// A checksum or meta_checksum value: "xxh3-128:" and 32 lowercase hex digits.
bool ParseChecksum(std::string_view value, std::array<uint8_t, 16>* out);

struct ParsedHeader;  // core/safetensors_header.h

// DecodeBlock, leaving the parsed header in `*header` (freshly constructed by
// the caller) for BlockVerifier, whose templates point into its metadata.
// Same verdict and result as DecodeBlock. On success the tensor views of
// `header->tensors` have been moved into the result (their names are empty);
// `header->metadata` and `header->doc` stay valid.
Result<DecodedBlock> DecodeBlockKeepHeader(std::span<const std::byte> file,
                                           const DecodeOptions& opts, ParsedHeader* header);

// DecodeBlockHeader, leaving the parsed header in `*header` as
// DecodeBlockKeepHeader does. Same verdict and result as DecodeBlockHeader.
Result<DecodedBlock> DecodeBlockHeaderKeepHeader(std::span<const std::byte> prefix,
                                                 uint64_t file_size, const DecodeOptions& opts,
                                                 ParsedHeader* header);

// DecodeBlock's data checksum check of a decoded block (its data view set):
// kChecksumMismatch with DecodeBlock's message, or OK.
Status CheckDataChecksum(const DecodedBlock& block);

// A quoted, bounded copy of untrusted text for error messages.
std::string Quote(std::string_view text, size_t max_chars = 64);

}  // namespace kvtier::internal

#endif  // KVTIER_CORE_BLOCK_FILE_INTERNAL_H_
