#include "kvtier/block_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/block_file_internal.h"
#include "kvtier/block_key.h"
#include "kvtier/layout.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using ::kvtier::testing::StatusIs;

constexpr BlockFileError kLastReason = BlockFileError::kTensorChecksumMismatch;

std::string SourceDir() {
  const char* dir = std::getenv("KVTIER_SOURCE_DIR");
  return dir != nullptr ? dir : ".";
}

std::vector<std::byte> ReadBytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(chars.size());
  if (!chars.empty()) std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

std::span<const std::byte> AsBytes(std::string_view s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

BlockFileError ReasonFromName(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(kLastReason); ++i) {
    auto e = static_cast<BlockFileError>(i);
    if (BlockFileErrorName(e) == name) return e;
  }
  ADD_FAILURE() << "unknown reason name " << name;
  return BlockFileError::kNone;
}

// 8-byte length + header text padded with spaces + data.
std::vector<std::byte> Pack(std::string header, std::span<const std::byte> data = {}) {
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<std::byte> out(8 + header.size() + data.size());
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<std::byte>(n >> (8 * i));
  std::memcpy(out.data() + 8, header.data(), header.size());
  if (!data.empty()) std::memcpy(out.data() + 8 + header.size(), data.data(), data.size());
  return out;
}

ModelLayout Tiny() { return ModelLayout::Preset("tiny").value(); }

// ---------------------------------------------------------------------------
// Reasons and their names.

TEST(BlockFileErrorTest, NamesAreDistinctAndRoundTripThroughStatus) {
  std::set<std::string_view> names;
  for (int i = 0; i <= static_cast<int>(kLastReason); ++i) {
    auto e = static_cast<BlockFileError>(i);
    std::string_view name = BlockFileErrorName(e);
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << name;
  }
  EXPECT_EQ(BlockFileErrorOf(Status::Ok()), BlockFileError::kNone);
  EXPECT_EQ(BlockFileErrorOf(Status::Corruption("checksum_mismatch")), BlockFileError::kNone);
  EXPECT_EQ(BlockFileErrorOf(Status::IOError("read x", 5)), BlockFileError::kNone);
}

// ---------------------------------------------------------------------------
// BlockBuffer: aligned, writable to the rounded-up page, both allocation
// paths (aligned_alloc below 128 KiB, malloc + manual alignment above).

TEST(BlockBufferTest, AlignedAndWritableAtEverySize) {
  for (size_t size : {size_t{0}, size_t{1}, size_t{4095}, size_t{4096}, size_t{131071},
                      size_t{131072}, size_t{200000}, size_t{3} << 20}) {
    SCOPED_TRACE(size);
    Result<BlockBuffer> b = BlockBuffer::Allocate(size);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(b->size(), size);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 4096, 0u);
    // The whole rounded-up page range is usable (O_DIRECT may fill it).
    size_t rounded = std::max<size_t>(4096, (size + 4095) / 4096 * 4096);
    std::memset(b->data(), 0x5a, rounded);
    BlockBuffer moved = std::move(*b);
    EXPECT_EQ(moved.size(), size);
    if (size > 0) {
      EXPECT_EQ(moved.data()[size - 1], std::byte{0x5a});
      moved.Truncate(size - 1);
      EXPECT_EQ(moved.size(), size - 1);
    }
  }
  std::vector<std::byte> src(300000);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<std::byte>(i * 7);
  Result<BlockBuffer> c = BlockBuffer::CopyOf(src);
  ASSERT_TRUE(c.ok());
  ASSERT_EQ(c->size(), src.size());
  EXPECT_EQ(std::memcmp(c->data(), src.data(), src.size()), 0);
  EXPECT_TRUE(BlockBuffer::Allocate(SIZE_MAX - 100).status().IsResourceExhausted());
}

