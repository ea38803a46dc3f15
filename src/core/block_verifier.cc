#include "core/block_verifier.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/block_file_internal.h"
#include "core/safetensors_header.h"

namespace kvtier {

// Named, not anonymous: BlockVerifier::Template (declared in the header, so
// not internal) holds these types, and a class with external linkage should
// not hold fields of internal types (-Wsubobject-linkage).
namespace block_verifier_detail {

// The metadata values that differ between blocks of one shape.
// tensor_checksums is held in the file escaped (its value is JSON inside a
// string); its range is the escaped bytes, which must be exactly the
// encoder's form (CanonicalTensorSums), and the meta_checksum input gets
// them unescaped.
enum Field : uint8_t {
  kKey,
  kParent,
  kCreatedAt,
  kChecksum,
  kTensorChecksums,
  kMetaChecksum,
  kFieldCount
};

constexpr std::array<std::string_view, kFieldCount> kFieldNames = {"key",
                                                                   "parent",
                                                                   "created_at",
                                                                   "checksum",
                                                                   internal::kTensorChecksumsField,
                                                                   internal::kMetaChecksumField};

// `["xxh3-128:<32 hex>",...]` with its quotes escaped, one entry per tensor.
constexpr std::string_view kEscapedQuote = "\\\"";
constexpr size_t kEscapedEntry = 2 + 9 + 32 + 2;

// True when `text` is the encoder's escaped tensor_checksums of n entries.
bool CanonicalTensorSums(std::string_view text, size_t n) {
  if (n == 0 || text.size() != 2 + n * kEscapedEntry + (n - 1)) return false;
  if (text.front() != '[' || text.back() != ']') return false;
  size_t at = 1;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && text[at++] != ',') return false;
    if (text.substr(at, 2) != kEscapedQuote ||
        text.substr(at + 2, internal::kChecksumPrefix.size()) != internal::kChecksumPrefix ||
        text.substr(at + 43, 2) != kEscapedQuote) {
      return false;
    }
    const std::array<uint8_t, 256>& values = internal::HexDigitValues();
    uint8_t bad = 0;
    for (size_t k = at + 11; k < at + 43; ++k) bad |= values[static_cast<uint8_t>(text[k])];
    if ((bad & 0xF0) != 0) return false;
    at += kEscapedEntry;
  }
  return true;
}

// Feeds `escaped` to `state` as its value: every backslash dropped (the
// canonical form escapes only quotes). Returns the unescaped size.
size_t UpdateUnescaped(XXH3_state_t* state, std::string_view escaped) {
  size_t size = 0;
  while (!escaped.empty()) {
    const size_t slash = escaped.find('\\');
    const std::string_view piece = escaped.substr(0, slash);
    internal::Xxh3Update128(state, piece.data(), piece.size());
    size += piece.size();
    if (slash == std::string_view::npos) break;
    escaped.remove_prefix(slash + 1);
  }
  return size;
}

// A value's bytes within the file (the 8-byte length included in offsets).
struct Range {
  uint32_t begin = 0;
  uint32_t size = 0;
  Field field = kKey;
};

// Where a value sits in the meta_checksum input.
struct MetaSlot {
  uint32_t begin = 0;
  Field field = kKey;
};

// One file's values in a template's ranges, parsed as DecodeBlock parses them.
struct FileValues {
  std::array<std::string_view, kFieldCount> text;
  BlockKey key;
  BlockKey parent;
  int64_t created_at = 0;
  std::array<uint8_t, 16> checksum{};
  std::array<uint8_t, 16> meta_checksum{};
};

bool Within(std::string_view inner, std::string_view outer) {
  const auto in = reinterpret_cast<uintptr_t>(inner.data());
  const auto out = reinterpret_cast<uintptr_t>(outer.data());
  return in >= out && in - out <= outer.size() && inner.size() <= outer.size() - (in - out);
}

}  // namespace block_verifier_detail

using namespace block_verifier_detail;  // NOLINT(google-build-using-namespace): as the anonymous namespace it was

