// Block file v1: the one byte string a block travels as (DESIGN.md §4).
// A valid safetensors file whose `__metadata__` records the key, parent,
// namespace, token count, layout signature, per-layer cache types and meta
// states, creation time and two XXH3-128 checksums (data section; the rest
// of the header); docs/block-format.md is the normative description.
//
// EncodeBlock copies each tensor once into one contiguous BlockBuffer.
// DecodeBlock validates strictly and returns views into the caller's bytes
// (no copies). Any violation is a Corruption status naming the rule broken;
// BlockFileErrorOf() recovers the machine-readable reason.
//
// Thread safety: free functions on caller-owned data.
#ifndef KVTIER_BLOCK_FILE_H_
#define KVTIER_BLOCK_FILE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier {

// Limits a reader enforces before allocating or trusting anything.
inline constexpr uint64_t kMaxBlockHeaderBytes = 1u << 20;  // 1 MiB of JSON
inline constexpr size_t kMaxBlockTensors = 65536;

// What `__metadata__` records.
// Which state tensors of a block a partial read needs: element i stands for
// tensor i in file order (layer_{l}_state_{k}, DESIGN.md §4). An empty mask
// means every tensor. A partial read verifies `meta_checksum` and the
// `tensor_checksums` entry of each tensor it reads, never the bytes of the
// others (which it leaves unspecified).
using TensorMask = std::vector<bool>;

struct BlockMeta {
  BlockKey key;
  BlockKey parent;  // previous block's key; the namespace for block 0
  BlockKey ns;      // the namespace
  uint32_t token_count = 0;
  std::string layout_signature;
  std::vector<std::string> layer_cache_types;
  std::vector<std::vector<std::string>> layer_meta_states;
  int64_t created_at = 0;              // unix seconds
  std::array<uint8_t, 16> checksum{};  // XXH3-128 of the data section, big-endian
  // XXH3-128 of the rest of the header (DESIGN.md §4), big-endian; absent
  // in files written before it existed.
  std::optional<std::array<uint8_t, 16>> meta_checksum;
  // XXH3-128 of each tensor's bytes in file order (`tensor_checksums`,
  // DESIGN.md §4), big-endian; empty in files written before it existed,
  // which are only read whole.
  std::vector<std::array<uint8_t, 16>> tensor_checksums;
};

struct EncodeRequest {
  const ModelLayout* layout = nullptr;  // REQUIRES: layout->Validate().ok()
  BlockKey key;
  BlockKey parent;
  BlockKey ns;
  uint32_t token_count = 0;  // 0 = layout->block_tokens
  int64_t created_at = 0;    // unix seconds
  // One list per layer; empty = each layer's LayerSpec::meta_state.
  std::vector<std::vector<std::string>> meta_states;
  // layout->TensorCount() buffers in layer-major order (layer 0 state 0,
  // layer 0 state 1, ..., layer 1 state 0, ...), each exactly its
  // TensorSpec::ByteSize() long.
  std::span<const std::span<const std::byte>> tensors;
};

// InvalidArgument on a wrong tensor count or size, naming the tensor.
Result<BlockBuffer> EncodeBlock(const EncodeRequest& req);

// The XXH3-128 checksum of `data` (seed 0), big-endian as `xxhsum -H2` prints.
std::array<uint8_t, 16> BlockChecksum(std::span<const std::byte> data);

struct DecodeOptions {
  const BlockKey* expected_key = nullptr;           // if set, metadata key must equal it
  const std::string* expected_signature = nullptr;  // if set, layout_signature must equal it
  // The data section's checksum (a pass over every byte). The header's
  // meta_checksum is cheap and always verified when the file has one.
  bool verify_checksum = true;
  // If set, the tensors must be exactly this layout's (layer count, states
  // per layer, dtypes, shapes), layer_cache_types its layers' cache types
  // and token_count at most its block_tokens. The signature string is only
  // compared through expected_signature.
  const ModelLayout* expected_layout = nullptr;
};

struct TensorView {
  std::string name;  // layer_{i}_state_{k}
  uint32_t layer = 0;
  uint32_t state = 0;
  DType dtype = DType::kF16;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  // into the decoded file's bytes
  // data_offsets: [begin, end) within the data section (also known after
  // DecodeBlockHeader, whose views have no data).
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct DecodedBlock {
  BlockMeta meta;
  std::vector<TensorView> tensors;  // in file order
  uint64_t header_bytes = 0;        // N (JSON length, padded)
  std::span<const std::byte> data;  // the whole data section
};

// Validates `file` strictly (see docs/block-format.md) and returns views
// into it. The views live as long as `file`'s bytes.
Result<DecodedBlock> DecodeBlock(std::span<const std::byte> file, const DecodeOptions& opts);

// Given at least the first 8 bytes of a file of `file_size` bytes, returns
// 8 + N, the number of bytes DecodeBlockHeader needs, after checking N
// against kMaxBlockHeaderBytes and the file size (Corruption otherwise).
Result<uint64_t> BlockHeaderPrefixBytes(std::span<const std::byte> first_bytes, uint64_t file_size);

// Validates only the header, given its first bytes and the file's total
// size: what a folder scan does without reading the data. `prefix` must hold
// at least 8 + N bytes (N from the first 8); checks everything except the
// data section's checksum (meta_checksum included).
Result<DecodedBlock> DecodeBlockHeader(std::span<const std::byte> prefix, uint64_t file_size,
                                       const DecodeOptions& opts);

// A part of a block file: [begin, end) as offsets from the file's start.
struct BlockFileRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  bool operator==(const BlockFileRange&) const = default;
};

