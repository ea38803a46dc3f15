#include "core/block_verifier.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

using Bytes = std::vector<std::byte>;

TensorSpec Spec(std::string role, DType d, std::vector<uint64_t> shape) {
  TensorSpec s;
  s.role = std::move(role);
  s.dtype = d;
  s.shape = std::move(shape);
  return s;
}

ModelLayout TinyVerifierLayout() { return ModelLayout::Preset("tiny").value(); }

// Three cache types, four dtypes, meta states that need JSON escapes (the
// escaped text sits outside the verifier's ranges).
ModelLayout Hybrid() {
  ModelLayout layout;
  layout.name = "hybrid";
  layout.block_tokens = 4;
  layout.layers.resize(3);
  layout.layers[0].cache_type = "sliding_window";
  layout.layers[0].meta_state = {"window=4", "offset=\"3\"\t\xc2\xb5"};
  layout.layers[0].states = {Spec("keys", DType::kF16, {2, 4, 8}),
                             Spec("values", DType::kF16, {2, 4, 8})};
  layout.layers[1].cache_type = "quantized_attention";
  layout.layers[1].states = {Spec("packed", DType::kU32, {2, 4, 2}),
                             Spec("scales", DType::kBF16, {2, 4, 1}),
                             Spec("biases", DType::kBF16, {2, 4, 1})};
  layout.layers[2].cache_type = "mamba";
  layout.layers[2].meta_state = {"conv_len=3"};
  layout.layers[2].states = {Spec("conv", DType::kF32, {3, 5}), Spec("ssm", DType::kF8E4M3, {7})};
  return layout;
}

Bytes Encode(const ModelLayout& layout, const BlockKey& key, const BlockKey& parent,
             int64_t created_at, uint32_t token_count = 0) {
  Result<BlockBuffer> b =
      MakeBlockFile(layout, key, parent, TestBlockKey(999), created_at, token_count);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  if (!b.ok()) return {};
  return Bytes(b->data(), b->data() + b->size());
}

uint64_t HeaderLength(const Bytes& file) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[i]);
  return n;
}

std::string HeaderText(const Bytes& file) {
  return std::string(reinterpret_cast<const char*>(file.data()) + 8, HeaderLength(file));
}

// The length of `header` + `header` + the data section of `file`.
Bytes Pack(const Bytes& file, const std::string& header) {
  const size_t data_at = 8 + HeaderLength(file);
  Bytes out(8 + header.size() + (file.size() - data_at));
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  std::memcpy(out.data() + 8 + header.size(), file.data() + data_at, file.size() - data_at);
  return out;
}

// As Pack, with `header`'s trailing spaces dropped and padding to a
// multiple of 8 added.
Bytes Repack(const Bytes& file, std::string header) {
  while (!header.empty() && header.back() == ' ') header.pop_back();
  header.append((8 - header.size() % 8) % 8, ' ');
  return Pack(file, header);
}

// The file as written before meta_checksum existed.
Bytes WithoutMetaChecksum(const Bytes& file) {
  std::string h = HeaderText(file);
  const size_t at = h.find(",\"meta_checksum\":\"");
  EXPECT_NE(at, std::string::npos);
  h.erase(at, h.find('"', at + 18) + 1 - at);
  return Repack(file, h);
}

// Offset in the file of the value of metadata `field`.
size_t ValueAt(const Bytes& file, std::string_view field) {
  const std::string h = HeaderText(file);
  const std::string pattern = "\"" + std::string(field) + "\":\"";
  const size_t at = h.find(pattern);
  EXPECT_NE(at, std::string::npos) << field;
  return 8 + at + pattern.size();
}

size_t ValueSize(const Bytes& file, std::string_view field) {
  const size_t at = ValueAt(file, field);
  size_t end = at;
  while (static_cast<char>(file[end]) != '"') ++end;
  return end - at;
}

struct Verdict {
  Status status;
  bool fast = false;  // answered from a template
};

// Verify and DecodeBlock agree exactly on `file`; returns Verify's verdict.
Verdict ExpectSameVerdict(BlockVerifier& verifier, const Bytes& file, const DecodeOptions& opts,
                          const std::string& what) {
  Result<DecodedBlock> want = DecodeBlock(file, opts);
  const uint64_t fast_before = verifier.fast_path_hits();
  const uint64_t full_before = verifier.full_decodes();
  VerifiedBlockInfo info;
  info.created_at = -77;
  Verdict got{verifier.Verify(file, opts, &info)};
  got.fast = verifier.fast_path_hits() == fast_before + 1;
  EXPECT_EQ(got.status.ok(), want.ok()) << what << ": " << got.status.ToString();
  EXPECT_EQ(got.status.code(), want.status().code()) << what;
  EXPECT_EQ(BlockFileErrorOf(got.status), BlockFileErrorOf(want.status())) << what;
  EXPECT_EQ(got.status.message(), want.status().message()) << what;
  // Exactly one path answered, and the fast one never with an error.
  EXPECT_EQ(verifier.fast_path_hits() - fast_before + verifier.full_decodes() - full_before, 1u)
      << what;
  if (got.fast) {
    EXPECT_TRUE(got.status.ok()) << what;
  }
  if (want.ok()) {
    EXPECT_EQ(info.created_at, want->meta.created_at) << what;
    EXPECT_EQ(info.has_meta_checksum, want->meta.meta_checksum.has_value()) << what;
    EXPECT_EQ(info.header_bytes, want->header_bytes) << what;
  } else {
    EXPECT_EQ(info.created_at, -77) << what;  // untouched on failure
  }
  return got;
}