struct BlockVerifier::Template {
  uint64_t file_size = 0;
  // DecodeBlockHeader's result for the template's file, without data views:
  // what DecodeHeader hands out, with a file's own values put in.
  DecodedBlock header;
  std::string prefix;                     // the first 8 + N bytes of the file it was made from
  std::array<Range, kFieldCount> ranges;  // by begin
  size_t range_count = 0;
  std::string signature;
  bool has_meta_checksum = false;
  size_t tensor_count = 0;
  bool has_tensor_checksums = false;
  // Installed by a decode that passed the verifier's own layout's check.
  bool layout_checked = false;
  // The meta_checksum input of the template's header; the file's values
  // replace the template's at `meta_slots` (same lengths, same order).
  std::string meta_input;
  std::array<MetaSlot, kFieldCount> meta_slots;  // by begin
  size_t meta_slot_count = 0;

  // True when a file of `file_size` bytes whose first bytes are `prefix`
  // (at least this template's prefix, or it is not a match) has this shape;
  // fills `*v` with its values.
  bool Match(std::span<const std::byte> prefix, uint64_t file_size, FileValues* v) const;
  // The per-file checks of DecodeBlock that depend on the values.
  // `known`, when not null, is the data checksum already computed (used
  // when it starts where this template's data section does).
  bool Passes(std::span<const std::byte> file, const DecodeOptions& opts, const FileValues& v,
              const KnownDataSum* known = nullptr) const;
  std::array<uint8_t, 16> MetaChecksum(const FileValues& v) const;
  bool SameShape(const Template& o) const;

  // The header of a file of this shape with the values `v`: the template's
  // decode with those values parsed in.
  DecodedBlock HeaderOf(const FileValues& v) const;

  // The template of a file of `file_size` bytes whose header (`prefix`, at
  // least 8 + N bytes) DecodeBlock or DecodeBlockHeader accepted as
  // `decoded` with `header`; null when a value is escaped (its text is not
  // the file's bytes).
  static std::shared_ptr<Template> Make(std::span<const std::byte> prefix, uint64_t file_size,
                                        const internal::ParsedHeader& header,
                                        const DecodedBlock& decoded);
};

bool BlockVerifier::Template::Match(std::span<const std::byte> bytes, uint64_t size,
                                    FileValues* v) const {
  if (size != file_size || bytes.size() < prefix.size()) return false;
  const char* f = reinterpret_cast<const char*>(bytes.data());
  size_t cursor = 0;
  for (size_t i = 0; i < range_count; ++i) {
    const Range& r = ranges[i];
    if (std::memcmp(f + cursor, prefix.data() + cursor, r.begin - cursor) != 0) return false;
    v->text[r.field] = std::string_view(f + r.begin, r.size);
    cursor = r.begin + r.size;
  }
  if (std::memcmp(f + cursor, prefix.data() + cursor, prefix.size() - cursor) != 0) return false;
  // The same predicates as DecodeBlock's rule 31 for these fields.
  if (!internal::ParseHexLower(v->text[kKey], v->key.bytes.data(), v->key.bytes.size()) ||
      !internal::ParseHexLower(v->text[kParent], v->parent.bytes.data(), v->parent.bytes.size()) ||
      !internal::ParseCanonicalInt(v->text[kCreatedAt], /*allow_negative=*/true, &v->created_at) ||
      !internal::ParseChecksum(v->text[kChecksum], &v->checksum)) {
    return false;
  }
  if (has_tensor_checksums && !CanonicalTensorSums(v->text[kTensorChecksums], tensor_count)) {
    return false;
  }
  return !has_meta_checksum || internal::ParseChecksum(v->text[kMetaChecksum], &v->meta_checksum);
}

