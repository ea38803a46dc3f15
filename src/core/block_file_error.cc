// Block-file rejection reasons (names, carrying them in a Status) and the
// small helpers the codec files share.
#include <array>
#include <charconv>
#include <cstring>
#include <string>

#include "core/block_file_internal.h"
#include "kvtier/block_file.h"

#if (defined(__x86_64__) || defined(__i386__)) && __has_include(<xxh_x86dispatch.h>)
#define XXH_DISPATCH_DISABLE_REPLACE  // call the _dispatch names explicitly
#include <xxh_x86dispatch.h>
#define KVTIER_XXH3_DISPATCH 1
#else
#define KVTIER_XXH3_DISPATCH 0
#endif

namespace kvtier {

namespace {

constexpr std::string_view kRejectPrefix = "block file rejected [";

struct ReasonName {
  BlockFileError error;
  std::string_view name;
};

constexpr std::array kReasonNames = {
    ReasonName{BlockFileError::kNone, "none"},
    ReasonName{BlockFileError::kFileTooShort, "file_too_short"},
    ReasonName{BlockFileError::kHeaderTooLarge, "header_too_large"},
    ReasonName{BlockFileError::kHeaderPastEof, "header_past_eof"},
    ReasonName{BlockFileError::kHeaderMisaligned, "header_misaligned"},
    ReasonName{BlockFileError::kHeaderNul, "header_nul"},
    ReasonName{BlockFileError::kHeaderNotUtf8, "header_not_utf8"},
    ReasonName{BlockFileError::kJsonSyntax, "json_syntax"},
    ReasonName{BlockFileError::kJsonTrailing, "json_trailing"},
    ReasonName{BlockFileError::kJsonTooDeep, "json_too_deep"},
    ReasonName{BlockFileError::kDuplicateKey, "duplicate_key"},
    ReasonName{BlockFileError::kHeaderNotObject, "header_not_object"},
    ReasonName{BlockFileError::kTooManyTensors, "too_many_tensors"},
    ReasonName{BlockFileError::kBadTensorName, "bad_tensor_name"},
    ReasonName{BlockFileError::kBadTensorEntry, "bad_tensor_entry"},
    ReasonName{BlockFileError::kUnknownDType, "unknown_dtype"},
    ReasonName{BlockFileError::kBadShape, "bad_shape"},
    ReasonName{BlockFileError::kShapeOverflow, "shape_overflow"},
    ReasonName{BlockFileError::kBadOffsets, "bad_offsets"},
    ReasonName{BlockFileError::kMissingTensor, "missing_tensor"},
    ReasonName{BlockFileError::kOffsetsReversed, "offsets_reversed"},
    ReasonName{BlockFileError::kShapeSizeMismatch, "shape_size_mismatch"},
    ReasonName{BlockFileError::kFirstOffsetNonzero, "first_offset_nonzero"},
    ReasonName{BlockFileError::kOffsetsGap, "offsets_gap"},
    ReasonName{BlockFileError::kOffsetsOverlap, "offsets_overlap"},
    ReasonName{BlockFileError::kTrailingBytes, "trailing_bytes"},
    ReasonName{BlockFileError::kDataTruncated, "data_truncated"},
    ReasonName{BlockFileError::kMissingMetadata, "missing_metadata"},
    ReasonName{BlockFileError::kMetadataNotStrings, "metadata_not_strings"},
    ReasonName{BlockFileError::kUnsupportedFormat, "unsupported_format"},
    ReasonName{BlockFileError::kMetadataMissingField, "metadata_missing_field"},
    ReasonName{BlockFileError::kMetadataBadField, "metadata_bad_field"},
    ReasonName{BlockFileError::kLayoutMismatch, "layout_mismatch"},
    ReasonName{BlockFileError::kKeyMismatch, "key_mismatch"},
    ReasonName{BlockFileError::kSignatureMismatch, "signature_mismatch"},
    ReasonName{BlockFileError::kChecksumMismatch, "checksum_mismatch"},
    ReasonName{BlockFileError::kMetaChecksumMismatch, "meta_checksum_mismatch"},
    ReasonName{BlockFileError::kTensorChecksumMismatch, "tensor_checksum_mismatch"},
};

}  // namespace

std::string_view BlockFileErrorName(BlockFileError error) {
  for (const auto& r : kReasonNames) {
    if (r.error == error) return r.name;
  }
  return "unknown";
}

BlockFileError BlockFileErrorOf(const Status& status) {
  if (!status.IsCorruption()) return BlockFileError::kNone;
  const std::string& m = status.message();
  size_t at = m.find(kRejectPrefix);
  if (at == std::string::npos) return BlockFileError::kNone;
  size_t start = at + kRejectPrefix.size();
  size_t close = m.find(']', start);
  if (close == std::string::npos) return BlockFileError::kNone;
  std::string_view name(m.data() + start, close - start);
  for (const auto& r : kReasonNames) {
    if (r.name == name) return r.error;
  }
  return BlockFileError::kNone;
}

namespace internal {

Status Reject(BlockFileError reason, std::string_view detail) {
  std::string msg(kRejectPrefix);
  msg += BlockFileErrorName(reason);
  msg += "]: ";
  msg += detail;
  return Status::Corruption(std::move(msg));
}

XXH128_hash_t Xxh3Hash128(const void* data, size_t size) {
#if KVTIER_XXH3_DISPATCH
  return XXH3_128bits_dispatch(data, size);
#else
  return XXH3_128bits(data, size);
#endif
}

void Xxh3Update128(XXH3_state_t* state, const void* data, size_t size) {
#if KVTIER_XXH3_DISPATCH
  XXH3_128bits_update_dispatch(state, data, size);
#else
  XXH3_128bits_update(state, data, size);
#endif
}

void HexLower(const uint8_t* bytes, size_t n, char* out) {
  static constexpr char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 15];
  }
}