// DecodeHeader(prefix, file_size) and DecodeBlockHeader agree exactly:
// the same Status, or the same result field by field (no data views).
Verdict ExpectSameHeader(BlockVerifier& verifier, std::span<const std::byte> prefix,
                         uint64_t file_size, const DecodeOptions& opts, const std::string& what) {
  Result<DecodedBlock> want = DecodeBlockHeader(prefix, file_size, opts);
  const uint64_t fast_before = verifier.fast_path_hits();
  const uint64_t full_before = verifier.full_decodes();
  Result<DecodedBlock> got = verifier.DecodeHeader(prefix, file_size, opts);
  Verdict v{got.status(), verifier.fast_path_hits() == fast_before + 1};
  EXPECT_EQ(verifier.fast_path_hits() - fast_before + verifier.full_decodes() - full_before, 1u)
      << what;
  EXPECT_EQ(got.status().code(), want.status().code()) << what << ": " << got.status().ToString();
  EXPECT_EQ(BlockFileErrorOf(got.status()), BlockFileErrorOf(want.status())) << what;
  EXPECT_EQ(got.status().message(), want.status().message()) << what;
  if (v.fast) {
    EXPECT_TRUE(got.ok()) << what;
  }
  if (!got.ok() || !want.ok()) return v;
  const BlockMeta& g = got->meta;
  const BlockMeta& w = want->meta;
  EXPECT_EQ(g.key, w.key) << what;
  EXPECT_EQ(g.parent, w.parent) << what;
  EXPECT_EQ(g.ns, w.ns) << what;
  EXPECT_EQ(g.token_count, w.token_count) << what;
  EXPECT_EQ(g.layout_signature, w.layout_signature) << what;
  EXPECT_EQ(g.layer_cache_types, w.layer_cache_types) << what;
  EXPECT_EQ(g.layer_meta_states, w.layer_meta_states) << what;
  EXPECT_EQ(g.created_at, w.created_at) << what;
  EXPECT_EQ(g.checksum, w.checksum) << what;
  EXPECT_EQ(g.meta_checksum, w.meta_checksum) << what;
  EXPECT_EQ(g.tensor_checksums, w.tensor_checksums) << what;
  EXPECT_EQ(got->header_bytes, want->header_bytes) << what;
  EXPECT_TRUE(got->data.empty()) << what;
  EXPECT_EQ(got->tensors.size(), want->tensors.size()) << what;
  for (size_t i = 0; i < std::min(got->tensors.size(), want->tensors.size()); ++i) {
    const TensorView& a = got->tensors[i];
    const TensorView& b = want->tensors[i];
    EXPECT_EQ(a.name, b.name) << what << " tensor " << i;
    EXPECT_EQ(a.layer, b.layer) << what << " tensor " << i;
    EXPECT_EQ(a.state, b.state) << what << " tensor " << i;
    EXPECT_EQ(a.dtype, b.dtype) << what << " tensor " << i;
    EXPECT_EQ(a.shape, b.shape) << what << " tensor " << i;
    EXPECT_EQ(a.begin, b.begin) << what << " tensor " << i;
    EXPECT_EQ(a.end, b.end) << what << " tensor " << i;
    EXPECT_TRUE(a.data.empty()) << what << " tensor " << i;
  }
  return v;
}

// Decode(file) and DecodeBlock agree exactly, data views included.
Verdict ExpectSameDecode(BlockVerifier& verifier, const Bytes& file, const DecodeOptions& opts,
                         const std::string& what) {
  Result<DecodedBlock> want = DecodeBlock(file, opts);
  const uint64_t fast_before = verifier.fast_path_hits();
  Result<DecodedBlock> got = verifier.Decode(file, opts);
  Verdict v{got.status(), verifier.fast_path_hits() == fast_before + 1};
  EXPECT_EQ(got.status().code(), want.status().code()) << what << ": " << got.status().ToString();
  EXPECT_EQ(BlockFileErrorOf(got.status()), BlockFileErrorOf(want.status())) << what;
  EXPECT_EQ(got.status().message(), want.status().message()) << what;
  if (!got.ok() || !want.ok()) return v;
  EXPECT_EQ(got->meta.key, want->meta.key) << what;
  EXPECT_EQ(got->meta.created_at, want->meta.created_at) << what;
  EXPECT_EQ(got->meta.tensor_checksums, want->meta.tensor_checksums) << what;
  EXPECT_EQ(got->header_bytes, want->header_bytes) << what;
  EXPECT_EQ(got->data.data(), want->data.data()) << what;
  EXPECT_EQ(got->data.size(), want->data.size()) << what;
  EXPECT_EQ(got->tensors.size(), want->tensors.size()) << what;
  for (size_t i = 0; i < std::min(got->tensors.size(), want->tensors.size()); ++i) {
    EXPECT_EQ(got->tensors[i].name, want->tensors[i].name) << what << " tensor " << i;
    EXPECT_EQ(got->tensors[i].data.data(), want->tensors[i].data.data()) << what << " tensor " << i;
    EXPECT_EQ(got->tensors[i].data.size(), want->tensors[i].data.size()) << what << " tensor " << i;
  }
  return v;
}

struct Mutant {
  std::string what;
  Bytes file;
};

Bytes SetByte(Bytes file, size_t at, char c) {
  file[at] = static_cast<std::byte>(c);
  return file;
}

Bytes ReplaceValue(const Bytes& file, std::string_view field, std::string_view value) {
  std::string h = HeaderText(file);
  const size_t at = ValueAt(file, field) - 8;
  h.replace(at, ValueSize(file, field), value);
  return Repack(file, h);
}

