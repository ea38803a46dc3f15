#include "synth/block_generator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace kvtier {
namespace {

std::string Hex(std::span<const std::byte> b) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (std::byte x : b) {
    out += kHex[static_cast<uint8_t>(x) >> 4];
    out += kHex[static_cast<uint8_t>(x) & 15];
  }
  return out;
}

BlockKey CountingKey() {
  BlockKey k;
  for (int i = 0; i < 32; ++i) k.bytes[i] = static_cast<uint8_t>(i);
  return k;
}

// Vectors from the Python implementation in tests/corpus/make_corpus.py
// (tensor_bytes(bytes(range(32)), index, size)).
TEST(BlockGeneratorTest, MatchesTheSpecVectors) {
  std::vector<std::byte> t0(20), t1(16);
  FillBlockTensor(CountingKey(), 0, t0);
  FillBlockTensor(CountingKey(), 1, t1);
  EXPECT_EQ(Hex(t0), "f37fbc87c6d497f048f5e56b42fcca3b0338a828");
  EXPECT_EQ(Hex(t1), "bf6a815fca545b50e0482bcc57381df5");
}

TEST(BlockGeneratorTest, PrefixStableAcrossSizes) {
  // Content is a stream: a shorter tensor is a prefix of a longer one.
  std::vector<std::byte> a(1001), b(4096);
  FillBlockTensor(TestBlockKey(3), 2, a);
  FillBlockTensor(TestBlockKey(3), 2, b);
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0);
}

TEST(BlockGeneratorTest, KeysAndIndicesGiveDifferentContent) {
  std::set<std::string> seen;
  for (uint64_t k = 0; k < 8; ++k) {
    for (size_t t = 0; t < 8; ++t) {
      std::vector<std::byte> v(32);
      FillBlockTensor(TestBlockKey(k), t, v);
      EXPECT_TRUE(seen.insert(Hex(v)).second) << k << " " << t;
    }
  }
}

TEST(BlockGeneratorTest, TestBlockKeysAreDistinctAndStable) {
  std::set<BlockKey> keys;
  for (uint64_t i = 0; i < 1000; ++i) keys.insert(TestBlockKey(i));
  EXPECT_EQ(keys.size(), 1000u);
  EXPECT_EQ(TestBlockKey(5), TestBlockKey(5));
}

TEST(BlockGeneratorTest, FirstTensorMismatchFindsTheExactByte) {
  std::vector<std::byte> v(10000);
  FillBlockTensor(TestBlockKey(1), 4, v);
  EXPECT_EQ(FirstTensorMismatch(TestBlockKey(1), 4, v), std::nullopt);
  for (size_t at : {size_t{0}, size_t{7}, size_t{4095}, size_t{4096}, size_t{9999}}) {
    std::vector<std::byte> w = v;
    w[at] ^= std::byte{0x40};
    EXPECT_EQ(FirstTensorMismatch(TestBlockKey(1), 4, w), at);
  }
  EXPECT_EQ(FirstTensorMismatch(TestBlockKey(1), 5, v), 0u);
  EXPECT_EQ(FirstTensorMismatch(TestBlockKey(1), 4, {}), std::nullopt);
}

TEST(BlockGeneratorTest, MakeAndCheckBlockFile) {
  ModelLayout tiny = ModelLayout::Preset("tiny").value();
  Result<BlockBuffer> b = MakeBlockFile(tiny, TestBlockKey(1), TestBlockKey(0), TestBlockKey(9), 7);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_TRUE(CheckBlockFile(b->span(), tiny, TestBlockKey(1)).ok());
  // Same key, same bytes: the file is a pure function of its inputs.
  Result<BlockBuffer> again =
      MakeBlockFile(tiny, TestBlockKey(1), TestBlockKey(0), TestBlockKey(9), 7);
  ASSERT_EQ(again->size(), b->size());
  EXPECT_EQ(std::memcmp(again->data(), b->data(), b->size()), 0);

  // Asked for another key: the decoder's key check fires.
  Status s = CheckBlockFile(b->span(), tiny, TestBlockKey(2));
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kKeyMismatch) << s.ToString();
  // Another layout: rejected by the layout check.
  ModelLayout qwen = ModelLayout::Preset("qwen2.5-0.5b").value();
  s = CheckBlockFile(b->span(), qwen, TestBlockKey(1));
  EXPECT_EQ(BlockFileErrorOf(s), BlockFileError::kLayoutMismatch) << s.ToString();
}

TEST(BlockGeneratorTest, CheckBlockFileCatchesContentThatIsNotTheGenerators) {
  // A well-formed file with a good checksum whose content belongs to another
  // key: only the content comparison can tell.
  ModelLayout tiny = ModelLayout::Preset("tiny").value();
  std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(tiny, TestBlockKey(1));
  tensors[3][100] ^= std::byte{1};
  std::vector<std::span<const std::byte>> spans(tensors.begin(), tensors.end());
  EncodeRequest req;
  req.layout = &tiny;
  req.key = TestBlockKey(1);
  req.tensors = spans;
  Result<BlockBuffer> b = EncodeBlock(req);
  ASSERT_TRUE(b.ok());
  Status s = CheckBlockFile(b->span(), tiny, TestBlockKey(1));
  EXPECT_TRUE(s.IsCorruption());
  EXPECT_THAT(s.message(), ::testing::HasSubstr("layer_1_state_1"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("byte 100"));
}

}  // namespace
}  // namespace kvtier