std::array<uint8_t, 16> BlockVerifier::Template::MetaChecksum(const FileValues& v) const {
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  size_t cursor = 0;
  for (size_t i = 0; i < meta_slot_count; ++i) {
    const MetaSlot& s = meta_slots[i];
    internal::Xxh3Update128(&state, meta_input.data() + cursor, s.begin - cursor);
    const std::string_view value = v.text[s.field];
    if (s.field == kTensorChecksums) {
      cursor = s.begin + UpdateUnescaped(&state, value);
      continue;
    }
    internal::Xxh3Update128(&state, value.data(), value.size());
    cursor = s.begin + value.size();
  }
  internal::Xxh3Update128(&state, meta_input.data() + cursor, meta_input.size() - cursor);
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
  std::array<uint8_t, 16> out;
  std::memcpy(out.data(), c.digest, out.size());
  return out;
}

DecodedBlock BlockVerifier::Template::HeaderOf(const FileValues& v) const {
  DecodedBlock out = header;
  out.meta.key = v.key;
  out.meta.parent = v.parent;
  out.meta.created_at = v.created_at;
  out.meta.checksum = v.checksum;
  if (has_meta_checksum) out.meta.meta_checksum = v.meta_checksum;
  if (has_tensor_checksums) {
    // CanonicalTensorSums held: entry i's 32 hex digits at a fixed place.
    const std::string_view text = v.text[kTensorChecksums];
    for (size_t i = 0; i < tensor_count; ++i) {
      const size_t digits = 1 + i * (kEscapedEntry + 1) + 2 + internal::kChecksumPrefix.size();
      (void)internal::ParseHexLower(text.substr(digits, 32), out.meta.tensor_checksums[i].data(),
                                    out.meta.tensor_checksums[i].size());
    }
  }
  return out;
}

bool BlockVerifier::Template::Passes(std::span<const std::byte> file, const DecodeOptions& opts,
                                     const FileValues& v, const KnownDataSum* known) const {
  if (opts.expected_key != nullptr && v.key != *opts.expected_key) return false;
  if (opts.expected_signature != nullptr && *opts.expected_signature != signature) return false;
  if (has_meta_checksum && MetaChecksum(v) != v.meta_checksum) return false;
  if (!opts.verify_checksum) return true;
  if (known != nullptr && known->begin == prefix.size()) return known->sum == v.checksum;
  return BlockChecksum(file.subspan(prefix.size())) == v.checksum;
}

bool BlockVerifier::Template::SameShape(const Template& o) const {
  if (file_size != o.file_size || prefix.size() != o.prefix.size() ||
      range_count != o.range_count) {
    return false;
  }
  size_t cursor = 0;
  for (size_t i = 0; i < range_count; ++i) {
    const Range& a = ranges[i];
    const Range& b = o.ranges[i];
    if (a.begin != b.begin || a.size != b.size || a.field != b.field) return false;
    if (std::memcmp(prefix.data() + cursor, o.prefix.data() + cursor, a.begin - cursor) != 0) {
      return false;
    }
    cursor = a.begin + a.size;
  }
  return std::memcmp(prefix.data() + cursor, o.prefix.data() + cursor, prefix.size() - cursor) == 0;
}

BlockVerifier::~BlockVerifier() = default;

size_t BlockVerifier::template_count() const {
  MutexLock lock(&mu_);
  return static_cast<size_t>(std::count_if(templates_.begin(), templates_.end(),
                                           [](const auto& t) { return t != nullptr; }));
}

Status BlockVerifier::Verify(std::span<const std::byte> file, const DecodeOptions& opts,
                             VerifiedBlockInfo* info) {
  return VerifyImpl(file, opts, nullptr, info);
}