std::vector<Mutant> Mutants(const Bytes& file, const Bytes& other, uint64_t seed) {
  std::vector<Mutant> out;
  const bool has_meta = HeaderText(file).find("\"meta_checksum\"") != std::string::npos;
  std::vector<std::string_view> fields = {"key", "parent", "created_at", "checksum"};
  if (has_meta) fields.push_back("meta_checksum");
  // Every single-byte change inside each value: other digits (valid
  // tokens), uppercase, non-hex, JSON-significant and non-ASCII bytes.
  for (std::string_view field : fields) {
    const size_t at = ValueAt(file, field), size = ValueSize(file, field);
    for (size_t i = 0; i < size; ++i) {
      for (char c : {'0', 'f', 'A', '-', '"', '\\', '\0', '\xc3'}) {
        if (static_cast<char>(file[at + i]) == c) continue;
        out.push_back({std::string(field) + "[" + std::to_string(i) + "]=" + std::to_string(c),
                       SetByte(file, at + i, c)});
      }
    }
  }
  // Random single-byte changes anywhere in the header and its length.
  const size_t prefix = 8 + HeaderLength(file);
  uint64_t state = seed;
  for (int i = 0; i < 300; ++i) {
    const size_t at = SplitMix64Next(state) % prefix;
    const char c = static_cast<char>(SplitMix64Next(state));
    if (static_cast<char>(file[at]) == c) continue;
    out.push_back({"byte " + std::to_string(at) + "=" + std::to_string(c), SetByte(file, at, c)});
  }
  // Whitespace in the padding: still valid, another shape.
  out.push_back({"tab in padding", SetByte(file, prefix - 1, '\t')});
  // Whole-value edits.
  std::string key(reinterpret_cast<const char*>(file.data()) + ValueAt(file, "key"), 64);
  std::string upper = key;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  out.push_back({"uppercase key", ReplaceValue(file, "key", upper)});
  char escape[7];
  std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(key[0]));
  out.push_back({"escaped key", ReplaceValue(file, "key", escape + key.substr(1))});
  const std::string created(
      reinterpret_cast<const char*>(file.data()) + ValueAt(file, "created_at"),
      ValueSize(file, "created_at"));
  const bool negative = created[0] == '-';
  const std::string digits = negative ? created.substr(1) : created;
  const std::string sign = negative ? "-" : "";
  out.push_back({"leading zero", ReplaceValue(file, "created_at", sign + "0" + digits)});
  if (digits.size() > 1) {
    out.push_back({"leading zero, same length",
                   ReplaceValue(file, "created_at", sign + "0" + digits.substr(1))});
  }
  out.push_back({"negative zero", ReplaceValue(file, "created_at", "-0")});
  out.push_back({"created_at past int64", ReplaceValue(file, "created_at", "9223372036854775808")});
  out.push_back(
      {"created_at of one more digit", ReplaceValue(file, "created_at", sign + digits + "1")});
  const std::string checksum(reinterpret_cast<const char*>(file.data()) + ValueAt(file, "checksum"),
                             41);
  const std::string other_checksum(
      reinterpret_cast<const char*>(other.data()) + ValueAt(other, "checksum"), 41);
  out.push_back({"another block's checksum", ReplaceValue(file, "checksum", other_checksum)});
  if (has_meta) {
    const std::string meta(
        reinterpret_cast<const char*>(file.data()) + ValueAt(file, "meta_checksum"), 41);
    Bytes swapped = ReplaceValue(file, "checksum", meta);
    out.push_back({"swapped checksums", ReplaceValue(swapped, "meta_checksum", checksum)});
  }
  // Lengths.
  for (size_t n : {size_t{0}, size_t{7}, size_t{8}, prefix - 1, prefix, file.size() - 1}) {
    out.push_back({"truncated to " + std::to_string(n), Bytes(file.begin(), file.begin() + n)});
  }
  Bytes longer = file;
  longer.push_back(std::byte{0});
  out.push_back({"one byte more", longer});
  out.push_back({"header 8 bytes longer", Repack(file, HeaderText(file) + "        x")});
  // Padding counts for the length: the same JSON, N + 8.
  out.push_back({"8 more padding bytes", Pack(file, HeaderText(file) + std::string(8, ' '))});
  for (size_t at : {prefix, (prefix + file.size()) / 2, file.size() - 1}) {
    out.push_back({"data byte " + std::to_string(at) + " flipped",
                   SetByte(file, at, static_cast<char>(file[at] ^ std::byte{1}))});
  }
  return out;
}

struct Shape {
  std::string name;
  ModelLayout layout;
  uint32_t token_count;
};

// One block of a shape for the mutation tests: the file, another valid
// block of the same shape (`key`'s child), and options that expect it.
// Options point into it: not moved once made.
struct BlockCase {
  BlockCase(const Shape& shape, bool old_style, uint64_t key_base, int64_t created,
            int64_t other_created)
      : key(TestBlockKey(key_base)),
        wrong_key(TestBlockKey(key_base + 300)),
        signature(shape.layout.Signature()),
        layout(shape.layout),
        file(Encode(layout, key, TestBlockKey(key_base + 100), created, shape.token_count)),
        other(Encode(layout, TestBlockKey(key_base + 200), key, other_created, shape.token_count)) {
    if (old_style) {
      file = WithoutMetaChecksum(file);
      other = WithoutMetaChecksum(other);
    }
    full.expected_key = &key;
    full.expected_signature = &signature;
    wrong_key_opts = full;
    wrong_key_opts.expected_key = &wrong_key;
    with_layout = full;
    with_layout.expected_layout = &layout;
  }
  BlockCase(const BlockCase&) = delete;
  BlockCase& operator=(const BlockCase&) = delete;

