// tensor_checksums (DESIGN.md §4) and the partial decode: what the encoder
// writes, what DecodeBlockTensors verifies and what it never looks at.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/block_file_internal.h"
#include "core/block_verifier.h"
#include "kvtier/block_file.h"
#include "kvtier/layout.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

// Three layers of different sizes: 2 × [1,4,8] F16, 1 × [3] F32, 2 × [1,4,2] U32.
ModelLayout Small() {
  ModelLayout l = ModelLayout::Attention("small", 3, 1, 8, DType::kF16, 4);
  l.layers[1].cache_type = "mamba";
  l.layers[1].states = {TensorSpec{"ssm", DType::kF32, {3}, -1}};
  l.layers[2].states[0] = TensorSpec{"keys", DType::kU32, {1, 4, 2}, 1};
  l.layers[2].states[1] = TensorSpec{"values", DType::kU32, {1, 4, 2}, 1};
  return l;
}

std::vector<std::byte> File(const ModelLayout& layout, uint64_t i = 1) {
  Result<BlockBuffer> b =
      MakeBlockFile(layout, TestBlockKey(i), TestBlockKey(100), TestBlockKey(100), 1700000000);
  EXPECT_TRUE(b.ok());
  return std::vector<std::byte>(b->data(), b->data() + b->size());
}

std::string Hex(const std::array<uint8_t, 16>& a) {
  char out[32];
  internal::HexLower(a.data(), 16, out);
  return std::string(out, 32);
}

TEST(TensorChecksumsTest, EncoderWritesOnePerTensorOverItsBytes) {
  const ModelLayout layout = Small();
  std::vector<std::byte> file = File(layout);
  Result<DecodedBlock> d = DecodeBlock(file, {});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->meta.tensor_checksums.size(), 5u);
  ASSERT_TRUE(d->meta.meta_checksum.has_value());
  std::string header(reinterpret_cast<const char*>(file.data()) + 8, d->header_bytes);
  std::string expected = "\"tensor_checksums\":\"[";
  for (size_t i = 0; i < d->tensors.size(); ++i) {
    EXPECT_EQ(d->meta.tensor_checksums[i], BlockChecksum(d->tensors[i].data)) << i;
    if (i > 0) expected += ",";
    expected += "\\\"xxh3-128:" + Hex(BlockChecksum(d->tensors[i].data)) + "\\\"";
  }
  expected += "]\",\"meta_checksum\":";
  EXPECT_THAT(header, HasSubstr(expected));
  // Offsets are known from the header alone.
  EXPECT_EQ(d->tensors[2].begin, 128u);
  EXPECT_EQ(d->tensors[2].end, 140u);
}

TEST(TensorChecksumsTest, MetaChecksumCoversThem) {
  std::vector<std::byte> file = File(Small());
  Result<DecodedBlock> d = DecodeBlock(file, {});
  ASSERT_TRUE(d.ok());
  std::string header(reinterpret_cast<const char*>(file.data()) + 8, d->header_bytes);
  const std::string first = Hex(d->meta.tensor_checksums[0]);
  const size_t at = header.find(first);
  ASSERT_NE(at, std::string::npos);
  // Another valid hex digit: the header still parses, only meta_checksum tells.
  file[8 + at] = static_cast<std::byte>(header[at] == '0' ? '1' : '0');
  DecodeOptions no_data;
  no_data.verify_checksum = false;
  Result<DecodedBlock> r = DecodeBlock(file, no_data);
  EXPECT_EQ(BlockFileErrorOf(r.status()), BlockFileError::kMetaChecksumMismatch)
      << r.status().ToString();
  TensorMask mask = {false, false, true, false, false};
  EXPECT_EQ(BlockFileErrorOf(DecodeBlockTensors(file, mask, {}).status()),
            BlockFileError::kMetaChecksumMismatch);
}

