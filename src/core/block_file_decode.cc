// DecodeBlock / DecodeBlockHeader: strict validation of block file v1
// (docs/block-format.md lists the rules in the order they are checked).
#include <algorithm>
#include <cstring>
#include <string>

#include "core/block_file_internal.h"
#include "core/json_strict.h"
#include "core/safetensors_header.h"
#include "kvtier/block_file.h"
#include "kvtier/layout.h"

namespace kvtier {

using internal::Reject;

namespace {

std::string Str(uint64_t v) { return std::to_string(v); }

uint64_t LoadLe64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

class MetadataReader {
 public:
  MetadataReader(const internal::ParsedHeader& header) : header_(header) {}

  // The value of `field`, or nullptr.
  const std::string_view* Find(std::string_view field) const {
    for (const auto& [k, v] : header_.metadata) {
      if (k == field) return &v;
    }
    return nullptr;
  }

  Status Required(std::string_view field, std::string_view* value) const {
    const std::string_view* v = Find(field);
    if (v == nullptr) {
      return Reject(BlockFileError::kMetadataMissingField,
                    "__metadata__ lacks " + std::string(field));
    }
    *value = *v;
    return Status::Ok();
  }

 private:
  const internal::ParsedHeader& header_;
};

Status BadField(std::string_view field, std::string_view value, std::string_view why) {
  return Reject(BlockFileError::kMetadataBadField, "__metadata__ " + std::string(field) + " = " +
                                                       internal::Quote(value) + ": " +
                                                       std::string(why));
}

Status ParseKeyField(std::string_view field, std::string_view value, BlockKey* out) {
  if (!internal::ParseHexLower(value, out->bytes.data(), out->bytes.size())) {
    return BadField(field, value, "not 64 lowercase hex digits");
  }
  return Status::Ok();
}

// Parses a JSON array of strings (`depth` 1) or of arrays of strings
// (`depth` 2) held in a metadata string.
Status ParseStringLists(std::string_view field, std::string_view value, size_t layers,
                        std::vector<std::string>* flat,
                        std::vector<std::vector<std::string>>* nested) {
  internal::JsonDocument doc;
  internal::JsonError err;
  const int depth = nested != nullptr ? 2 : 1;
  if (!doc.Parse(value, depth, &err)) {
    return BadField(field, value, "not JSON: " + err.message);
  }
  const internal::JsonNode& root = doc.root();
  if (root.kind != internal::JsonKind::kArray) return BadField(field, value, "not a JSON array");
  if (root.count != layers) {
    return BadField(field, value,
                    "has " + Str(root.count) + " entries for " + Str(layers) +
                        (field == internal::kTensorChecksumsField ? " tensors" : " layers"));
  }
  for (uint32_t item : internal::JsonElements(doc, 0)) {
    const internal::JsonNode& n = doc.node(item);
    if (nested == nullptr) {
      if (n.kind != internal::JsonKind::kString) return BadField(field, value, "not all strings");
      flat->emplace_back(n.text);
      continue;
    }
    if (n.kind != internal::JsonKind::kArray) {
      return BadField(field, value, "not an array of arrays");
    }
    auto& list = nested->emplace_back();
    list.reserve(n.count);
    for (uint32_t s : internal::JsonElements(doc, item)) {
      const internal::JsonNode& sn = doc.node(s);
      if (sn.kind != internal::JsonKind::kString) {
        return BadField(field, value, "inner arrays hold a non-string");
      }
      list.emplace_back(sn.text);
    }
  }
  return Status::Ok();
}

Status ParseMetadata(const internal::ParsedHeader& header, BlockMeta* meta) {
  MetadataReader md(header);
  const std::string_view* format = md.Find("kvtier_format");
  if (format == nullptr) {
    return Reject(BlockFileError::kUnsupportedFormat, "__metadata__ lacks kvtier_format");
  }
  if (*format != "1") {
    return Reject(BlockFileError::kUnsupportedFormat,
                  "kvtier_format is " + internal::Quote(*format) + ", this reader knows \"1\"");
  }
  std::string_view key, parent, ns, token_count, signature, cache_types, meta_states, created_at,
      checksum;
  KVTIER_RETURN_IF_ERROR(md.Required("key", &key));
  KVTIER_RETURN_IF_ERROR(md.Required("parent", &parent));
  KVTIER_RETURN_IF_ERROR(md.Required("namespace", &ns));
  KVTIER_RETURN_IF_ERROR(md.Required("token_count", &token_count));
  KVTIER_RETURN_IF_ERROR(md.Required("layout_signature", &signature));
  KVTIER_RETURN_IF_ERROR(md.Required("layer_cache_types", &cache_types));
  KVTIER_RETURN_IF_ERROR(md.Required("layer_meta_states", &meta_states));
  KVTIER_RETURN_IF_ERROR(md.Required("created_at", &created_at));
  KVTIER_RETURN_IF_ERROR(md.Required("checksum", &checksum));

  KVTIER_RETURN_IF_ERROR(ParseKeyField("key", key, &meta->key));
  KVTIER_RETURN_IF_ERROR(ParseKeyField("parent", parent, &meta->parent));
  KVTIER_RETURN_IF_ERROR(ParseKeyField("namespace", ns, &meta->ns));
  int64_t tokens = 0;
  if (!internal::ParseCanonicalInt(token_count, /*allow_negative=*/false, &tokens) || tokens == 0 ||
      tokens > UINT32_MAX) {
    return BadField("token_count", token_count, "not an integer in 1..4294967295");
  }
  meta->token_count = static_cast<uint32_t>(tokens);
  if (signature.empty()) return BadField("layout_signature", signature, "empty");
  meta->layout_signature.assign(signature);
  meta->layer_cache_types.clear();
  meta->layer_meta_states.clear();
  meta->layer_cache_types.reserve(header.layers);
  meta->layer_meta_states.reserve(header.layers);
  KVTIER_RETURN_IF_ERROR(ParseStringLists("layer_cache_types", cache_types, header.layers,
                                          &meta->layer_cache_types, nullptr));
  KVTIER_RETURN_IF_ERROR(ParseStringLists("layer_meta_states", meta_states, header.layers, nullptr,
                                          &meta->layer_meta_states));
  if (!internal::ParseCanonicalInt(created_at, /*allow_negative=*/true, &meta->created_at)) {
    return BadField("created_at", created_at, "not a 64-bit integer");
  }
  if (!internal::ParseChecksum(checksum, &meta->checksum)) {
    return BadField("checksum", checksum, "not xxh3-128:<32 lowercase hex digits>");
  }
  meta->tensor_checksums.clear();
  if (const std::string_view* tc = md.Find(internal::kTensorChecksumsField); tc != nullptr) {
    std::vector<std::string> sums;
    sums.reserve(header.tensors.size());
    KVTIER_RETURN_IF_ERROR(ParseStringLists(internal::kTensorChecksumsField, *tc,
                                            header.tensors.size(), &sums, nullptr));
    meta->tensor_checksums.resize(sums.size());
    for (size_t i = 0; i < sums.size(); ++i) {
      if (!internal::ParseChecksum(sums[i], &meta->tensor_checksums[i])) {
        return BadField(internal::kTensorChecksumsField, *tc,
                        "entry " + Str(i) + " is not xxh3-128:<32 lowercase hex digits>");
      }
    }
  }
  meta->meta_checksum.reset();
  if (const std::string_view* mc = md.Find(internal::kMetaChecksumField); mc != nullptr) {
    if (!internal::ParseChecksum(*mc, &meta->meta_checksum.emplace())) {
      return BadField(internal::kMetaChecksumField, *mc, "not xxh3-128:<32 lowercase hex digits>");
    }
  }
  return Status::Ok();
}

// The meta_checksum of DESIGN.md §4 over what the header says.
std::array<uint8_t, 16> HeaderMetaChecksum(const internal::ParsedHeader& header) {
  std::vector<std::pair<std::string_view, std::string_view>> entries;
  entries.reserve(header.metadata.size());
  size_t entry_bytes = 0, tensor_bytes = 0;
  for (const auto& kv : header.metadata) {
    if (kv.first == internal::kMetaChecksumField) continue;
    entries.push_back(kv);
    entry_bytes += kv.first.size() + kv.second.size() + 2;
  }
  // Keys are unique (duplicates were rejected), so this order is total.
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (const auto& t : header.tensors) tensor_bytes += t.view.name.size() + 16 * 8;
  internal::MetaChecksumInput input;
  input.Reserve(entry_bytes, tensor_bytes);
  for (const auto& [k, v] : entries) input.AddEntry(k, v);
  for (const auto& t : header.tensors) {
    input.AddTensor(t.view.name, DTypeName(t.view.dtype), t.view.shape, t.begin, t.end);
  }
  return input.Digest();
}

Status CheckMetaChecksum(const internal::ParsedHeader& header, const BlockMeta& meta) {
  if (!meta.meta_checksum) return Status::Ok();  // written before meta_checksum existed
  std::array<uint8_t, 16> actual = HeaderMetaChecksum(header);
  if (actual == *meta.meta_checksum) return Status::Ok();
  char want[32], got[32];
  internal::HexLower(meta.meta_checksum->data(), 16, want);
  internal::HexLower(actual.data(), 16, got);
  return Reject(BlockFileError::kMetaChecksumMismatch,
                "metadata and tensor table hash to xxh3-128:" + std::string(got, 32) +
                    ", meta_checksum says xxh3-128:" + std::string(want, 32));
}

Status CheckLayout(const internal::ParsedHeader& header, const BlockMeta& meta,
                   const ModelLayout& layout) {
  if (header.layers != layout.layers.size()) {
    return Reject(
        BlockFileError::kLayoutMismatch,
        "file has " + Str(header.layers) + " layers, layout has " + Str(layout.layers.size()));
  }
  size_t i = 0;
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    const auto& states = layout.layers[l].states;
    for (size_t k = 0; k < states.size(); ++k, ++i) {
      if (i >= header.tensors.size() || header.tensors[i].view.layer != l) {
        return Reject(
            BlockFileError::kLayoutMismatch,
            "layer " + Str(l) + " has fewer states than the layout's " + Str(states.size()));
      }
      const TensorView& v = header.tensors[i].view;
      if (v.dtype != states[k].dtype || v.shape != states[k].shape) {
        return Reject(BlockFileError::kLayoutMismatch,
                      "tensor " + v.name + " dtype or shape differs from the layout");
      }
    }
    if (i < header.tensors.size() && header.tensors[i].view.layer == l) {
      return Reject(BlockFileError::kLayoutMismatch,
                    "layer " + Str(l) + " has more states than the layout's " + Str(states.size()));
    }
  }
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    if (meta.layer_cache_types[l] != layout.layers[l].cache_type) {
      return Reject(BlockFileError::kLayoutMismatch,
                    "layer_cache_types[" + Str(l) + "] is " +
                        internal::Quote(meta.layer_cache_types[l]) + ", the layout's is " +
                        internal::Quote(layout.layers[l].cache_type));
    }
  }
  if (meta.token_count > layout.block_tokens) {
    return Reject(BlockFileError::kLayoutMismatch, "token_count " + Str(meta.token_count) +
                                                       " exceeds the layout's block_tokens " +
                                                       Str(layout.block_tokens));
  }
  return Status::Ok();
}