  const BlockKey key, wrong_key;
  const std::string signature;
  const ModelLayout layout;
  Bytes file, other;
  DecodeOptions full, wrong_key_opts, with_layout;
};

std::vector<Shape> Shapes() {
  return {{"tiny", TinyVerifierLayout(), 0}, {"hybrid", Hybrid(), 0}, {"tiny, 5 of 16 tokens", TinyVerifierLayout(), 5}};
}

// ---------------------------------------------------------------------------

TEST(BlockVerifierTest, SameVerdictAsDecodeBlockOnEveryMutation) {
  const std::vector<int64_t> created = {1700000000, -1234567890123, 0, 7, INT64_MAX, INT64_MIN};
  size_t fast_mutants = 0;
  for (const Shape& shape : Shapes()) {
    ASSERT_TRUE(shape.layout.Validate().ok()) << shape.layout.Validate().ToString();
    const std::string signature = shape.layout.Signature();
    const std::string other_signature = signature + "x";
    for (bool old_style : {false, true}) {
      BlockVerifier verifier;
      for (size_t b = 0; b < created.size(); ++b) {
        const BlockCase c(shape, old_style, 100 + b, created[b], created[b] + (b % 2));
        const Bytes& file = c.file;
        const Bytes& other = c.other;
        const DecodeOptions& full = c.full;
        const DecodeOptions& wrong_key_opts = c.wrong_key_opts;
        const DecodeOptions& with_layout = c.with_layout;
        const DecodeOptions none = [] {
          DecodeOptions o;
          o.verify_checksum = false;
          return o;
        }();
        DecodeOptions wrong_signature = full;
        wrong_signature.expected_signature = &other_signature;

        const std::string base =
            shape.name + (old_style ? " (old style)" : "") + ", block " + std::to_string(b) + ": ";
        // The first block of each created_at length installs; then each
        // valid file is answered from its template.
        ExpectSameVerdict(verifier, file, full, base + "prime");
        EXPECT_TRUE(ExpectSameVerdict(verifier, file, full, base + "valid").fast) << base;
        EXPECT_TRUE(ExpectSameVerdict(verifier, other, none, base + "other").status.ok());
        EXPECT_FALSE(ExpectSameVerdict(verifier, file, wrong_key_opts, base + "wrong key").fast);
        EXPECT_FALSE(
            ExpectSameVerdict(verifier, file, wrong_signature, base + "wrong signature").fast);
        EXPECT_FALSE(ExpectSameVerdict(verifier, file, with_layout, base + "layout").fast);
        // Full mutations (ASan time): tiny's blocks of a positive and a
        // negative created_at, the first block of the others.
        if (b >= (shape.name == "tiny" ? 2u : 1u)) continue;
        for (const Mutant& m : Mutants(file, other, 1000 + b)) {
          for (const DecodeOptions* opts : {&full, &none}) {
            // The file itself answers from its template, so each mutant
            // meets a verifier that holds this shape.
            // (A valid mutant of another shape may have replaced it.)
            if (!ExpectSameVerdict(verifier, file, *opts, base + "before " + m.what).fast) {
              EXPECT_TRUE(ExpectSameVerdict(verifier, file, *opts, base + "again " + m.what).fast);
            }
            if (ExpectSameVerdict(verifier, m.file, *opts, base + m.what).fast) ++fast_mutants;
          }
        }
      }
    }
  }
  // Old-style files whose key, parent or created_at digits changed validly
  // and files whose data changed without verify_checksum are accepted from
  // the template.
  EXPECT_GT(fast_mutants, 100u);
}