Status BlockVerifier::CopyVerify(std::span<const std::byte> src, std::span<std::byte> dst,
                                 const DecodeOptions& opts, VerifiedBlockInfo* info) {
  if (dst.size() < src.size()) {
    return Status::InvalidArgument("BlockVerifier::CopyVerify: a " + std::to_string(src.size()) +
                                   "-byte file into " + std::to_string(dst.size()) + " bytes");
  }
  const size_t size = src.size();
  std::byte* out = dst.data();
  if (size <= kCopyChunk) {
    // One chunk: the copy is in cache whole; a one-shot hash of it costs
    // less than a streaming state's setup.
    if (size > 0) std::memcpy(out, src.data(), size);
    return VerifyImpl(std::span<const std::byte>(out, size), opts, nullptr, info);
  }
  // Where the data section starts, read from the copy's own length field;
  // 0 while unknown or when the length cannot be right (DecodeBlock then
  // names the failure).
  uint64_t data_begin = 0;
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(kCopyChunk, size - done);
    std::memcpy(out + done, src.data() + done, n);
    if (done == 0 && n >= 8) {
      uint64_t len = 0;
      for (int i = 7; i >= 0; --i) len = len << 8 | std::to_integer<uint64_t>(out[i]);
      if (len <= size - 8) data_begin = 8 + len;
    }
    if (data_begin != 0 && done + n > data_begin) {
      const size_t from = std::max<size_t>(done, data_begin);
      internal::Xxh3Update128(&state, out + from, done + n - from);
    }
    done += n;
  }
  const std::span<const std::byte> file(out, size);
  if (data_begin == 0) return VerifyImpl(file, opts, nullptr, info);
  KnownDataSum known;
  known.begin = data_begin;
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, XXH3_128bits_digest(&state));
  std::memcpy(known.sum.data(), c.digest, known.sum.size());
  return VerifyImpl(file, opts, &known, info);
}

Status BlockVerifier::VerifyImpl(std::span<const std::byte> file, const DecodeOptions& opts,
                                 const KnownDataSum* known, VerifiedBlockInfo* info) {
  try {
    if (opts.expected_layout != nullptr) {
      return FullDecode(file, opts, AfterDecode::kKeepNothing, info);
    }
    const TemplateSlots slots = Slots();
    for (const auto& t : slots) {
      if (t == nullptr) continue;
      FileValues v;
      if (!t->Match(file, file.size(), &v)) continue;
      if (!t->Passes(file, opts, v, known)) {
        // DecodeBlock names the failure; the shape is already held.
        return FullDecode(file, opts, AfterDecode::kKeepNothing, info);
      }
      fast_path_hits_.fetch_add(1, std::memory_order_relaxed);
      if (info != nullptr) {
        info->created_at = v.created_at;
        info->has_meta_checksum = t->has_meta_checksum;
        info->header_bytes = t->prefix.size() - 8;
      }
      return Status::Ok();
    }
    return FullDecode(file, opts, AfterDecode::kInstallTemplate, info);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory verifying a block file");
  }
}

BlockVerifier::BlockVerifier(ModelLayout layout) : layout_(std::move(layout)) {}

BlockVerifier::TemplateSlots BlockVerifier::Slots() const {
  MutexLock lock(&mu_);
  return templates_;
}

Result<DecodedBlock> BlockVerifier::DecodeHeader(std::span<const std::byte> prefix,
                                                 uint64_t file_size, const DecodeOptions& opts) {
  try {
    DecodeOptions header_opts = opts;
    header_opts.verify_checksum = false;  // no data here
    // A layout to check: only this verifier's own, from templates that
    // passed its check.
    const bool by_layout = opts.expected_layout != nullptr;
    if (by_layout && (!layout_ || !(*opts.expected_layout == *layout_))) {
      return FullDecodeHeader(prefix, file_size, header_opts, AfterDecode::kKeepNothing, false);
    }
    const TemplateSlots slots = Slots();
    for (const auto& t : slots) {
      if (t == nullptr || (by_layout && !t->layout_checked)) continue;
      FileValues v;
      if (!t->Match(prefix, file_size, &v)) continue;
      if (!t->Passes(prefix, header_opts, v)) {
        return FullDecodeHeader(prefix, file_size, header_opts, AfterDecode::kKeepNothing, false);
      }
      DecodedBlock out = t->HeaderOf(v);
      fast_path_hits_.fetch_add(1, std::memory_order_relaxed);
      return out;
    }
    return FullDecodeHeader(prefix, file_size, header_opts, AfterDecode::kInstallTemplate,
                            by_layout);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("out of memory decoding a block header");
  }
}

