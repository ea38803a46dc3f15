#include "server/slot_index.h"

#include <gtest/gtest.h>

#include <random>
#include <set>
#include <vector>

namespace kvtier::server {
namespace {

BlockKey K(uint8_t i) {
  BlockKey k;
  k.bytes[0] = i;
  k.bytes[1] = 0xA5;
  return k;
}

// A namespace key (the block file's `ns`).
BlockKey Ns(uint8_t i) {
  BlockKey k;
  k.bytes[0] = i;
  k.bytes[1] = 0x5A;
  return k;
}

// Reserves one slot for `client` and publishes it under `key`.
uint32_t Put(SlotIndex* idx, ClientId client, const BlockKey& key, bool dirty = true,
             const BlockKey& ns = Ns(0), std::vector<EvictedBlock>* evicted = nullptr) {
  std::vector<EvictedBlock> ev;
  auto r = idx->Reserve(client, 1, &ev);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(idx->Publish(client, (*r)[0].slot, key, ns, 10, dirty, evicted ? evicted : &ev).ok());
  return (*r)[0].slot;
}

TEST(SlotIndex, ReservedByNamesOnlyTheReservingClientsReservedSlots) {
  SlotIndex idx(3);
  std::vector<EvictedBlock> ev;
  auto r = idx.Reserve(1, 2, &ev);
  ASSERT_TRUE(r.ok());
  const uint32_t a = (*r)[0].slot, b = (*r)[1].slot;
  EXPECT_TRUE(idx.ReservedBy(1, a));
  EXPECT_TRUE(idx.ReservedBy(1, b));
  EXPECT_FALSE(idx.ReservedBy(2, a));
  EXPECT_FALSE(idx.ReservedBy(1, 3));  // past the last slot
  ASSERT_TRUE(idx.Publish(1, a, K(1), Ns(0), 10, true, &ev).ok());
  EXPECT_FALSE(idx.ReservedBy(1, a));  // published
  ASSERT_TRUE(idx.Abort(1, b));
  EXPECT_FALSE(idx.ReservedBy(1, b));  // given back
  uint32_t free_slot = 0;
  while (free_slot == a || free_slot == b) ++free_slot;
  EXPECT_FALSE(idx.ReservedBy(1, free_slot));
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
  EXPECT_EQ(idx.Publish(7, (*r)[0].slot, K(9), Ns(0), 10, true, &ev).code(), StatusCode::kInvalidArgument);
}

TEST(SlotIndex, ADuplicatePublishKeepsOneCopyAndGenerationsAdvance) {
  SlotIndex idx(3);
  std::vector<EvictedBlock> ev;
  auto a = idx.Reserve(1, 1, &ev);
  auto b = idx.Reserve(2, 1, &ev);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(idx.Publish(1, (*a)[0].slot, K(5), Ns(0), 10, true, &ev).ok());
  EXPECT_TRUE(idx.Publish(2, (*b)[0].slot, K(5), Ns(0), 10, true, &ev).ok());
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

// A namespace at its quota (2 slots) evicts its own least recent unleased
// block, never another namespace's, though the arena has free slots.
TEST(SlotIndexQuota, ANamespaceAtItsQuotaEvictsItsOwnOldestBlock) {
  SlotIndex idx(8, /*namespace_quota_slots=*/2);
  Put(&idx, 1, K(1), true, Ns(1));
  Put(&idx, 1, K(2), true, Ns(1));
  Put(&idx, 2, K(10), true, Ns(2));
  // K(1) is read again: K(2) is now namespace 1's least recent.
  const BlockKey one[] = {K(1)};
  auto read = idx.Lookup(3, one);
  ASSERT_TRUE(idx.Release(3, read.lease));
  std::vector<EvictedBlock> evicted;
  Put(&idx, 1, K(3), true, Ns(1), &evicted);
  ASSERT_EQ(evicted.size(), 1u);
  EXPECT_EQ(evicted[0].key, K(2));
  EXPECT_TRUE(evicted[0].dirty);
  EXPECT_TRUE(idx.Contains(K(1)));
  EXPECT_FALSE(idx.Contains(K(2)));
  EXPECT_TRUE(idx.Contains(K(3)));
  EXPECT_TRUE(idx.Contains(K(10)));
  const SlotIndexStats s = idx.Stats();
  EXPECT_EQ(s.quota_evictions, 1u);
  EXPECT_EQ(s.published, 3u);
  EXPECT_EQ(s.namespaces, 2u);
  const std::vector<NamespaceUsage> usage = idx.Namespaces();
  ASSERT_EQ(usage.size(), 2u);
  EXPECT_EQ(usage[0].ns, Ns(1));
  EXPECT_EQ(usage[0].slots, 2u);
  EXPECT_EQ(usage[1].ns, Ns(2));
  EXPECT_EQ(usage[1].slots, 1u);
}

// Every block of the namespace leased: the publish is refused and its slot
// freed; once a lease ends, the next publish evicts that block.
TEST(SlotIndexQuota, ANamespaceWhoseBlocksAreAllLeasedIsRefused) {
  SlotIndex idx(4, /*namespace_quota_slots=*/1);
  Put(&idx, 1, K(1), true, Ns(1));
  const BlockKey one[] = {K(1)};
  auto read = idx.Lookup(2, one);
  ASSERT_NE(read.lease, 0u);
  std::vector<EvictedBlock> ev;
  auto r = idx.Reserve(1, 1, &ev);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(idx.Publish(1, (*r)[0].slot, K(2), Ns(1), 10, true, &ev).code(),
            StatusCode::kResourceExhausted);
  EXPECT_TRUE(ev.empty());
  EXPECT_FALSE(idx.Contains(K(2)));
  EXPECT_EQ(idx.Stats().free, 3u);  // the refused slot is free again
  EXPECT_EQ(idx.Stats().quota_refusals, 1u);
  ASSERT_TRUE(idx.Release(2, read.lease));
  Put(&idx, 1, K(2), true, Ns(1), &ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].key, K(1));
  EXPECT_TRUE(idx.Contains(K(2)));
  // Erasing a namespace's last block forgets the namespace.
  EXPECT_TRUE(idx.Erase(K(2)));
  EXPECT_EQ(idx.Stats().namespaces, 0u);
  EXPECT_TRUE(idx.Namespaces().empty());
}

// The arena's key table (what clients match against without a round trip)
// holds exactly the published keys through every way a key comes and goes:
// publishes, duplicate publishes, LRU evictions, quota evictions, erases
// (leased ones included: a zombie's key is gone at once), closed clients.
TEST(SlotIndexKeyTable, HoldsExactlyThePublishedKeysThroughEveryChange) {
  constexpr uint32_t kSlots = 16;
  std::vector<uint64_t> words(KeyTable::WordsFor(kSlots), 0);
  SlotIndex idx(kSlots, /*namespace_quota_slots=*/6, KeyTable(words));
  // What each slot's header says once published (the daemon writes it
  // before it publishes): the slot table's confirmation for Find.
  std::vector<BlockKey> header(kSlots);
  std::mt19937_64 rng(11);
  std::set<uint64_t> leases;
  for (int step = 0; step < 5'000; ++step) {
    const BlockKey key = K(static_cast<uint8_t>(rng() % 40));
    const ClientId client = 1 + rng() % 3;
    switch (rng() % 6) {
      case 0:
      case 1: {
        std::vector<EvictedBlock> ev;
        auto r = idx.Reserve(client, 1, &ev);
        if (!r.ok()) break;
        header[(*r)[0].slot] = key;
        (void)idx.Publish(client, (*r)[0].slot, key, Ns(static_cast<uint8_t>(rng() % 3)), 10,
                          /*dirty=*/false, &ev);
        break;
      }
      case 2:
        idx.Erase(key);
        break;
      case 3: {
        const BlockKey one[] = {key};
        auto r = idx.Lookup(client, one);
        if (r.lease != 0) leases.insert(r.lease | (client << 56));
        break;
      }
      case 4:
        if (!leases.empty()) {
          const uint64_t l = *leases.begin();
          leases.erase(leases.begin());
          idx.Release(l >> 56, l & ((uint64_t{1} << 56) - 1));
        }
        break;
      case 5: {
        std::vector<EvictedBlock> ev;
        (void)idx.Reserve(client, 1, &ev);  // held: ended by the client's close
        if (rng() % 4 == 0) {
          idx.ReleaseClient(client);
          std::erase_if(leases, [&](uint64_t l) { return (l >> 56) == client; });
        }
        break;
      }
    }
    KeyTable t(words);
    size_t published = 0;
    for (uint8_t i = 0; i < 40; ++i) {
      const bool in_table =
          t.Find(K(i), [&](uint32_t slot) { return slot < kSlots && header[slot] == K(i); })
              .has_value();
      ASSERT_EQ(in_table, idx.Contains(K(i))) << "key " << int{i} << " at step " << step;
      published += in_table;
    }
    size_t used = 0;
    for (uint64_t w : words) used += w != 0;
    ASSERT_EQ(used, published) << "step " << step;
  }
  EXPECT_GT(idx.Stats().evictions + idx.Stats().quota_evictions, 0u);
  EXPECT_GT(idx.Stats().duplicate_publishes, 0u);
}

}  // namespace
}  // namespace kvtier::server