// The header-only decode of a partial read and of the pool: every mutation
// of Verify's test, each tensor_checksums digit changed (a new valid value
// in an old-style file, a meta_checksum mismatch otherwise), and the header
// alone (8 + N bytes) or with the data behind it.
TEST(BlockVerifierTest, DecodeHeaderSameAsDecodeBlockHeaderOnEveryMutation) {
  const std::vector<int64_t> created = {1700000000, -1234567890123, 7};
  size_t fast_mutants = 0;
  size_t fast_sums = 0, old_style_digits = 0;
  for (const Shape& shape : Shapes()) {
    for (bool old_style : {false, true}) {
      BlockVerifier verifier;
      for (size_t b = 0; b < created.size(); ++b) {
        const BlockCase c(shape, old_style, 500 + b, created[b], created[b]);
        const Bytes& file = c.file;
        const Bytes& other = c.other;
        const DecodeOptions& full = c.full;
        const DecodeOptions& wrong_key_opts = c.wrong_key_opts;
        const DecodeOptions& with_layout = c.with_layout;
        const DecodeOptions none;
        const std::string base =
            shape.name + (old_style ? " (old style)" : "") + ", block " + std::to_string(b) + ": ";
        const std::span<const std::byte> header_only(file.data(), 8 + HeaderLength(file));
        ExpectSameHeader(verifier, header_only, file.size(), full, base + "prime");
        EXPECT_TRUE(
            ExpectSameHeader(verifier, header_only, file.size(), full, base + "header").fast);
        EXPECT_TRUE(ExpectSameHeader(verifier, file, file.size(), full, base + "whole file").fast);
        EXPECT_TRUE(ExpectSameHeader(verifier, other, other.size(), none, base + "other").fast);
        EXPECT_FALSE(
            ExpectSameHeader(verifier, file, file.size(), wrong_key_opts, base + "wrong key").fast);
        EXPECT_FALSE(
            ExpectSameHeader(verifier, file, file.size(), with_layout, base + "layout").fast);
        // Verify answers from the template DecodeHeader installed.
        EXPECT_TRUE(ExpectSameVerdict(verifier, file, full, base + "verify").fast);
        // A header shorter than 8 + N: DecodeBlockHeader's InvalidArgument.
        ExpectSameHeader(verifier, header_only.first(header_only.size() - 1), file.size(), full,
                         base + "short prefix");
        // Its value is JSON in a string: it ends at the first unescaped quote.
        const size_t sums = ValueAt(file, "tensor_checksums");
        size_t sums_size = 0;
        while (static_cast<char>(file[sums + sums_size]) != '"' ||
               static_cast<char>(file[sums + sums_size - 1]) == '\\') {
          ++sums_size;
        }
        ASSERT_GT(sums_size, 45u) << base;
        if (old_style)
          old_style_digits += 32 * DecodeBlockHeader(file, file.size(), none)->tensors.size();
        for (size_t i = 0; i < sums_size; ++i) {
          const char c = static_cast<char>(file[sums + i]);
          if (!std::isxdigit(static_cast<unsigned char>(c))) continue;
          const Bytes m = SetByte(file, sums + i, c == '0' ? '1' : '0');
          if (ExpectSameHeader(verifier, m, m.size(), full,
                               base + "tensor_checksums[" + std::to_string(i) + "]")
                  .fast) {
            ++fast_sums;
          }
        }
        if (b >= 1) continue;
        for (const Mutant& m : Mutants(file, other, 2000 + b)) {
          for (const DecodeOptions* opts : {&full, &none}) {
            if (!ExpectSameHeader(verifier, file, file.size(), *opts, base + "before " + m.what)
                     .fast) {
              EXPECT_TRUE(
                  ExpectSameHeader(verifier, file, file.size(), *opts, base + "again " + m.what)
                      .fast);
            }
            if (ExpectSameHeader(verifier, m.file, m.file.size(), *opts, base + m.what).fast) {
              ++fast_mutants;
            }
            ExpectSameDecode(verifier, m.file, *opts, base + "decode " + m.what);
          }
        }
      }
    }
  }
  EXPECT_GT(fast_mutants, 100u);
  // An old-style file takes each changed digit of an entry as its value
  // (the digits of "xxh3-128:" make it no checksum at all); with a
  // meta_checksum, none passes.
  EXPECT_EQ(fast_sums, old_style_digits);
  EXPECT_GT(old_style_digits, 0u);
}

// A verifier made for a layout answers calls expecting that layout from the
// templates a decode with it installed, and only those; any other layout is
// DecodeBlock's verdict every time.
TEST(BlockVerifierTest, ALayoutBoundVerifierChecksTheLayoutFromItsTemplates) {
  for (const Shape& shape : Shapes()) {
    const ModelLayout layout = shape.layout;
    ModelLayout longer = layout;
    longer.block_tokens = shape.token_count == 0 ? layout.block_tokens - 1 : 2;  // too few tokens
    ModelLayout other_type = layout;
    other_type.layers[0].cache_type += "x";
    const std::string signature = layout.Signature();
    BlockVerifier verifier(layout);
    ASSERT_NE(verifier.layout(), nullptr);
    DecodeOptions plain;
    plain.expected_signature = &signature;
    DecodeOptions checked = plain;
    checked.expected_layout = &layout;
    DecodeOptions wrong_tokens = plain;
    wrong_tokens.expected_layout = &longer;
    DecodeOptions wrong_type = plain;
    wrong_type.expected_layout = &other_type;
    std::vector<Bytes> files;
    for (int b = 0; b < 4; ++b) {
      files.push_back(Encode(layout, TestBlockKey(900 + b), TestBlockKey(950 + b), 1700000000 + b,
                             shape.token_count));
    }
    const std::string base = shape.name + ": ";
    // A template without the layout check: calls with the layout decode in
    // full, and the first that passes takes its place.
    EXPECT_FALSE(ExpectSameDecode(verifier, files[0], plain, base + "install").fast);
    EXPECT_TRUE(ExpectSameDecode(verifier, files[1], plain, base + "plain").fast);
    EXPECT_FALSE(ExpectSameDecode(verifier, files[1], checked, base + "upgrade").fast);
    EXPECT_EQ(verifier.template_count(), 1u);
    for (const Bytes& f : files) {
      EXPECT_TRUE(ExpectSameDecode(verifier, f, checked, base + "checked").fast);
      EXPECT_TRUE(ExpectSameDecode(verifier, f, plain, base + "plain again").fast);
      EXPECT_FALSE(ExpectSameDecode(verifier, f, wrong_type, base + "wrong cache type").fast);
      EXPECT_FALSE(ExpectSameDecode(verifier, f, wrong_tokens, base + "wrong block_tokens").fast);
      const std::span<const std::byte> header(f.data(), 8 + HeaderLength(f));
      EXPECT_TRUE(ExpectSameHeader(verifier, header, f.size(), checked, base + "header").fast);
    }
    EXPECT_EQ(verifier.template_count(), 1u);
    // Another verifier never takes a layout's call from a template.
    BlockVerifier any;
    EXPECT_FALSE(ExpectSameDecode(any, files[0], checked, base + "any, first").fast);
    EXPECT_FALSE(ExpectSameDecode(any, files[1], checked, base + "any, second").fast);
    EXPECT_EQ(any.template_count(), 0u);
    // A data byte flipped: DecodeBlock's checksum mismatch, also from a
    // template.
    Bytes flipped = files[2];
    flipped.back() ^= std::byte{1};
    Verdict v = ExpectSameDecode(verifier, flipped, checked, base + "flipped data");
    EXPECT_EQ(BlockFileErrorOf(v.status), BlockFileError::kChecksumMismatch) << base;
    DecodeOptions unchecked_data = checked;
    unchecked_data.verify_checksum = false;
    EXPECT_TRUE(ExpectSameDecode(verifier, flipped, unchecked_data, base + "no checksum").fast);
  }
}