// A header note: read back only by the decoder that left it; the first one
// stays; a non-const access to the bytes (data(), mutable_span(), Truncate)
// drops it; a move carries it.
TEST(BlockBufferTest, HeaderNoteIsTheFirstDecodersAndGoesWithAnyWrite) {
  const uint64_t mine = BlockBuffer::NewDecoderId(), other = BlockBuffer::NewDecoderId();
  EXPECT_NE(mine, other);
  BlockKey key;
  key.bytes[0] = 7;
  auto noted = [&]() {
    Result<BlockBuffer> b = BlockBuffer::Allocate(5000);
    EXPECT_TRUE(b.ok());
    b->NoteHeader({mine, key, 904, 4096});
    return std::move(b).value();
  };
  {
    const BlockBuffer b = noted();
    EXPECT_FALSE(b.HeaderNoteOf(other).has_value());
    std::optional<BlockBuffer::HeaderNote> n = b.HeaderNoteOf(mine);
    ASSERT_TRUE(n.has_value());
    EXPECT_EQ(n->key, key);
    EXPECT_EQ(n->data_offset, 904u);
    EXPECT_EQ(n->data_size, 4096u);
    b.NoteHeader({other, key, 1, 2});  // the first note stays
    EXPECT_FALSE(b.HeaderNoteOf(other).has_value());
    EXPECT_EQ(b.HeaderNoteOf(mine)->data_offset, 904u);
    (void)b.data();  // const access keeps it
    (void)b.span();
    EXPECT_TRUE(b.HeaderNoteOf(mine).has_value());
  }
  {
    BlockBuffer b = noted();
    BlockBuffer moved = std::move(b);
    EXPECT_FALSE(b.HeaderNoteOf(mine).has_value());  // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(moved.HeaderNoteOf(mine)->data_size, 4096u);
    BlockBuffer assigned = noted();
    assigned = std::move(moved);
    EXPECT_EQ(assigned.HeaderNoteOf(mine)->data_size, 4096u);
    (void)assigned.data();
    EXPECT_FALSE(assigned.HeaderNoteOf(mine).has_value());
    // Noted again after the write: a decoder checked the new bytes.
    assigned.NoteHeader({mine, key, 10, 20});
    EXPECT_EQ(assigned.HeaderNoteOf(mine)->data_offset, 10u);
  }
  {
    BlockBuffer b = noted();
    (void)b.mutable_span();
    EXPECT_FALSE(b.HeaderNoteOf(mine).has_value());
    BlockBuffer c = noted();
    c.Truncate(4999);
    EXPECT_FALSE(c.HeaderNoteOf(mine).has_value());
    BlockBuffer unnoted;
    BlockBuffer d = noted();
    d = std::move(unnoted);  // an assignment takes the other's (no) note
    EXPECT_FALSE(d.HeaderNoteOf(mine).has_value());
  }
}

// Threads noting and reading one shared buffer at once: every note read is
// whole, and the same (the first) on every thread. Under TSan: no race.
TEST(BlockBufferTest, HeaderNoteOfASharedBufferFromManyThreads) {
  auto shared = std::make_shared<const BlockBuffer>(*BlockBuffer::Allocate(4096));
  const uint64_t id = BlockBuffer::NewDecoderId();
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  std::vector<uint64_t> seen(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      BlockKey key;
      key.bytes[0] = static_cast<uint8_t>(t);
      for (int i = 0; i < 1000; ++i) {
        std::optional<BlockBuffer::HeaderNote> n = shared->HeaderNoteOf(id);
        if (!n) {
          shared->NoteHeader({id, key, uint64_t(100 + t), uint64_t(100 + t)});
          continue;
        }
        // Offset and size were written together, with the key.
        if (n->data_offset != n->data_size || n->key.bytes[0] + 100u != n->data_offset) {
          seen[t] = UINT64_MAX;
          return;
        }
        seen[t] = n->data_offset;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  const uint64_t first = shared->HeaderNoteOf(id)->data_offset;
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(seen[t], first) << "thread " << t;
}

// ---------------------------------------------------------------------------
// The hostile corpus: each file is rejected for its own reason.

class CorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = fs::path(SourceDir()) / "tests" / "corpus";
    std::ifstream in(corpus_ / "expected.json");
    ASSERT_TRUE(in.good()) << "missing " << corpus_ / "expected.json";
    expected_ = nlohmann::json::parse(in);
  }
  fs::path corpus_;
  nlohmann::json expected_;
};

TEST_F(CorpusTest, EveryHostileFileIsListedAndEveryListedFileExists) {
  std::set<std::string> on_disk, listed;
  for (const auto& e : fs::directory_iterator(corpus_ / "hostile")) {
    on_disk.insert(e.path().filename().string());
  }
  for (const auto& [name, _] : expected_["hostile"].items()) listed.insert(name);
  EXPECT_EQ(on_disk, listed);
  EXPECT_GE(listed.size(), 22u);
}

