#include "server/slot_index.h"

#include <gtest/gtest.h>

namespace kvtier::server {
namespace {

BlockKey K(uint8_t i) {
  BlockKey k;
  k.bytes[0] = i;
  k.bytes[1] = 0xA5;
  return k;
}

// Reserves one slot for `client` and publishes it under `key`.
uint32_t Put(SlotIndex* idx, ClientId client, const BlockKey& key, bool dirty = true) {
  std::vector<EvictedBlock> ev;
  auto r = idx->Reserve(client, 1, &ev);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(idx->Publish(client, (*r)[0].slot, key, 10, dirty).ok());
  return (*r)[0].slot;
}

TEST(SlotIndex, LookupLeasesAndMatchCountsLeadingKeys) {
  SlotIndex idx(4);
  Put(&idx, 1, K(1));
  Put(&idx, 1, K(2));
  const BlockKey chain[] = {K(1), K(2), K(3), K(1)};
  EXPECT_EQ(idx.Match(chain), 2u);
  auto r = idx.Lookup(2, chain);
  ASSERT_NE(r.lease, 0u);
  EXPECT_TRUE(r.slots[0].has_value());
  EXPECT_TRUE(r.slots[1].has_value());
  EXPECT_FALSE(r.slots[2].has_value());
  EXPECT_EQ(r.slots[0]->length, 10u);
  EXPECT_EQ(idx.Stats().leased, 2u);
  EXPECT_FALSE(idx.Release(1, r.lease));  // not client 1's
  EXPECT_TRUE(idx.Release(2, r.lease));
  EXPECT_FALSE(idx.Release(2, r.lease));  // once
  EXPECT_EQ(idx.Stats().leased, 0u);
}

TEST(SlotIndex, LeasedSlotsAreNeverEvictedOrReused) {
  SlotIndex idx(2);
  const uint32_t s1 = Put(&idx, 1, K(1));
  Put(&idx, 1, K(2));
  const BlockKey one[] = {K(1)};
  auto lease = idx.Lookup(3, one);
  std::vector<EvictedBlock> ev;
  // Two slots asked: one is leased, so only one is evictable: all or nothing.
  EXPECT_EQ(idx.Reserve(1, 2, &ev).status().code(), StatusCode::kResourceExhausted);
  EXPECT_TRUE(ev.empty());
  auto r = idx.Reserve(1, 1, &ev);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].key, K(2));  // the unleased one, although K(1) is older
  EXPECT_TRUE(ev[0].dirty);
  EXPECT_NE((*r)[0].slot, s1);
  // Erasing a leased block unpublishes it but keeps the slot until release.
  EXPECT_TRUE(idx.Erase(K(1)));
  EXPECT_FALSE(idx.Contains(K(1)));
  EXPECT_EQ(idx.Stats().free, 0u);
  EXPECT_TRUE(idx.Release(3, lease.lease));
  EXPECT_EQ(idx.Stats().free, 1u);
}

TEST(SlotIndex, ClosingAClientEndsItsLeasesAndReservations) {
  SlotIndex idx(3);
  Put(&idx, 1, K(1));
  const BlockKey one[] = {K(1)};
  (void)idx.Lookup(7, one);
  std::vector<EvictedBlock> ev;
  auto r = idx.Reserve(7, 2, &ev);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(idx.Stats().reserved, 2u);
  EXPECT_EQ(idx.ReleaseClient(7), 3u);  // one lease, two reservations
  SlotIndexStats s = idx.Stats();
  EXPECT_EQ(s.reserved, 0u);
  EXPECT_EQ(s.leased, 0u);
  EXPECT_EQ(s.free, 2u);
  EXPECT_EQ(s.published, 1u);
  // Its reservations can no longer be published.
  EXPECT_EQ(idx.Publish(7, (*r)[0].slot, K(9), 10, true).code(), StatusCode::kInvalidArgument);
}

TEST(SlotIndex, ADuplicatePublishKeepsOneCopyAndGenerationsAdvance) {
  SlotIndex idx(3);
  std::vector<EvictedBlock> ev;
  auto a = idx.Reserve(1, 1, &ev);
  auto b = idx.Reserve(2, 1, &ev);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(idx.Publish(1, (*a)[0].slot, K(5), 10, true).ok());
  EXPECT_TRUE(idx.Publish(2, (*b)[0].slot, K(5), 10, true).ok());
  SlotIndexStats s = idx.Stats();
  EXPECT_EQ(s.published, 1u);
  EXPECT_EQ(s.duplicate_publishes, 1u);
  EXPECT_EQ(s.free, 2u);
  // The freed slot comes back with a new generation.
  auto c = idx.Reserve(3, 1, &ev);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ((*c)[0].slot, (*b)[0].slot);
  EXPECT_EQ((*c)[0].generation, (*b)[0].generation + 1);
}

TEST(SlotIndex, DirtyBlocksAreLeasedUntilWrittenDown) {
  SlotIndex idx(2);
  const uint32_t s1 = Put(&idx, 1, K(1), /*dirty=*/true);
  Put(&idx, 1, K(2), /*dirty=*/false);
  std::vector<BlockKey> keys;
  auto d = idx.DirtyBlocks(&keys);
  ASSERT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys[0], K(1));
  EXPECT_EQ(d.slots[0]->slot, s1);
  std::vector<EvictedBlock> ev;
  // The dirty one is leased: only the clean one is evictable.
  EXPECT_EQ(idx.Reserve(1, 2, &ev).status().code(), StatusCode::kResourceExhausted);
  idx.MarkClean(s1, d.slots[0]->generation);
  EXPECT_TRUE(idx.Release(kDaemonClient, d.lease));
  EXPECT_EQ(idx.Stats().dirty, 0u);
}

}  // namespace
}  // namespace kvtier::server