// Everything but the data checksum. `data` (the data section) may be empty when
// only the header is at hand; then the views stay empty.
Status DecodeHeaderInto(std::span<const std::byte> prefix, uint64_t file_size,
                        const DecodeOptions& opts, internal::ParsedHeader* header,
                        DecodedBlock* out) {
  KVTIER_ASSIGN_OR_RETURN(uint64_t need, BlockHeaderPrefixBytes(prefix, file_size));
  if (prefix.size() < need) {
    return Status::InvalidArgument("block header needs " + Str(need) + " bytes, got " +
                                   Str(prefix.size()));
  }
  std::string_view json(reinterpret_cast<const char*>(prefix.data()) + 8, need - 8);
  if (const void* nul = std::memchr(json.data(), 0, json.size()); nul != nullptr) {
    return Reject(
        BlockFileError::kHeaderNul,
        "NUL byte in the header at byte " + Str(8 + static_cast<const char*>(nul) - json.data()));
  }
  size_t bad = 0;
  if (!internal::IsStrictUtf8(json, &bad)) {
    return Reject(BlockFileError::kHeaderNotUtf8, "header is not UTF-8 at byte " + Str(8 + bad));
  }
  KVTIER_RETURN_IF_ERROR(internal::ParseSafetensorsHeader(json, file_size - need, header));
  KVTIER_RETURN_IF_ERROR(ParseMetadata(*header, &out->meta));
  // Before anything trusts the metadata: an edited header is reported as
  // edited, not as whatever mismatch the edit causes.
  KVTIER_RETURN_IF_ERROR(CheckMetaChecksum(*header, out->meta));
  if (opts.expected_layout != nullptr) {
    KVTIER_RETURN_IF_ERROR(CheckLayout(*header, out->meta, *opts.expected_layout));
  }
  if (opts.expected_key != nullptr && out->meta.key != *opts.expected_key) {
    return Reject(BlockFileError::kKeyMismatch, "file holds key " + out->meta.key.Hex() +
                                                    ", expected " + opts.expected_key->Hex());
  }
  if (opts.expected_signature != nullptr &&
      out->meta.layout_signature != *opts.expected_signature) {
    return Reject(BlockFileError::kSignatureMismatch,
                  "layout_signature " + internal::Quote(out->meta.layout_signature, 96) +
                      " differs from the expected " +
                      internal::Quote(*opts.expected_signature, 96));
  }
  out->header_bytes = need - 8;
  out->tensors.clear();
  out->tensors.reserve(header->tensors.size());
  for (auto& t : header->tensors) {
    t.view.begin = t.begin;
    t.view.end = t.end;
    out->tensors.push_back(std::move(t.view));
  }
  return Status::Ok();
}

}  // namespace