// True when `mask` selects every tensor of a block with `tensors` tensors
// (empty, or all true).
bool MaskSelectsAll(const TensorMask& mask, size_t tensors);

// The parts of the file `header` (from DecodeBlockHeader or DecodeBlock)
// describes that a read of the tensors `mask` selects needs beyond the
// header: the selected tensors' bytes, neighbours merged into one range, in
// file order. InvalidArgument when mask has neither 0 nor
// header.tensors.size() elements.
Result<std::vector<BlockFileRange>> SelectedTensorRanges(const DecodedBlock& header,
                                                         const TensorMask& mask);

// A partial read's verdict: validates `file` (the whole file's size; its
// header and the bytes of the tensors `mask` selects as read, the rest
// anything) like DecodeBlockHeader, meta_checksum included, then the
// `tensor_checksums` entry of every selected tensor (kTensorChecksumMismatch
// naming the first that differs). The bytes of unselected tensors are never
// looked at. A mask that selects every tensor is DecodeBlock(file, opts)
// (the data section's `checksum`). FailedPrecondition when a subset is asked
// of a file without tensor_checksums or meta_checksum: read it whole.
Result<DecodedBlock> DecodeBlockTensors(std::span<const std::byte> file, const TensorMask& mask,
                                        const DecodeOptions& opts);

// Which rule a rejected block file broke. DecodeBlock and DecodeBlockHeader
// return Corruption statuses that carry one of these (kNone never appears
// in a rejection); BlockFileErrorOf() recovers it, also after WithContext().
// docs/block-format.md lists the rules in the order they are checked.
enum class BlockFileError : uint8_t {
  kNone = 0,              // not a block-file rejection (or OK)
  kFileTooShort,          // fewer than 8 bytes
  kHeaderTooLarge,        // N > kMaxBlockHeaderBytes
  kHeaderPastEof,         // 8 + N > file size
  kHeaderMisaligned,      // 8 + N not a multiple of 8
  kHeaderNul,             // a NUL byte (raw or \u0000) in the header
  kHeaderNotUtf8,         // invalid, overlong or surrogate UTF-8
  kJsonSyntax,            // not JSON (truncated, bad token, bad escape)
  kJsonTrailing,          // something other than whitespace after the JSON value
  kJsonTooDeep,           // nesting deeper than the header ever needs
  kDuplicateKey,          // a key repeated in any object
  kHeaderNotObject,       // the top-level value is not an object
  kTooManyTensors,        // more than kMaxBlockTensors tensor entries
  kBadTensorName,         // a name other than layer_{i}_state_{k}
  kBadTensorEntry,        // entry not {dtype, shape, data_offsets} of the right types
  kUnknownDType,          // dtype not a known safetensors name
  kBadShape,              // shape not an array of integers >= 1 (or too many dims)
  kShapeOverflow,         // elements x dtype size overflows 64 bits
  kBadOffsets,            // data_offsets not two non-negative integers
  kMissingTensor,         // names not dense: layers 0..L-1, states 0..S-1 each
  kOffsetsReversed,       // end < begin
  kShapeSizeMismatch,     // end - begin != elements x dtype size
  kFirstOffsetNonzero,    // the first tensor does not start at 0
  kOffsetsGap,            // a tensor starts after the previous one ends
  kOffsetsOverlap,        // a tensor starts before the previous one ends
  kTrailingBytes,         // the data section is longer than the last offset
  kDataTruncated,         // the data section is shorter than the last offset
  kMissingMetadata,       // no __metadata__ entry
  kMetadataNotStrings,    // __metadata__ not an object of string -> string
  kUnsupportedFormat,     // kvtier_format missing or not "1"
  kMetadataMissingField,  // a required metadata field is absent
  kMetadataBadField,      // a required metadata field has a bad value
  kLayoutMismatch,        // tensors differ from DecodeOptions::expected_layout
  kKeyMismatch,           // metadata key != DecodeOptions::expected_key
  kSignatureMismatch,     // layout_signature != DecodeOptions::expected_signature
  kChecksumMismatch,      // XXH3-128 of the data section != metadata checksum
  kMetaChecksumMismatch,  // the header's metadata and tensor table != meta_checksum
  // A tensor a partial read (DecodeBlockTensors) selected != its
  // tensor_checksums entry.
  kTensorChecksumMismatch,
};

// Snake-case name of a reason, e.g. "checksum_mismatch" (used in messages,
// `kvtier verify` output and tests/corpus/expected.json).
std::string_view BlockFileErrorName(BlockFileError error);
// The reason a Corruption status from DecodeBlock/DecodeBlockHeader carries;
// kNone for OK and for any other status.
BlockFileError BlockFileErrorOf(const Status& status);

}  // namespace kvtier

#endif  // KVTIER_BLOCK_FILE_H_
