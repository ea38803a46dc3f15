#include "remote/key_slot.h"

#include <gtest/gtest.h>

#include "remote/value_layout.h"

namespace kvtier::remote {
namespace {

TEST(Crc16, XmodemCheckValue) {
  // The standard check value of CRC-16/XMODEM, and the Cluster spec's
  // reference output.
  EXPECT_EQ(Crc16("123456789"), 0x31C3);
  EXPECT_EQ(Crc16(""), 0);
  EXPECT_EQ(Crc16("A"), 0x58E5);
}

TEST(KeySlot, KnownSlots) {
  // Values CLUSTER KEYSLOT returns on Redis 7.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("bar"), 5061);
  EXPECT_EQ(KeySlot("hello"), 866);
}

TEST(KeySlot, HashTags) {
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("{user1000}.followers"));
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  // An empty tag hashes the whole name; only the first '{' counts.
  EXPECT_EQ(KeySlot("foo{}{bar}"), Crc16("foo{}{bar}") % kClusterSlots);
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot("foo{bar}{zap}"), KeySlot("bar"));
  EXPECT_EQ(KeySlot("no closing {brace"), Crc16("no closing {brace") % kClusterSlots);
}

TEST(KeySlot, EveryPartOfABlockSharesTheSlot) {
  BlockKey k;
  for (size_t i = 0; i < k.bytes.size(); ++i) k.bytes[i] = static_cast<uint8_t>(i * 37 + 5);
  ValueLayout v("kvtier:v1:", 4096, 100000);
  const uint16_t slot = ValueLayout::SlotOf(k);
  EXPECT_EQ(slot, KeySlot(k.Hex()));
  for (uint32_t i = 0; i < 30; ++i) EXPECT_EQ(KeySlot(v.PartName(k, i)), slot) << i;
}

}  // namespace
}  // namespace kvtier::remote