TEST_F(CorpusTest, EachHostileFileFailsWithItsReason) {
  int checked = 0;
  for (const auto& [name, want] : expected_["hostile"].items()) {
    SCOPED_TRACE(name);
    std::vector<std::byte> bytes = ReadBytes(corpus_ / "hostile" / name);
    DecodeOptions opts;
    std::optional<BlockKey> key;
    std::string signature;
    if (want.contains("expected_key")) {
      key = BlockKey::FromHex(want["expected_key"].get<std::string>());
      ASSERT_TRUE(key.has_value());
      opts.expected_key = &*key;
    }
    if (want.contains("expected_signature")) {
      signature = want["expected_signature"].get<std::string>();
      opts.expected_signature = &signature;
    }
    std::optional<ModelLayout> layout;
    if (want.contains("expected_layout")) {
      auto l = ModelLayout::Preset(want["expected_layout"].get<std::string>());
      ASSERT_TRUE(l.ok()) << l.status().ToString();
      layout = std::move(*l);
      opts.expected_layout = &*layout;
      // Without the layout the file is valid: only the layout check rejects it.
      DecodeOptions plain = opts;
      plain.expected_layout = nullptr;
      EXPECT_TRUE(DecodeBlock(bytes, plain).ok());
    }
    const BlockFileError reason = ReasonFromName(want["reason"].get<std::string>());
    Result<DecodedBlock> r = DecodeBlock(bytes, opts);
    ASSERT_FALSE(r.ok());
    EXPECT_TRUE(r.status().IsCorruption()) << r.status().ToString();
    EXPECT_EQ(BlockFileErrorName(BlockFileErrorOf(r.status())), BlockFileErrorName(reason))
        << r.status().ToString();
    // The header-only path agrees on everything but the checksum.
    Result<DecodedBlock> h = DecodeBlockHeader(bytes, bytes.size(), opts);
    if (reason == BlockFileError::kChecksumMismatch) {
      EXPECT_TRUE(h.ok()) << h.status().ToString();
    } else {
      ASSERT_THAT(h, StatusIs(StatusCode::kCorruption));
      EXPECT_EQ(BlockFileErrorOf(h.status()), reason) << h.status().ToString();
    }
    ++checked;
  }
  EXPECT_GE(checked, 22);
}

TEST_F(CorpusTest, ValidFilesDecode) {
  for (const auto& [name, _] : expected_["valid"].items()) {
    SCOPED_TRACE(name);
    std::vector<std::byte> bytes = ReadBytes(corpus_ / "valid" / name);
    Result<DecodedBlock> r = DecodeBlock(bytes, {});
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->data.data() + r->data.size(), bytes.data() + bytes.size());
  }
}

// tests/corpus/make_corpus.py (Python, hashlib, xxhash) wrote these files
// independently; our encoder must produce the very same bytes, and the keys
// must be the ones KeyChain derives.
TEST_F(CorpusTest, TinyFilesEqualOurEncodingByteForByte) {
  ModelLayout tiny = Tiny();
  NamespaceOptions ns_opts;
  ns_opts.model_id = "synth";
  ns_opts.layout_signature = tiny.Signature();
  ns_opts.block_tokens = tiny.block_tokens;
  Result<KeyChain> chain = KeyChain::Create(ns_opts);
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  std::vector<uint32_t> tokens(32);
  for (uint32_t i = 0; i < 32; ++i) tokens[i] = i;
  std::vector<BlockKey> keys = chain->KeysFor(tokens);
  ASSERT_EQ(keys.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    SCOPED_TRACE(b);
    std::vector<std::byte> file =
        ReadBytes(corpus_ / "valid" / ("tiny_block" + std::to_string(b) + ".safetensors"));
    BlockKey parent = b == 0 ? chain->ns() : keys[b - 1];
    Result<BlockBuffer> ours = MakeBlockFile(tiny, keys[b], parent, chain->ns(), 1700000000);
    ASSERT_TRUE(ours.ok()) << ours.status().ToString();
    ASSERT_EQ(ours->size(), file.size());
    EXPECT_EQ(std::memcmp(ours->data(), file.data(), file.size()), 0);
    EXPECT_TRUE(CheckBlockFile(file, tiny, keys[b]).ok());
  }
}

