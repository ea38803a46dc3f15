#include "remote/value_layout.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>

#include "kvtier/block_file.h"

namespace kvtier::remote {
namespace {

BlockKey Key(uint8_t fill) {
  BlockKey k;
  k.bytes.fill(fill);
  return k;
}

TEST(ValueLayout, Names) {
  ValueLayout v("kvtier:v1:", 4 << 20, 1000);
  const BlockKey k = Key(0xab);
  const std::string hex(64, 'a');
  EXPECT_EQ(v.PartName(k, 0), "kvtier:v1:{" + k.Hex() + "}");
  EXPECT_EQ(v.PartName(k, 1), "kvtier:v1:{" + k.Hex() + "}:1");
  EXPECT_EQ(v.PartName(k, 12), "kvtier:v1:{" + k.Hex() + "}:12");
  std::vector<std::string> names = v.PartNames(k, 3);
  ASSERT_EQ(names.size(), 3u);
  EXPECT_EQ(names[0], v.PartName(k, 0));
  EXPECT_EQ(names[2], v.PartName(k, 2));
}

TEST(ValueLayout, SinglePartLayout) {
  // 2 MiB of data: even the largest header keeps a block within one 4 MiB part.
  ValueLayout v("p:", 4 << 20, 2 << 20);
  EXPECT_TRUE(v.single_part());
  EXPECT_EQ(v.min_parts(), 1u);
  EXPECT_EQ(v.max_parts(), 1u);
  EXPECT_EQ(v.max_value_bytes(), 8 + kMaxBlockHeaderBytes + (2u << 20));
}

TEST(ValueLayout, Qwen05bBlocksAreOnePartButCouldBeTwo) {
  // qwen2.5-0.5b: 3 MiB of data. Real headers are a few KiB, so a block is
  // one part; a header near the 1 MiB limit would make it two, so reads ask
  // for both names (MGET) and find the second absent.
  ValueLayout v("p:", 4 << 20, 3 << 20);
  EXPECT_FALSE(v.single_part());
  EXPECT_EQ(v.min_parts(), 1u);
  EXPECT_EQ(v.max_parts(), 2u);
  EXPECT_EQ(v.PartsFor((3u << 20) + 8 + 4096), 1u);
}

TEST(ValueLayout, PartsOfA32MiBBlock) {
  // llama3-8b: 32 MiB of data + header = 8 full parts and a small ninth.
  const uint64_t data = uint64_t{32} << 20, part = uint64_t{4} << 20;
  ValueLayout v("p:", part, data);
  EXPECT_FALSE(v.single_part());
  EXPECT_EQ(v.min_parts(), 9u);
  EXPECT_EQ(v.max_parts(), 9u);
  const uint64_t total = data + 8 + 4096;
  EXPECT_EQ(v.PartsFor(total), 9u);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(v.PartSize(total, i), part) << i;
  EXPECT_EQ(v.PartSize(total, 8), 8u + 4096u);
}

TEST(ValueLayout, PartBoundaries) {
  ValueLayout v("p:", 4096, 10000);
  EXPECT_EQ(v.PartsFor(0), 1u);
  EXPECT_EQ(v.PartsFor(1), 1u);
  EXPECT_EQ(v.PartsFor(4096), 1u);
  EXPECT_EQ(v.PartsFor(4097), 2u);
  EXPECT_EQ(v.PartsFor(8192), 2u);
  EXPECT_EQ(v.PartSize(8192, 1), 4096u);
  EXPECT_EQ(v.PartSize(8193, 2), 1u);
  // min: data + 16 bytes; max: data + 8 + 1 MiB.
  EXPECT_EQ(v.min_parts(), 3u);  // ceil(10016 / 4096)
  EXPECT_EQ(v.max_parts(), (10000 + 8 + kMaxBlockHeaderBytes + 4095) / 4096);
}

TEST(ValueLayout, TotalFromPrefix) {
  ValueLayout v("p:", 4096, 10000);
  std::array<std::byte, 8> prefix{};
  uint64_t n = 600;
  std::memcpy(prefix.data(), &n, 8);
  EXPECT_EQ(v.TotalFromPrefix(prefix), 8u + 600u + 10000u);
  n = kMaxBlockHeaderBytes;
  std::memcpy(prefix.data(), &n, 8);
  EXPECT_EQ(v.TotalFromPrefix(prefix), 8u + kMaxBlockHeaderBytes + 10000u);
  n = kMaxBlockHeaderBytes + 1;
  std::memcpy(prefix.data(), &n, 8);
  EXPECT_FALSE(v.TotalFromPrefix(prefix).has_value());
  n = UINT64_MAX;
  std::memcpy(prefix.data(), &n, 8);
  EXPECT_FALSE(v.TotalFromPrefix(prefix).has_value());
}

}  // namespace
}  // namespace kvtier::remote