TEST(PartialDecodeTest, RangesMergeNeighboursInFileOrder) {
  std::vector<std::byte> file = File(Small());
  Result<uint64_t> need = BlockHeaderPrefixBytes(file, file.size());
  ASSERT_TRUE(need.ok());
  Result<DecodedBlock> h =
      DecodeBlockHeader(std::span(file).first(static_cast<size_t>(*need)), file.size(), {});
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  const uint64_t base = *need;
  // Tensors: [0,64) [64,128) [128,140) [140,172) [172,204).
  using R = BlockFileRange;
  EXPECT_EQ(*SelectedTensorRanges(*h, {true, true, false, false, true}),
            (std::vector<R>{{base, base + 128}, {base + 172, base + 204}}));
  EXPECT_EQ(*SelectedTensorRanges(*h, {false, false, true, false, false}),
            (std::vector<R>{{base + 128, base + 140}}));
  EXPECT_EQ(*SelectedTensorRanges(*h, {}), (std::vector<R>{{base, base + 204}}));
  EXPECT_TRUE(SelectedTensorRanges(*h, {false, false, false, false, false})->empty());
  EXPECT_THAT(SelectedTensorRanges(*h, {true}), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_TRUE(MaskSelectsAll({}, 5));
  EXPECT_TRUE(MaskSelectsAll({true, true}, 2));
  EXPECT_FALSE(MaskSelectsAll({true, false}, 2));
  EXPECT_FALSE(MaskSelectsAll({true}, 2));
}

// Every byte of every tensor flipped in turn: a partial decode fails exactly
// when the byte belongs to a selected tensor; a whole decode always fails.
TEST(PartialDecodeTest, VerifiesSelectedTensorsAndNeverLooksAtOthers) {
  const ModelLayout layout = Small();
  const std::vector<std::byte> good = File(layout);
  Result<DecodedBlock> d = DecodeBlock(good, {});
  ASSERT_TRUE(d.ok());
  const std::string signature = layout.Signature();
  DecodeOptions opts;
  opts.expected_key = &d->meta.key;
  opts.expected_signature = &signature;
  opts.expected_layout = &layout;
  const TensorMask mask = {false, true, true, false, false};
  ASSERT_TRUE(DecodeBlockTensors(good, mask, opts).ok());
  const uint64_t base = 8 + d->header_bytes;
  for (size_t t = 0; t < d->tensors.size(); ++t) {
    for (uint64_t off = d->tensors[t].begin; off < d->tensors[t].end; ++off) {
      std::vector<std::byte> file = good;
      file[base + off] ^= std::byte{0x10};
      Result<DecodedBlock> part = DecodeBlockTensors(file, mask, opts);
      if (mask[t]) {
        ASSERT_EQ(BlockFileErrorOf(part.status()), BlockFileError::kTensorChecksumMismatch)
            << t << "@" << off;
        EXPECT_THAT(part.status().message(), HasSubstr(d->tensors[t].name));
      } else {
        ASSERT_TRUE(part.ok()) << t << "@" << off << ": " << part.status().ToString();
        EXPECT_EQ(part->tensors[1].data.data(), file.data() + base + 64);
      }
      EXPECT_EQ(BlockFileErrorOf(DecodeBlock(file, opts).status()),
                BlockFileError::kChecksumMismatch);
      EXPECT_EQ(BlockFileErrorOf(DecodeBlockTensors(file, {}, opts).status()),
                BlockFileError::kChecksumMismatch);
      EXPECT_EQ(BlockFileErrorOf(
                    DecodeBlockTensors(file, TensorMask(d->tensors.size(), true), opts).status()),
                BlockFileError::kChecksumMismatch);
    }
  }
  // Unselected bytes may be anything, even all zero (a buffer only partly read).
  std::vector<std::byte> sparse(good.size());
  std::memcpy(sparse.data(), good.data(), base);
  std::memcpy(sparse.data() + base + 64, good.data() + base + 64, 76);
  EXPECT_TRUE(DecodeBlockTensors(sparse, mask, opts).ok());
  // The header's own rules still hold.
  BlockKey other = TestBlockKey(9);
  DecodeOptions wrong_key = opts;
  wrong_key.expected_key = &other;
  EXPECT_EQ(BlockFileErrorOf(DecodeBlockTensors(good, mask, wrong_key).status()),
            BlockFileError::kKeyMismatch);
  EXPECT_THAT(DecodeBlockTensors(good, {true, false}, opts),
              StatusIs(StatusCode::kInvalidArgument));
}

TEST(PartialDecodeTest, FilesWithoutTensorChecksumsAreReadWhole) {
  // A file as written before tensor_checksums: rebuild the header without
  // the field and reseal meta_checksum, as the corpus writer does.
  const ModelLayout layout = ModelLayout::Preset("tiny").value();
  std::vector<std::byte> file = File(layout);
  Result<DecodedBlock> d = DecodeBlock(file, {});
  ASSERT_TRUE(d.ok());
  std::string header(reinterpret_cast<const char*>(file.data()) + 8, d->header_bytes);
  const size_t from = header.find(",\"tensor_checksums\":");
  const size_t to = header.find(",\"meta_checksum\":");
  ASSERT_NE(from, std::string::npos);
  header.erase(from, to - from);
  // Without meta_checksum too (the legacy form), so nothing needs resealing.
  const size_t mc = header.find(",\"meta_checksum\":");
  header.erase(mc, header.find('}') - mc);
  while (header.size() % 8 != 0) header.push_back(' ');
  std::vector<std::byte> legacy(8 + header.size() + d->data.size());
  for (int i = 0; i < 8; ++i) legacy[i] = static_cast<std::byte>(header.size() >> (8 * i));
  std::memcpy(legacy.data() + 8, header.data(), header.size());
  std::memcpy(legacy.data() + 8 + header.size(), d->data.data(), d->data.size());
  Result<DecodedBlock> whole = DecodeBlock(legacy, {});
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_TRUE(whole->meta.tensor_checksums.empty());
  EXPECT_THAT(DecodeBlockTensors(legacy, {true, false, false, false}, {}),
              StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_TRUE(DecodeBlockTensors(legacy, {true, true, true, true}, {}).ok());
  EXPECT_TRUE(DecodeBlockTensors(legacy, {}, {}).ok());
}

TEST(PartialDecodeTest, VerifierFastPathAcceptsTensorChecksums) {
  const ModelLayout layout = Small();
  BlockVerifier v;
  for (uint64_t i = 1; i <= 3; ++i) {
    std::vector<std::byte> file = File(layout, i);
    BlockKey key = TestBlockKey(i);
    DecodeOptions opts;
    opts.expected_key = &key;
    ASSERT_TRUE(v.Verify(file, opts).ok());
  }
  EXPECT_EQ(v.full_decodes(), 1u);
  EXPECT_EQ(v.fast_path_hits(), 2u);
  // An edited tensor_checksums entry on the fast path: DecodeBlock's verdict.
  std::vector<std::byte> file = File(layout, 4);
  Result<DecodedBlock> d = DecodeBlock(file, {});
  ASSERT_TRUE(d.ok());
  std::string header(reinterpret_cast<const char*>(file.data()) + 8, d->header_bytes);
  const size_t at = header.find(Hex(d->meta.tensor_checksums[3]));
  file[8 + at] = static_cast<std::byte>(header[at] == 'a' ? 'b' : 'a');
  Status s = v.Verify(file, {});
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kMetaChecksumMismatch) << s.ToString();
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileErrorOf(DecodeBlock(file, {}).status()));
}

}  // namespace
}  // namespace kvtier