Result<uint64_t> BlockHeaderPrefixBytes(std::span<const std::byte> first_bytes,
                                        uint64_t file_size) {
  if (file_size < 8) {
    return Reject(BlockFileError::kFileTooShort,
                  "file has " + Str(file_size) + " bytes, fewer than the 8-byte header length");
  }
  if (first_bytes.size() < 8) {
    return Status::InvalidArgument("need the first 8 bytes of the block file, got " +
                                   Str(first_bytes.size()));
  }
  uint64_t n = LoadLe64(first_bytes.data());
  if (n > kMaxBlockHeaderBytes) {
    return Reject(BlockFileError::kHeaderTooLarge,
                  "header length " + Str(n) + " exceeds the limit of " + Str(kMaxBlockHeaderBytes));
  }
  if (n > file_size - 8) {
    return Reject(
        BlockFileError::kHeaderPastEof,
        "header length " + Str(n) + " runs past the end of a " + Str(file_size) + "-byte file");
  }
  if (n % 8 != 0) {
    return Reject(BlockFileError::kHeaderMisaligned,
                  "header length " + Str(n) + " is not a multiple of 8");
  }
  return 8 + n;
}

Result<DecodedBlock> DecodeBlockHeader(std::span<const std::byte> prefix, uint64_t file_size,
                                       const DecodeOptions& opts) {
  internal::ParsedHeader header;
  return internal::DecodeBlockHeaderKeepHeader(prefix, file_size, opts, &header);
}