// The hybrid file mixes layer kinds and dtypes, a partial token count and
// meta states that need JSON escaping inside JSON.
TEST_F(CorpusTest, HybridFileEqualsOurEncodingByteForByte) {
  auto t = [](std::string role, DType d, std::vector<uint64_t> shape) {
    TensorSpec s;
    s.role = std::move(role);
    s.dtype = d;
    s.shape = std::move(shape);
    return s;
  };
  ModelLayout layout;
  layout.name = "hybrid";
  layout.block_tokens = 4;
  layout.layers.resize(3);
  layout.layers[0].cache_type = "sliding_window";
  layout.layers[0].states = {t("keys", DType::kF16, {2, 4, 8}),
                             t("values", DType::kF16, {2, 4, 8})};
  layout.layers[1].cache_type = "quantized_attention";
  layout.layers[1].states = {t("packed", DType::kU32, {2, 4, 2}),
                             t("scales", DType::kBF16, {2, 4, 1}),
                             t("biases", DType::kBF16, {2, 4, 1})};
  layout.layers[2].cache_type = "mamba";
  layout.layers[2].states = {t("conv", DType::kF32, {3, 5}), t("ssm", DType::kF8E4M3, {7})};
  ASSERT_TRUE(layout.Validate().ok()) << layout.Validate().ToString();

  std::vector<std::byte> file = ReadBytes(corpus_ / "valid" / "hybrid.safetensors");
  const std::string signature = layout.Signature();
  DecodeOptions opts;
  opts.expected_layout = &layout;
  opts.expected_signature = &signature;
  Result<DecodedBlock> d = DecodeBlock(file, opts);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->meta.token_count, 3u);
  EXPECT_EQ(d->meta.created_at, 1700000000);
  EXPECT_EQ(d->meta.layer_cache_types,
            (std::vector<std::string>{"sliding_window", "quantized_attention", "mamba"}));
  EXPECT_EQ(d->meta.layer_meta_states,
            (std::vector<std::vector<std::string>>{
                {"window=4", "offset=\"3\"\t\xc2\xb5"}, {}, {"conv_len=3"}}));
  EXPECT_EQ(d->meta.parent, d->meta.ns);
  ASSERT_EQ(d->tensors.size(), 7u);
  EXPECT_EQ(d->tensors[6].name, "layer_2_state_1");
  EXPECT_EQ(d->tensors[6].dtype, DType::kF8E4M3);
  EXPECT_EQ(d->tensors[6].shape, (std::vector<uint64_t>{7}));

  std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(layout, d->meta.key);
  std::vector<std::span<const std::byte>> spans(tensors.begin(), tensors.end());
  EncodeRequest req;
  req.layout = &layout;
  req.key = d->meta.key;
  req.parent = d->meta.parent;
  req.ns = d->meta.ns;
  req.token_count = 3;
  req.created_at = 1700000000;
  req.meta_states = d->meta.layer_meta_states;
  req.tensors = spans;
  Result<BlockBuffer> ours = EncodeBlock(req);
  ASSERT_TRUE(ours.ok()) << ours.status().ToString();
  ASSERT_EQ(ours->size(), file.size());
  EXPECT_EQ(std::memcmp(ours->data(), file.data(), file.size()), 0);
}

TEST(BlockFileTest, TooManyTensorsWithinTheHeaderLimit) {
  std::string header = "{";
  for (int i = 0; i <= 65536; ++i) {
    if (i > 0) header += ",";
    header += "\"" + std::to_string(i) + "\":0";
  }
  header += "}";
  ASSERT_LE(header.size(), kMaxBlockHeaderBytes);
  std::vector<std::byte> file = Pack(header);
  Result<DecodedBlock> r = DecodeBlock(file, {});
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption));
  EXPECT_EQ(BlockFileErrorOf(r.status()), BlockFileError::kTooManyTensors) << r.status().ToString();
}

TEST(BlockFileTest, AMillionTensorEntries) {
  std::string header = "{";
  header.reserve(50u << 20);
  for (int i = 0; i < 1000000; ++i) {
    if (i > 0) header += ",";
    header += "\"layer_" + std::to_string(i) +
              "_state_0\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[" +
              std::to_string(2 * i) + "," + std::to_string(2 * i + 2) + "]}";
  }
  header += "}";
  std::vector<std::byte> data(2000000);
  std::vector<std::byte> file = Pack(header, data);
  Result<DecodedBlock> r = DecodeBlock(file, {});
  ASSERT_THAT(r, StatusIs(StatusCode::kCorruption));
  EXPECT_EQ(BlockFileErrorOf(r.status()), BlockFileError::kHeaderTooLarge) << r.status().ToString();
}

// ---------------------------------------------------------------------------
// Round trips.

class RoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(RoundTripTest, EncodeDecodeGivesExactBytesAndViewsIntoTheBuffer) {
  ModelLayout layout = ModelLayout::Preset(GetParam()).value();
  const BlockKey key = TestBlockKey(1), parent = TestBlockKey(2), ns = TestBlockKey(3);
  std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(layout, key);
  std::vector<std::span<const std::byte>> spans(tensors.begin(), tensors.end());
  EncodeRequest req;
  req.layout = &layout;
  req.key = key;
  req.parent = parent;
  req.ns = ns;
  req.created_at = -5;
  req.tensors = spans;
  Result<BlockBuffer> buf = EncodeBlock(req);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 4096, 0u);

  const std::string signature = layout.Signature();
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &signature;
  opts.expected_layout = &layout;
  Result<DecodedBlock> d = DecodeBlock(buf->span(), opts);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->header_bytes % 8, 0u);
  EXPECT_EQ(buf->size(), 8 + d->header_bytes + layout.BlockBytes());
  EXPECT_EQ(d->data.data(), buf->data() + 8 + d->header_bytes);
  EXPECT_EQ(d->data.size(), layout.BlockBytes());
  EXPECT_EQ(d->meta.key, key);
  EXPECT_EQ(d->meta.parent, parent);
  EXPECT_EQ(d->meta.ns, ns);
  EXPECT_EQ(d->meta.token_count, layout.block_tokens);
  EXPECT_EQ(d->meta.layout_signature, signature);
  EXPECT_EQ(d->meta.created_at, -5);
  EXPECT_EQ(d->meta.checksum, BlockChecksum(d->data));
  ASSERT_EQ(d->meta.layer_cache_types.size(), layout.layers.size());
  ASSERT_EQ(d->meta.layer_meta_states.size(), layout.layers.size());
  ASSERT_EQ(d->tensors.size(), tensors.size());
  size_t t = 0;
  for (size_t l = 0; l < layout.layers.size(); ++l) {
    EXPECT_EQ(d->meta.layer_cache_types[l], layout.layers[l].cache_type);
    EXPECT_EQ(d->meta.layer_meta_states[l], layout.layers[l].meta_state);
    for (size_t k = 0; k < layout.layers[l].states.size(); ++k, ++t) {
      const TensorView& v = d->tensors[t];
      EXPECT_EQ(v.name, "layer_" + std::to_string(l) + "_state_" + std::to_string(k));
      EXPECT_EQ(v.layer, l);
      EXPECT_EQ(v.state, k);
      EXPECT_EQ(v.dtype, layout.layers[l].states[k].dtype);
      EXPECT_EQ(v.shape, layout.layers[l].states[k].shape);
      // A view into the buffer, holding exactly the input bytes.
      EXPECT_GE(v.data.data(), d->data.data());
      EXPECT_LE(v.data.data() + v.data.size(), d->data.data() + d->data.size());
      ASSERT_EQ(v.data.size(), tensors[t].size());
      EXPECT_EQ(std::memcmp(v.data.data(), tensors[t].data(), v.data.size()), 0);
    }
  }
  EXPECT_TRUE(CheckBlockFile(buf->span(), layout, key).ok());

  Result<DecodedBlock> h =
      DecodeBlockHeader(buf->span().first(8 + d->header_bytes), buf->size(), opts);
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->meta.checksum, d->meta.checksum);
  EXPECT_EQ(h->tensors.size(), d->tensors.size());
  EXPECT_TRUE(h->data.empty());
  EXPECT_TRUE(h->tensors[0].data.empty());
}

INSTANTIATE_TEST_SUITE_P(Presets, RoundTripTest, ::testing::Values("tiny", "qwen2.5-0.5b"));

// ---------------------------------------------------------------------------
// The checksum: XXH3-128, seed 0, canonical big-endian, as `xxhsum -H2`
// prints it. Vectors computed with xxhsum 0.8.1:
//   printf 'kvtier' | xxhsum -H2        → 2212090f62f31ca412c13ec0da2ff4f1
//   xxhsum -H2 /dev/null (empty input)  → 99aa06d3014798d86001c324468d497f
//   bytes i % 251 for i in 0..99999     → 54182c58bbb1337c42c23aeead96750d

std::string ChecksumHex(const std::array<uint8_t, 16>& a) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : a) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