Result<DecodedBlock> BlockVerifier::Decode(std::span<const std::byte> file,
                                           const DecodeOptions& opts) {
  // DecodeBlock is DecodeBlockHeader over the whole file, then the views and
  // the checksum (DecodeBlockKeepHeader).
  KVTIER_ASSIGN_OR_RETURN(DecodedBlock out, DecodeHeader(file, file.size(), opts));
  out.data = file.subspan(8 + out.header_bytes);
  for (TensorView& t : out.tensors) t.data = out.data.subspan(t.begin, t.end - t.begin);
  if (opts.verify_checksum) KVTIER_RETURN_IF_ERROR(internal::CheckDataChecksum(out));
  return out;
}

Result<DecodedBlock> BlockVerifier::FullDecodeHeader(std::span<const std::byte> prefix,
                                                     uint64_t file_size, const DecodeOptions& opts,
                                                     AfterDecode after, bool layout_checked) {
  full_decodes_.fetch_add(1, std::memory_order_relaxed);
  internal::ParsedHeader header;
  Result<DecodedBlock> decoded =
      internal::DecodeBlockHeaderKeepHeader(prefix, file_size, opts, &header);
  if (!decoded.ok() || after != AfterDecode::kInstallTemplate) return decoded;
  try {
    std::shared_ptr<Template> t = Template::Make(prefix, file_size, header, *decoded);
    if (t != nullptr) {
      t->layout_checked = layout_checked;
      Install(std::move(t));
    }
  } catch (const std::bad_alloc&) {
    // The verdict stands; the next header of this shape decodes in full.
  }
  return decoded;
}

Status BlockVerifier::FullDecode(std::span<const std::byte> file, const DecodeOptions& opts,
                                 AfterDecode after, VerifiedBlockInfo* info) {
  full_decodes_.fetch_add(1, std::memory_order_relaxed);
  internal::ParsedHeader header;
  Result<DecodedBlock> decoded = internal::DecodeBlockKeepHeader(file, opts, &header);
  if (!decoded.ok()) return decoded.status();
  if (info != nullptr) {
    info->created_at = decoded->meta.created_at;
    info->has_meta_checksum = decoded->meta.meta_checksum.has_value();
    info->header_bytes = decoded->header_bytes;
  }
  if (after == AfterDecode::kInstallTemplate) {
    try {
      std::shared_ptr<Template> t = Template::Make(file, file.size(), header, *decoded);
      if (t != nullptr) Install(std::move(t));
    } catch (const std::bad_alloc&) {
      // The verdict stands; the next file of this shape decodes in full.
    }
  }
  return Status::Ok();
}

void BlockVerifier::Install(std::shared_ptr<const Template> t) {
  std::shared_ptr<const Template> evicted;  // released after the lock
  MutexLock lock(&mu_);
  for (auto& held : templates_) {
    // Threads that missed at once on the same shape each bring a copy; one
    // that passed the layout check takes the place of one that did not.
    if (held != nullptr && held->SameShape(*t)) {
      if (t->layout_checked && !held->layout_checked) evicted = std::exchange(held, std::move(t));
      return;
    }
  }
  evicted = std::exchange(templates_[next_slot_], std::move(t));
  next_slot_ = (next_slot_ + 1) % kMaxTemplates;
}