Result<DecodedBlock> DecodeBlock(std::span<const std::byte> file, const DecodeOptions& opts) {
  internal::ParsedHeader header;
  return internal::DecodeBlockKeepHeader(file, opts, &header);
}

bool MaskSelectsAll(const TensorMask& mask, size_t tensors) {
  if (mask.empty()) return true;
  if (mask.size() != tensors) return false;
  return std::all_of(mask.begin(), mask.end(), [](bool b) { return b; });
}

Result<std::vector<BlockFileRange>> SelectedTensorRanges(const DecodedBlock& header,
                                                         const TensorMask& mask) {
  if (!mask.empty() && mask.size() != header.tensors.size()) {
    return Status::InvalidArgument("tensor mask has " + Str(mask.size()) +
                                   " entries, the block has " + Str(header.tensors.size()) +
                                   " tensors");
  }
  const uint64_t base = 8 + header.header_bytes;
  std::vector<BlockFileRange> out;
  for (size_t i = 0; i < header.tensors.size(); ++i) {
    if (!mask.empty() && !mask[i]) continue;
    const TensorView& t = header.tensors[i];
    if (t.end == t.begin) continue;
    if (!out.empty() && out.back().end == base + t.begin) {
      out.back().end = base + t.end;
    } else {
      out.push_back({base + t.begin, base + t.end});
    }
  }
  return out;
}