// CopyVerify(file) gives DecodeBlock's verdict on the copy and leaves the
// copy byte for byte in dst (and nothing past it); returns its verdict.
Verdict ExpectSameCopyVerdict(BlockVerifier& verifier, const Bytes& file, const DecodeOptions& opts,
                              const std::string& what) {
  Result<DecodedBlock> want = DecodeBlock(file, opts);
  const uint64_t fast_before = verifier.fast_path_hits();
  Bytes dst(file.size() + 3, std::byte{0xA5});
  Verdict got{verifier.CopyVerify(file, dst, opts)};
  got.fast = verifier.fast_path_hits() == fast_before + 1;
  EXPECT_EQ(got.status.code(), want.status().code()) << what << ": " << got.status.ToString();
  EXPECT_EQ(BlockFileErrorOf(got.status), BlockFileErrorOf(want.status())) << what;
  EXPECT_EQ(got.status.message(), want.status().message()) << what;
  EXPECT_TRUE(std::equal(file.begin(), file.end(), dst.begin())) << what;
  EXPECT_EQ(dst[file.size()], std::byte{0xA5}) << what;
  if (got.fast) {
    EXPECT_TRUE(got.status.ok()) << what;
  }
  return got;
}

// A layout whose blocks span several copy chunks: tiny with 2048 tokens a
// block (512 KiB of data).
ModelLayout WideVerifierLayout() { return ModelLayout::Preset("tiny", 2048).value(); }

TEST(BlockVerifierTest, CopyVerifySameVerdictAsDecodeBlockOnEveryMutation) {
  // One block of each shape, with and without the data checksum (old-style
  // files take the same path: Verify's test has their mutations).
  size_t fast = 0;
  for (const Shape& shape : Shapes()) {
    BlockVerifier verifier;
    const BlockCase c(shape, /*old_style=*/false, 700, 1700000000, 1700000001);
    const std::string base = shape.name + ": ";
    const DecodeOptions none = [] {
      DecodeOptions o;
      o.verify_checksum = false;
      return o;
    }();
    ExpectSameCopyVerdict(verifier, c.file, c.full, base + "prime");
    EXPECT_TRUE(ExpectSameCopyVerdict(verifier, c.file, c.full, base + "valid").fast);
    EXPECT_FALSE(ExpectSameCopyVerdict(verifier, c.file, c.wrong_key_opts, base + "key").fast);
    for (const Mutant& m : Mutants(c.file, c.other, 77)) {
      for (const DecodeOptions* opts : {&c.full, &none}) {
        if (!ExpectSameCopyVerdict(verifier, c.file, *opts, base + "before " + m.what).fast) {
          EXPECT_TRUE(ExpectSameCopyVerdict(verifier, c.file, *opts, base + "again").fast);
        }
        if (ExpectSameCopyVerdict(verifier, m.file, *opts, base + m.what).fast) ++fast;
      }
    }
  }
  EXPECT_EQ(fast, 20u);  // the valid mutants a template answers (fixed seed)
}

// Blocks of several chunks: a flipped byte at each chunk edge, at the first
// and last data byte and in the header is DecodeBlock's failure; a valid
// block is answered from the template, its data hash taken while copying.
TEST(BlockVerifierTest, CopyVerifyCatchesAByteFlippedInAnyChunkOfALargeBlock) {
  const ModelLayout wide = WideVerifierLayout();
  const std::string signature = wide.Signature();
  const BlockKey key = TestBlockKey(1), other_key = TestBlockKey(2);
  const Bytes file = Encode(wide, key, other_key, 1700000000);
  const Bytes other = Encode(wide, other_key, key, 1700000005);
  const size_t chunk = BlockVerifier::kCopyChunk;
  ASSERT_GT(file.size(), 4 * chunk);
  const size_t data = 8 + HeaderLength(file);
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature;
  BlockVerifier verifier;
  EXPECT_FALSE(ExpectSameCopyVerdict(verifier, file, opts, "prime").fast);
  EXPECT_TRUE(ExpectSameCopyVerdict(verifier, file, opts, "valid").status.ok());
  EXPECT_EQ(verifier.fast_path_hits(), 1u);
  DecodeOptions other_opts = opts;
  other_opts.expected_key = &other_key;
  EXPECT_TRUE(ExpectSameCopyVerdict(verifier, other, other_opts, "another block").fast);
  std::vector<size_t> at = {3, data - 1, data, data + 1, file.size() - 1};
  for (size_t k = 1; k * chunk < file.size(); ++k) {
    at.push_back(k * chunk - 1);
    at.push_back(k * chunk);
  }
  for (size_t offset : at) {
    Bytes bad = file;
    bad[offset] ^= std::byte{0x40};
    const Verdict v = ExpectSameCopyVerdict(verifier, bad, opts, "byte " + std::to_string(offset));
    EXPECT_FALSE(v.status.ok()) << offset;
    if (offset >= data) {
      EXPECT_EQ(BlockFileErrorOf(v.status), BlockFileError::kChecksumMismatch) << offset;
    }
  }
  EXPECT_EQ(verifier.fast_path_hits(), 2u);
  // A destination one byte short: refused, nothing written.
  Bytes small(file.size() - 1, std::byte{0x11});
  Status s = verifier.CopyVerify(file, small, opts);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](std::byte b) { return b == std::byte{0x11}; }));
}