const std::array<uint8_t, 256>& HexDigitValues() {
  static constexpr std::array<uint8_t, 256> kValues = [] {
    std::array<uint8_t, 256> v{};
    v.fill(0xFF);
    for (int c = '0'; c <= '9'; ++c) v[c] = static_cast<uint8_t>(c - '0');
    for (int c = 'a'; c <= 'f'; ++c) v[c] = static_cast<uint8_t>(c - 'a' + 10);
    return v;
  }();
  return kValues;
}

bool ParseHexLower(std::string_view hex, uint8_t* bytes, size_t n) {
  if (hex.size() != 2 * n) return false;
  // Every block a tier verifies parses its key, parent and checksums: one
  // table lookup a digit and one test at the end, no branch a digit.
  const std::array<uint8_t, 256>& values = HexDigitValues();
  const auto* in = reinterpret_cast<const uint8_t*>(hex.data());
  uint8_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint8_t hi = values[in[2 * i]];
    const uint8_t lo = values[in[2 * i + 1]];
    bad |= hi | lo;
    bytes[i] = static_cast<uint8_t>(hi << 4 | (lo & 15));
  }
  return (bad & 0xF0) == 0;
}

namespace {

void AppendDecimal(uint64_t v, std::string* out) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), v);
  out->append(buf, end);
}

}  // namespace

void MetaChecksumInput::AddEntry(std::string_view key, std::string_view value) {
  entries_.append(key);
  entries_.push_back('\0');
  entries_.append(value);
  entries_.push_back('\0');
}

void MetaChecksumInput::AddTensor(std::string_view name, std::string_view dtype,
                                  std::span<const uint64_t> shape, uint64_t begin, uint64_t end) {
  tensors_.append(name);
  tensors_.push_back('\0');
  tensors_.append(dtype);
  tensors_.push_back('\0');
  for (size_t d = 0; d < shape.size(); ++d) {
    if (d > 0) tensors_.push_back(',');
    AppendDecimal(shape[d], &tensors_);
  }
  tensors_.push_back('\0');
  AppendDecimal(begin, &tensors_);
  tensors_.push_back('\0');
  AppendDecimal(end, &tensors_);
  tensors_.push_back('\0');
}

std::array<uint8_t, 16> MetaChecksumInput::Digest() const {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  Xxh3Update128(&state, entries_.data(), entries_.size());
  Xxh3Update128(&state, tensors_.data(), tensors_.size());
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), c.digest, 16);
  return out;
}

std::string Quote(std::string_view text, size_t max_chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  size_t shown = 0;
  for (char ch : text) {
    if (shown == max_chars) {
      out += "...";
      break;
    }
    auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c >= 0x7F || c == '"' || c == '\\') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    } else {
      out += ch;
    }
    ++shown;
  }
  out += '"';
  return out;
}

}  // namespace internal
}  // namespace kvtier