TEST(BlockChecksumTest, MatchesXxhsumH2) {
  EXPECT_EQ(ChecksumHex(BlockChecksum(AsBytes("kvtier"))), "2212090f62f31ca412c13ec0da2ff4f1");
  EXPECT_EQ(ChecksumHex(BlockChecksum({})), "99aa06d3014798d86001c324468d497f");
  std::vector<std::byte> v(100000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<std::byte>(i % 251);
  EXPECT_EQ(ChecksumHex(BlockChecksum(v)), "54182c58bbb1337c42c23aeead96750d");
}

// ---------------------------------------------------------------------------
// meta_checksum (DESIGN.md §4). The vectors come from an independent script:
//   /usr/bin/python3 tests/corpus/make_corpus.py --vectors
// (Python, xxhash; docs/block-format.md shows them).

TEST(MetaChecksumTest, SmallVector) {
  internal::MetaChecksumInput in;
  in.AddEntry("a", "1");
  in.AddEntry("b", "2");
  const std::vector<uint64_t> shape = {2, 3};
  in.AddTensor("layer_0_state_0", "F16", shape, 0, 12);
  in.AddTensor("layer_0_state_1", "F32", {}, 12, 16);  // a scalar: empty shape
  const std::string want(
      "a\0"
      "1\0"
      "b\0"
      "2\0"
      "layer_0_state_0\0"
      "F16\0"
      "2,3\0"
      "0\0"
      "12\0"
      "layer_0_state_1\0"
      "F32\0"
      "\0"
      "12\0"
      "16\0",
      64);
  EXPECT_EQ(in.Bytes(), want);
  EXPECT_EQ(ChecksumHex(in.Digest()), "cd99411468fde30c124ba46ea4c11ba4");
}

// Tiny block 0 of tokens 0..15, model id "synth", created_at 1700000000 (the
// example of docs/block-format.md): what our encoder writes, and what the
// independently written corpus file holds.
TEST(MetaChecksumTest, EncoderWritesTheDocumentedVector) {
  ModelLayout tiny = Tiny();
  NamespaceOptions ns_opts;
  ns_opts.model_id = "synth";
  ns_opts.layout_signature = tiny.Signature();
  ns_opts.block_tokens = tiny.block_tokens;
  Result<KeyChain> chain = KeyChain::Create(ns_opts);
  ASSERT_TRUE(chain.ok()) << chain.status().ToString();
  std::vector<uint32_t> tokens(16);
  for (uint32_t i = 0; i < 16; ++i) tokens[i] = i;
  std::vector<BlockKey> keys = chain->KeysFor(tokens);
  ASSERT_EQ(keys.size(), 1u);
  Result<BlockBuffer> file = MakeBlockFile(tiny, keys[0], chain->ns(), chain->ns(), 1700000000);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  std::string_view text(reinterpret_cast<const char*>(file->data()), file->size());
  EXPECT_NE(text.find("\"checksum\":\"xxh3-128:481f9d5e0bc9e66e81a0d157b7817dd2\","
                      "\"tensor_checksums\":\"[\\\"xxh3-128:e01e0563ce6bbe8204c9b8452c78be5d\\\","
                      "\\\"xxh3-128:b0911385062fcf08e8c0e8f3130cb2e4\\\","
                      "\\\"xxh3-128:4f6cd6079b2a8c1ec1454e1e9f1e58a9\\\","
                      "\\\"xxh3-128:83f1ae10fcbada5e40e849174ee50ad3\\\"]\","
                      "\"meta_checksum\":\"xxh3-128:daf51ab4ca1032d4c1209be0f40ae760\"}"),
            std::string_view::npos)
      << text.substr(0, 900);
  Result<DecodedBlock> d = DecodeBlock(file->span(), {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_TRUE(d->meta.meta_checksum.has_value());
  EXPECT_EQ(ChecksumHex(*d->meta.meta_checksum), "daf51ab4ca1032d4c1209be0f40ae760");
}

TEST(MetaChecksumTest, LegacyFileWithoutItStaysReadable) {
  fs::path path = fs::path(SourceDir()) / "tests" / "corpus" / "valid" /
                  "tiny_block0_no_meta_checksum.safetensors";
  std::vector<std::byte> bytes = ReadBytes(path);
  ModelLayout tiny = Tiny();
  DecodeOptions opts;
  opts.expected_layout = &tiny;
  Result<DecodedBlock> d = DecodeBlock(bytes, opts);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->meta.meta_checksum.has_value());
  EXPECT_TRUE(DecodeBlockHeader(bytes, bytes.size(), opts).ok());
}

// ---------------------------------------------------------------------------
// Damage to a valid file.

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = Tiny();
    signature_ = layout_.Signature();
    key_ = TestBlockKey(7);
    Result<BlockBuffer> b = MakeBlockFile(layout_, key_, TestBlockKey(6), TestBlockKey(5), 42);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    file_.assign(b->data(), b->data() + b->size());
    opts_.expected_key = &key_;
    opts_.expected_signature = &signature_;
    opts_.expected_layout = &layout_;
    header_end_ = 8 + DecodeBlock(file_, opts_).value().header_bytes;
  }
  ModelLayout layout_;
  std::string signature_;
  BlockKey key_;
  std::vector<std::byte> file_;
  DecodeOptions opts_;
  size_t header_end_ = 0;
};

TEST_F(DamageTest, EveryDataBitFlipIsAChecksumMismatch) {
  for (size_t i = header_end_; i < file_.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> f = file_;
      f[i] ^= static_cast<std::byte>(1 << bit);
      Result<DecodedBlock> r = DecodeBlock(f, opts_);
      ASSERT_THAT(r, StatusIs(StatusCode::kCorruption)) << "byte " << i << " bit " << bit;
      ASSERT_EQ(BlockFileErrorOf(r.status()), BlockFileError::kChecksumMismatch);
    }
  }
}

// meta_checksum covers every metadata value and the tensor table, so a
// flipped header bit is always rejected, by both decode paths, even without
// the data checksum. The one exception is a flip inside the name
// "meta_checksum" itself: the file then reads as one written before
// meta_checksum existed, with every other byte as the writer left it.
TEST_F(DamageTest, EveryHeaderBitFlipIsRejectedUnlessItRenamesMetaChecksum) {
  std::string_view header(reinterpret_cast<const char*>(file_.data()), header_end_);
  const size_t name_at = header.find("\"meta_checksum\"") + 1;
  ASSERT_NE(name_at, 0u);
  const size_t name_end = name_at + std::string_view("meta_checksum").size();
  DecodeOptions no_data = opts_;
  no_data.verify_checksum = false;
  int rejected = 0, renamed = 0;
  for (size_t i = 0; i < header_end_; ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<std::byte> f = file_;
      f[i] ^= static_cast<std::byte>(1 << bit);
      Result<DecodedBlock> r = DecodeBlock(f, no_data);
      Result<DecodedBlock> h = DecodeBlockHeader(f, f.size(), opts_);
      ASSERT_EQ(r.ok(), h.ok()) << "byte " << i << " bit " << bit;
      if (!r.ok()) {
        ASSERT_NE(BlockFileErrorOf(r.status()), BlockFileError::kNone) << r.status().ToString();
        ASSERT_EQ(BlockFileErrorOf(r.status()), BlockFileErrorOf(h.status()));
        ++rejected;
        continue;
      }
      ASSERT_TRUE(i >= name_at && i < name_end)
          << "accepted a flip of byte " << i << " bit " << bit << ": " << header.substr(i, 40);
      EXPECT_FALSE(r->meta.meta_checksum.has_value());
      ASSERT_EQ(std::memcmp(r->data.data(), file_.data() + header_end_, r->data.size()), 0);
      ++renamed;
    }
  }
  EXPECT_GT(rejected, 8 * static_cast<int>(header_end_) - 8 * 13 - 1);
  EXPECT_GT(renamed, 0);
  EXPECT_LE(renamed, 8 * 13);
}

