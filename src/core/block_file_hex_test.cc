// The hex helpers every verified block goes through (its key, parent and
// checksums): exactly lowercase hex digits are accepted, at any position.
#include <gtest/gtest.h>

#include <array>
#include <string>

#include "core/block_file_internal.h"

namespace kvtier::internal {
namespace {

TEST(ParseHexLower, RoundTripsHexLowerOfEveryByte) {
  std::array<uint8_t, 256> bytes;
  for (int i = 0; i < 256; ++i) bytes[i] = static_cast<uint8_t>(i);
  std::string hex(512, '?');
  HexLower(bytes.data(), bytes.size(), hex.data());
  std::array<uint8_t, 256> back{};
  ASSERT_TRUE(ParseHexLower(hex, back.data(), back.size()));
  EXPECT_EQ(back, bytes);
}

TEST(ParseHexLower, RefusesEveryOtherCharAtEitherPlaceOfAPair) {
  const std::string good = "0123456789abcdef";
  for (int c = 0; c < 256; ++c) {
    const bool digit = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
    for (size_t at : {size_t{0}, size_t{7}, good.size() - 1}) {
      std::string hex = good;
      hex[at] = static_cast<char>(c);
      uint8_t out[8];
      EXPECT_EQ(ParseHexLower(hex, out, sizeof(out)), digit) << "char " << c << " at " << at;
    }
  }
  uint8_t out[8];
  EXPECT_FALSE(ParseHexLower(good.substr(1), out, sizeof(out)));  // odd length
  EXPECT_FALSE(ParseHexLower(good + "00", out, sizeof(out)));     // too long
}

}  // namespace
}  // namespace kvtier::internal