std::shared_ptr<BlockVerifier::Template> BlockVerifier::Template::Make(
    std::span<const std::byte> file, uint64_t file_size, const internal::ParsedHeader& header,
    const DecodedBlock& decoded) {
  const size_t prefix_size = 8 + decoded.header_bytes;
  if (file.size() < prefix_size) return nullptr;  // not the bytes it decoded
  const char* base = reinterpret_cast<const char*>(file.data());
  const std::string_view json(base + 8, decoded.header_bytes);
  auto t = std::make_shared<Template>();
  t->has_meta_checksum = decoded.meta.meta_checksum.has_value();
  for (size_t f = 0; f < kFieldCount; ++f) {
    const auto it = std::find_if(header.metadata.begin(), header.metadata.end(),
                                 [&](const auto& kv) { return kv.first == kFieldNames[f]; });
    if (it == header.metadata.end()) {
      if (f == kMetaChecksum || f == kTensorChecksums) continue;
      return nullptr;  // DecodeBlock requires the others
    }
    if (f == kTensorChecksums) {
      // Escaped, so not in the file as parsed: find the raw value after its
      // key (a raw `":"` cannot occur inside a JSON string).
      const std::string needle = "\"" + std::string(kFieldNames[f]) + "\":\"";
      const size_t at = json.find(needle);
      if (at == std::string_view::npos) return nullptr;
      // The canonical form's length; its own quotes are escaped, so the
      // value must end there, at an unescaped quote.
      const size_t n = decoded.tensors.size();
      const size_t begin = at + needle.size();
      const size_t end = begin + 2 + n * kEscapedEntry + (n == 0 ? 0 : n - 1);
      if (n == 0 || end >= json.size() || json[end] != '"') return nullptr;
      const std::string_view raw = json.substr(begin, end - begin);
      if (!CanonicalTensorSums(raw, n) ||
          raw.size() - 2 * decoded.tensors.size() != it->second.size()) {
        return nullptr;
      }
      t->has_tensor_checksums = true;
      t->ranges[t->range_count++] = {static_cast<uint32_t>(raw.data() - base),
                                     static_cast<uint32_t>(raw.size()), static_cast<Field>(f)};
      continue;
    }
    // An escaped value lives in the parser's arena, not in the file.
    if (!Within(it->second, json)) return nullptr;
    t->ranges[t->range_count++] = {static_cast<uint32_t>(it->second.data() - base),
                                   static_cast<uint32_t>(it->second.size()), static_cast<Field>(f)};
  }
  std::sort(t->ranges.begin(), t->ranges.begin() + t->range_count,
            [](const Range& a, const Range& b) { return a.begin < b.begin; });
  t->file_size = file_size;
  t->tensor_count = decoded.tensors.size();
  t->prefix.assign(base, prefix_size);
  t->signature = decoded.meta.layout_signature;
  t->header = decoded;
  t->header.data = {};  // views into the template's file, which goes
  for (TensorView& tv : t->header.tensors) tv.data = {};
  if (!t->has_meta_checksum) return t;

  // As DecodeBlock builds it: metadata but meta_checksum in key order, then
  // the tensor table in file order.
  std::vector<std::pair<std::string_view, std::string_view>> entries;
  entries.reserve(header.metadata.size());
  for (const auto& kv : header.metadata) {
    if (kv.first != internal::kMetaChecksumField) entries.push_back(kv);
  }
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  internal::MetaChecksumInput input;
  size_t at = 0;
  for (const auto& [k, v] : entries) {
    input.AddEntry(k, v);
    for (size_t f = 0; f < kMetaChecksum; ++f) {  // every field but meta_checksum
      if (k == kFieldNames[f]) {
        t->meta_slots[t->meta_slot_count++] = {static_cast<uint32_t>(at + k.size() + 1),
                                               static_cast<Field>(f)};
      }
    }
    at += k.size() + v.size() + 2;
  }
  for (const TensorView& tv : decoded.tensors) {
    input.AddTensor(tv.name, DTypeName(tv.dtype), tv.shape, tv.begin, tv.end);
  }
  t->meta_input = input.Bytes();
  // The template's own values must give the template's meta_checksum, or
  // this input is not DecodeBlock's.
  FileValues own;
  for (size_t i = 0; i < t->range_count; ++i) {
    const Range& r = t->ranges[i];
    own.text[r.field] = std::string_view(t->prefix.data() + r.begin, r.size);
  }
  if (t->MetaChecksum(own) != *decoded.meta.meta_checksum) return nullptr;
  return t;
}

}  // namespace kvtier