TEST_F(DamageTest, MetaChecksumIsVerifiedWithoutTheDataChecksum) {
  std::string text(reinterpret_cast<const char*>(file_.data()), header_end_);
  const size_t at = text.find("\"created_at\":\"42\"");
  ASSERT_NE(at, std::string::npos);
  std::vector<std::byte> f = file_;
  f[at + std::string_view("\"created_at\":\"4").size()] = std::byte{'3'};  // 42 -> 43
  DecodeOptions o = opts_;
  o.verify_checksum = false;
  Status s = DecodeBlock(f, o).status();
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kMetaChecksumMismatch) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("meta_checksum says xxh3-128:"));
  s = DecodeBlockHeader(f, f.size(), o).status();
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kMetaChecksumMismatch) << s.ToString();
}

TEST_F(DamageTest, EveryTruncationIsRejected) {
  for (size_t n = 0; n < file_.size(); ++n) {
    Result<DecodedBlock> r = DecodeBlock(std::span(file_).first(n), opts_);
    ASSERT_THAT(r, StatusIs(StatusCode::kCorruption)) << n;
    ASSERT_NE(BlockFileErrorOf(r.status()), BlockFileError::kNone) << n;
  }
}

TEST_F(DamageTest, ExpectationsAreChecked) {
  BlockKey other = TestBlockKey(8);
  DecodeOptions o = opts_;
  o.expected_key = &other;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file_, o).status()), BlockFileError::kKeyMismatch);

  std::string sig = signature_ + ";x";
  o = opts_;
  o.expected_signature = &sig;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file_, o).status()), BlockFileError::kSignatureMismatch);

  ModelLayout wider = ModelLayout::Preset("tiny", 32).value();
  o = opts_;
  o.expected_layout = &wider;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file_, o).status()), BlockFileError::kLayoutMismatch);
  ModelLayout qwen = ModelLayout::Preset("qwen2.5-0.5b").value();
  o.expected_layout = &qwen;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file_, o).status()), BlockFileError::kLayoutMismatch);
  ModelLayout narrower = Tiny();
  narrower.block_tokens = 8;  // same tensors, fewer tokens than the file claims
  o.expected_layout = &narrower;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file_, o).status()), BlockFileError::kLayoutMismatch);
  ModelLayout other_type = Tiny();
  other_type.layers[1].cache_type = "sliding_window";  // same tensors, another cache type
  o.expected_layout = &other_type;
  Status s = DecodeBlock(file_, o).status();
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kLayoutMismatch) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("layer_cache_types[1]"));

  // Without the checksum the flipped file passes: verify_checksum is honoured.
  std::vector<std::byte> f = file_;
  f.back() ^= std::byte{1};
  o = opts_;
  o.verify_checksum = false;
  EXPECT_TRUE(DecodeBlock(f, o).ok());
}

TEST_F(DamageTest, ReasonSurvivesWithContext) {
  std::vector<std::byte> f = file_;
  f.back() ^= std::byte{1};
  Status s = DecodeBlock(f, opts_).status().WithContext("/cache/ab/cd.safetensors");
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kChecksumMismatch);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("checksum_mismatch"));
}

TEST_F(DamageTest, HeaderPrefixHelpers) {
  Result<uint64_t> need = BlockHeaderPrefixBytes(std::span(file_).first(8), file_.size());
  ASSERT_TRUE(need.ok());
  EXPECT_EQ(*need, header_end_);
  EXPECT_TRUE(
      BlockHeaderPrefixBytes(std::span(file_).first(7), file_.size()).status().IsInvalidArgument());
  EXPECT_EQ(BlockFileErrorOf(BlockHeaderPrefixBytes(std::span(file_).first(7), 7).status()),
            BlockFileError::kFileTooShort);
  // A prefix shorter than the header is the caller's mistake, not corruption.
  Status s =
      DecodeBlockHeader(std::span(file_).first(header_end_ - 1), file_.size(), opts_).status();
  EXPECT_TRUE(s.IsInvalidArgument()) << s.ToString();
  // A file size that cannot hold the header is corruption.
  s = DecodeBlockHeader(file_, header_end_ - 8, opts_).status();
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kHeaderPastEof) << s.ToString();
}