TEST(BlockVerifierTest, CountsEachPathExactly) {
  const ModelLayout tiny = TinyVerifierLayout();
  const std::string signature = tiny.Signature();
  BlockVerifier verifier;
  auto verify = [&](const Bytes& file, const BlockKey& key) {
    DecodeOptions opts;
    opts.expected_key = &key;
    opts.expected_signature = &signature;
    return verifier.Verify(file, opts);
  };
  EXPECT_EQ(verifier.template_count(), 0u);
  // 10-digit created_at, full blocks: one decode, then templates.
  for (uint64_t i = 0; i < 20; ++i) {
    const BlockKey key = TestBlockKey(i);
    ASSERT_TRUE(verify(Encode(tiny, key, TestBlockKey(i + 1000), 1700000000 + i), key).ok());
  }
  EXPECT_EQ(verifier.full_decodes(), 1u);
  EXPECT_EQ(verifier.fast_path_hits(), 19u);
  EXPECT_EQ(verifier.template_count(), 1u);
  // A partial last block, a created_at of another length and a negative
  // one: three more shapes, each decoded once.
  const BlockKey k1 = TestBlockKey(50), k2 = TestBlockKey(51), k3 = TestBlockKey(52);
  for (int round = 0; round < 2; ++round) {
    ASSERT_TRUE(verify(Encode(tiny, k1, k2, 1700000000, 3), k1).ok());
    ASSERT_TRUE(verify(Encode(tiny, k2, k3, 17, 0), k2).ok());
    ASSERT_TRUE(verify(Encode(tiny, k3, k1, -1700000000, 0), k3).ok());
  }
  EXPECT_EQ(verifier.full_decodes(), 4u);
  EXPECT_EQ(verifier.fast_path_hits(), 22u);
  EXPECT_EQ(verifier.template_count(), 4u);
  // The common shape is still held.
  ASSERT_TRUE(verify(Encode(tiny, k1, k2, 1700000001), k1).ok());
  EXPECT_EQ(verifier.fast_path_hits(), 23u);
  // A fifth shape replaces the oldest (the common one), round-robin.
  ASSERT_TRUE(verify(Encode(tiny, k1, k2, 1700000000, 4), k1).ok());
  EXPECT_EQ(verifier.full_decodes(), 5u);
  EXPECT_EQ(verifier.template_count(), 4u);
  ASSERT_TRUE(verify(Encode(tiny, k1, k2, 1700000001), k1).ok());
  EXPECT_EQ(verifier.full_decodes(), 6u);
  ASSERT_TRUE(verify(Encode(tiny, k1, k2, 1700000002, 4), k1).ok());
  EXPECT_EQ(verifier.fast_path_hits(), 24u);

  // Failures never come from a template and install nothing.
  Bytes bad = Encode(tiny, k1, k2, 1700000003);
  bad.back() ^= std::byte{1};
  Status s = verify(bad, k1);
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kChecksumMismatch) << s.ToString();
  EXPECT_EQ(verifier.full_decodes(), 7u);
  EXPECT_EQ(verifier.fast_path_hits(), 24u);

  // An escaped key is valid but makes no template.
  BlockVerifier fresh;
  Bytes escaped = Encode(tiny, k1, k2, 1700000000);
  std::string key_hex = k1.Hex();
  char escape[7];
  std::snprintf(escape, sizeof(escape), "\\u%04x", static_cast<unsigned>(key_hex[0]));
  escaped = ReplaceValue(escaped, "key", escape + key_hex.substr(1));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(fresh.Verify(escaped, {}).ok());
  EXPECT_EQ(fresh.full_decodes(), 2u);
  EXPECT_EQ(fresh.template_count(), 0u);

  // With an expected layout nothing is installed or answered from a template.
  DecodeOptions with_layout;
  with_layout.expected_layout = &tiny;
  const Bytes plain = Encode(tiny, k1, k2, 1700000000);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(fresh.Verify(plain, with_layout).ok());
  EXPECT_EQ(fresh.template_count(), 0u);
  EXPECT_EQ(fresh.fast_path_hits(), 0u);
}

TEST(BlockVerifierTest, OldStyleFilesTakeTheFastPath) {
  const ModelLayout tiny = TinyVerifierLayout();
  BlockVerifier verifier;
  VerifiedBlockInfo info;
  for (uint64_t i = 0; i < 3; ++i) {
    const BlockKey key = TestBlockKey(i);
    Bytes file = WithoutMetaChecksum(Encode(tiny, key, key, -5 - static_cast<int64_t>(i)));
    DecodeOptions opts;
    opts.expected_key = &key;
    ASSERT_TRUE(verifier.Verify(file, opts, &info).ok());
    EXPECT_FALSE(info.has_meta_checksum);
    EXPECT_EQ(info.created_at, -5 - static_cast<int64_t>(i));
    EXPECT_EQ(info.header_bytes, HeaderLength(file));
  }
  EXPECT_EQ(verifier.full_decodes(), 1u);
  EXPECT_EQ(verifier.fast_path_hits(), 2u);
}