Result<DecodedBlock> DecodeBlockTensors(std::span<const std::byte> file, const TensorMask& mask,
                                        const DecodeOptions& opts) {
  internal::ParsedHeader header;
  if (mask.empty()) return internal::DecodeBlockKeepHeader(file, opts, &header);
  DecodeOptions header_only = opts;
  header_only.verify_checksum = false;
  KVTIER_ASSIGN_OR_RETURN(DecodedBlock out,
                          internal::DecodeBlockKeepHeader(file, header_only, &header));
  if (mask.size() != out.tensors.size()) {
    return Status::InvalidArgument("tensor mask has " + Str(mask.size()) +
                                   " entries, the block has " + Str(out.tensors.size()) +
                                   " tensors");
  }
  if (MaskSelectsAll(mask, out.tensors.size())) {
    internal::ParsedHeader again;  // a ParsedHeader is filled once
    return internal::DecodeBlockKeepHeader(file, opts, &again);
  }
  if (out.meta.tensor_checksums.empty() || !out.meta.meta_checksum) {
    return Status::FailedPrecondition(
        "block file has no tensor_checksums (or no meta_checksum): read it whole");
  }
  if (!opts.verify_checksum) return out;
  for (size_t i = 0; i < out.tensors.size(); ++i) {
    if (!mask[i]) continue;
    const std::array<uint8_t, 16> actual = BlockChecksum(out.tensors[i].data);
    if (actual != out.meta.tensor_checksums[i]) {
      char want[32], got[32];
      internal::HexLower(out.meta.tensor_checksums[i].data(), 16, want);
      internal::HexLower(actual.data(), 16, got);
      return Reject(BlockFileError::kTensorChecksumMismatch,
                    "tensor " + out.tensors[i].name +
                        " hashes to xxh3-128:" + std::string(got, 32) +
                        ", tensor_checksums says xxh3-128:" + std::string(want, 32));
    }
  }
  return out;
}

namespace internal {

bool ParseCanonicalInt(std::string_view s, bool allow_negative, int64_t* out) {
  bool negative = false;
  if (allow_negative && !s.empty() && s[0] == '-') {
    negative = true;
    s.remove_prefix(1);
  }
  if (s.empty() || s.size() > 19) return false;
  if (s.size() > 1 && s[0] == '0') return false;
  if (negative && s == "0") return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  // 19 digits fit in u64; int64 allows up to 2^63-1 (and -2^63).
  if (v > static_cast<uint64_t>(INT64_MAX) + (negative ? 1 : 0)) return false;
  *out = negative ? static_cast<int64_t>(0 - v) : static_cast<int64_t>(v);
  return true;
}

bool ParseChecksum(std::string_view value, std::array<uint8_t, 16>* out) {
  return value.substr(0, kChecksumPrefix.size()) == kChecksumPrefix &&
         ParseHexLower(value.substr(kChecksumPrefix.size()), out->data(), out->size());
}

Result<DecodedBlock> DecodeBlockHeaderKeepHeader(std::span<const std::byte> prefix,
                                                 uint64_t file_size, const DecodeOptions& opts,
                                                 ParsedHeader* header) {
  DecodedBlock out;
  KVTIER_RETURN_IF_ERROR(DecodeHeaderInto(prefix, file_size, opts, header, &out));
  return out;
}

Result<DecodedBlock> DecodeBlockKeepHeader(std::span<const std::byte> file,
                                           const DecodeOptions& opts, ParsedHeader* header) {
  DecodedBlock out;
  KVTIER_RETURN_IF_ERROR(DecodeHeaderInto(file, file.size(), opts, header, &out));
  out.data = file.subspan(8 + out.header_bytes);
  // The table check proved the tensors tile the data section exactly.
  size_t offset = 0;
  for (TensorView& t : out.tensors) {
    size_t bytes = DTypeSize(t.dtype);
    for (uint64_t d : t.shape) bytes *= d;
    t.data = out.data.subspan(offset, bytes);
    offset += bytes;
  }
  if (opts.verify_checksum) KVTIER_RETURN_IF_ERROR(CheckDataChecksum(out));
  return out;
}

Status CheckDataChecksum(const DecodedBlock& block) {
  std::array<uint8_t, 16> actual = BlockChecksum(block.data);
  if (actual == block.meta.checksum) return Status::Ok();
  char want[32], got[32];
  internal::HexLower(block.meta.checksum.data(), 16, want);
  internal::HexLower(actual.data(), 16, got);
  return Reject(BlockFileError::kChecksumMismatch,
                "data section hashes to xxh3-128:" + std::string(got, 32) +
                    ", metadata says xxh3-128:" + std::string(want, 32));
}

}  // namespace internal
}  // namespace kvtier