// ---------------------------------------------------------------------------
// Structural rules not in the corpus.

TEST(BlockFileTest, ZeroTensorsAndEmptyData) {
  std::vector<std::byte> f = Pack(R"({"__metadata__":{}})");
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(f, {}).status()), BlockFileError::kMissingTensor);
}

TEST(BlockFileTest, ScalarTensorIsOneElement) {
  // A rank-0 shape is one element; the table must then span dtype size bytes.
  std::vector<std::byte> data(4);
  std::vector<std::byte> f =
      Pack(R"({"layer_0_state_0":{"dtype":"F32","shape":[],"data_offsets":[0,4]}})", data);
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(f, {}).status()), BlockFileError::kMissingMetadata);
  f = Pack(R"({"layer_0_state_0":{"dtype":"F32","shape":[],"data_offsets":[0,2]}})", data);
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(f, {}).status()), BlockFileError::kShapeSizeMismatch);
}

TEST(BlockFileTest, TensorNameGrammar) {
  for (std::string name : {"layer_0_state_", "layer__state_0", "layer_0_state_01",
                           "Layer_0_state_0", "layer_0_state_0 ", "layer_4294967296_state_0",
                           "layer_-1_state_0", "layer_0_state_0_state_0", "layer_0", "weights"}) {
    std::vector<std::byte> f =
        Pack("{\"" + name + "\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
             std::vector<std::byte>(1));
    EXPECT_EQ(BlockFileErrorOf(DecodeBlock(f, {}).status()), BlockFileError::kBadTensorName)
        << name;
  }
}

TEST(BlockFileTest, TooManyDimensions) {
  std::vector<std::byte> f =
      Pack(R"({"layer_0_state_0":{"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]}})",
           std::vector<std::byte>(1));
  EXPECT_EQ(BlockFileErrorOf(DecodeBlock(f, {}).status()), BlockFileError::kBadShape);
}

// ---------------------------------------------------------------------------
// Encoder argument checks.

class EncodeErrorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = Tiny();
    tensors_ = MakeBlockTensors(layout_, TestBlockKey(1));
    spans_.assign(tensors_.begin(), tensors_.end());
    req_.layout = &layout_;
    req_.key = TestBlockKey(1);
    req_.tensors = spans_;
  }
  ModelLayout layout_;
  std::vector<std::vector<std::byte>> tensors_;
  std::vector<std::span<const std::byte>> spans_;
  EncodeRequest req_;
};

TEST_F(EncodeErrorTest, ValidRequestEncodes) { EXPECT_TRUE(EncodeBlock(req_).ok()); }

TEST_F(EncodeErrorTest, NullLayout) {
  req_.layout = nullptr;
  EXPECT_TRUE(EncodeBlock(req_).status().IsInvalidArgument());
}

TEST_F(EncodeErrorTest, WrongTensorCount) {
  spans_.pop_back();
  req_.tensors = spans_;
  Status s = EncodeBlock(req_).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("3 tensors"));
}

TEST_F(EncodeErrorTest, WrongTensorSizeNamesTheTensor) {
  spans_[2] = spans_[2].first(100);
  req_.tensors = spans_;
  Status s = EncodeBlock(req_).status();
  EXPECT_TRUE(s.IsInvalidArgument());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("layer_1_state_0"));
}

TEST_F(EncodeErrorTest, TokenCountAboveBlockTokens) {
  req_.token_count = 17;
  EXPECT_TRUE(EncodeBlock(req_).status().IsInvalidArgument());
  req_.token_count = 5;
  Result<BlockBuffer> b = EncodeBlock(req_);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(DecodeBlock(b->span(), {}).value().meta.token_count, 5u);
}

TEST_F(EncodeErrorTest, MetaStates) {
  req_.meta_states = {{"a"}};
  EXPECT_TRUE(EncodeBlock(req_).status().IsInvalidArgument());
  req_.meta_states = {{"a"}, {std::string("b\0c", 3)}};
  EXPECT_THAT(EncodeBlock(req_).status().message(), ::testing::HasSubstr("NUL"));
  req_.meta_states = {{"a"}, {"\xff"}};
  EXPECT_THAT(EncodeBlock(req_).status().message(), ::testing::HasSubstr("UTF-8"));
  req_.meta_states = {{"pos=\"7\"", "\xe2\x82\xac"}, {}};
  Result<BlockBuffer> b = EncodeBlock(req_);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(DecodeBlock(b->span(), {}).value().meta.layer_meta_states, req_.meta_states);
}

}  // namespace
}  // namespace kvtier