// Reader threads verify different blocks (different keys and created_at
// clocks, some corrupt) through one verifier.
TEST(BlockVerifierTest, ManyThreadsThroughOneVerifier) {
  const ModelLayout tiny = TinyVerifierLayout();
  const std::string signature = tiny.Signature();
  constexpr int kThreads = 4, kBlocks = 60;
  struct Block {
    Bytes file;
    BlockKey key;
    Status want;
  };
  std::vector<std::vector<Block>> blocks(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kBlocks; ++i) {
      Block b;
      b.key = TestBlockKey(t * 1000 + i);
      b.file = Encode(tiny, b.key, TestBlockKey(t * 1000 + i + 1), 1700000000 + t * 100 + i,
                      i % 7 == 6 ? 9 : 0);
      if (i % 11 == 10) b.file[b.file.size() - 1 - i] ^= std::byte{0x80};
      DecodeOptions opts;
      opts.expected_key = &b.key;
      opts.expected_signature = &signature;
      b.want = DecodeBlock(b.file, opts).status();
      blocks[t].push_back(std::move(b));
    }
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  BlockVerifier verifier;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const Block& b : blocks[t]) {
          DecodeOptions opts;
          opts.expected_key = &b.key;
          opts.expected_signature = &signature;
          Status s = verifier.Verify(b.file, opts);
          if (s.code() != b.want.code() || s.message() != b.want.message()) ++wrong;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  size_t corrupt = 0;
  for (const auto& list : blocks) {
    for (const Block& b : list) corrupt += b.want.ok() ? 0 : 1;
  }
  ASSERT_GT(corrupt, 0u);
  const uint64_t calls = 3 * kThreads * kBlocks;
  EXPECT_EQ(verifier.fast_path_hits() + verifier.full_decodes(), calls);
  // Each corrupt file decodes in full every time; each of the two shapes at
  // most once per thread (threads that miss at once each decode).
  EXPECT_GE(verifier.full_decodes(), 3 * corrupt + 2);
  EXPECT_LE(verifier.full_decodes(), 3 * corrupt + 2 * kThreads);
  EXPECT_EQ(verifier.template_count(), 2u);
}

// Reader threads decode different blocks (their own keys and clocks; some
// with a flipped data byte, some with an edited header) through one verifier
// made for their layout, whole (Decode) and header only (DecodeHeader), as
// the pool's and the bindings' decoders do: DecodeBlock's and
// DecodeBlockHeader's verdicts every time, each block's own key and clock.
TEST(BlockVerifierTest, ManyThreadsDecodeThroughOneLayoutVerifier) {
  const ModelLayout tiny = TinyVerifierLayout();
  const std::string signature = tiny.Signature();
  constexpr int kThreads = 4, kBlocks = 60;
  struct Block {
    Bytes file;
    BlockKey key;
    Status want, want_header;
    int64_t created_at = 0;
  };
  std::vector<std::vector<Block>> blocks(kThreads);
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kBlocks; ++i) {
      Block b;
      b.key = TestBlockKey(t * 1000 + i + 50000);
      b.file = Encode(tiny, b.key, TestBlockKey(t * 1000 + i + 1), 1700000000 + t * 100 + i);
      if (i % 11 == 10) b.file.back() ^= std::byte{0x80};  // data: only Decode sees it
      if (i % 13 == 12) {  // a created_at digit: meta_checksum mismatch
        const size_t at = ValueAt(b.file, "created_at");
        b.file[at] = static_cast<std::byte>(static_cast<char>(b.file[at]) == '1' ? '2' : '1');
      }
      DecodeOptions opts;
      opts.expected_key = &b.key;
      opts.expected_signature = &signature;
      opts.expected_layout = &tiny;
      Result<DecodedBlock> want = DecodeBlock(b.file, opts);
      b.want = want.status();
      if (want.ok()) b.created_at = want->meta.created_at;
      b.want_header = DecodeBlockHeader(b.file, b.file.size(), opts).status();
      blocks[t].push_back(std::move(b));
    }
  }
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  BlockVerifier verifier(tiny);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round) {
        for (const Block& b : blocks[t]) {
          DecodeOptions opts;
          opts.expected_key = &b.key;
          opts.expected_signature = &signature;
          opts.expected_layout = &tiny;
          Result<DecodedBlock> d = verifier.Decode(b.file, opts);
          if (d.status().code() != b.want.code() || d.status().message() != b.want.message() ||
              (d.ok() && (d->meta.key != b.key || d->meta.created_at != b.created_at))) {
            ++wrong;
          }
          const std::span<const std::byte> header(b.file.data(), 8 + HeaderLength(b.file));
          Result<DecodedBlock> h = verifier.DecodeHeader(header, b.file.size(), opts);
          if (h.status().code() != b.want_header.code() ||
              h.status().message() != b.want_header.message() || (h.ok() && h->meta.key != b.key)) {
            ++wrong;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong.load(), 0);
  size_t bad_data = 0, bad_header = 0;
  for (const auto& list : blocks) {
    for (const Block& b : list) {
      bad_header += b.want_header.ok() ? 0 : 1;
      bad_data += b.want_header.ok() && !b.want.ok() ? 1 : 0;
    }
  }
  EXPECT_EQ(bad_header, static_cast<size_t>(kThreads * 4));  // i = 12, 25, 38, 51
  EXPECT_EQ(bad_data, static_cast<size_t>(kThreads * 5));    // i = 10, 21, 32, 43, 54
  EXPECT_GT(verifier.fast_path_hits(), 0u);
  EXPECT_EQ(verifier.template_count(), 1u);
}

}  // namespace
}  // namespace kvtier
