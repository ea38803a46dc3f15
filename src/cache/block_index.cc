#include "cache/block_index.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstring>

namespace kvtier {

namespace {

constexpr size_t kMinShardSlots = 16;

bool SlotEmpty(const std::array<int16_t, kIndexTierCount>& count) {
  for (int16_t c : count) {
    if (c != 0) return false;
  }
  return true;
}

}  // namespace

BlockIndex::BlockIndex(const Options& options)
    : seed_(options.hash_seed), shards_(new Shard[kShards]) {
  size_t per_shard = options.expected_keys / kShards + 1;
  // Room for the expected keys below the 3/4 growth threshold.
  size_t slots = std::bit_ceil(std::max(kMinShardSlots, per_shard * 4 / 3 + 1));
  for (size_t i = 0; i < kShards; ++i) {
    Shard& s = shards_[i];
    MutexLock lock(&s.mu);
    s.slots = std::make_unique<Slot[]>(slots);
    s.mask = slots - 1;
  }
}

BlockIndex::~BlockIndex() = default;

uint64_t BlockIndex::Hash(const BlockKey& key) const {
  return XXH3_64bits_withSeed(key.bytes.data(), key.bytes.size(), seed_);
}

TierMask BlockIndex::MaskOf(const Slot& slot) {
  TierMask m = 0;
  for (size_t t = 0; t < kIndexTierCount; ++t) {
    if (slot.count[t] > 0) m |= TierMask(1u << t);
  }
  return m;
}

void BlockIndex::Add(const BlockKey& key, IndexTier tier) {
  Apply(key, tier, +1, CountUpdate::kAdd);
}

void BlockIndex::Remove(const BlockKey& key, IndexTier tier) {
  Apply(key, tier, -1, CountUpdate::kAdd);
}

void BlockIndex::MarkPresent(const BlockKey& key, IndexTier tier) {
  Apply(key, tier, 1, CountUpdate::kSet);
}

void BlockIndex::MarkAbsent(const BlockKey& key, IndexTier tier) {
  Apply(key, tier, 0, CountUpdate::kSet);
}

void BlockIndex::Apply(const BlockKey& key, IndexTier tier, int value, CountUpdate how) {
  const size_t t = static_cast<size_t>(tier);
  assert(t < kIndexTierCount);
  const uint64_t h = Hash(key);
  Shard& s = ShardFor(h);
  MutexLock lock(&s.mu);
  size_t pos = h & s.mask;
  while (!SlotEmpty(s.slots[pos].count)) {
    Slot& slot = s.slots[pos];
    if (slot.key == key.bytes) {
      const bool was_held = MaskOf(slot) != 0;
      const int old_count = slot.count[t];
      const int new_count = how == CountUpdate::kSet ? value : old_count + value;
      // |count| is bounded by the events in flight at once, far below 2^15.
      assert(new_count >= INT16_MIN && new_count <= INT16_MAX);
      slot.count[t] = static_cast<int16_t>(new_count);
      if (old_count <= 0 && new_count > 0) ++s.present[t];
      if (old_count > 0 && new_count <= 0) --s.present[t];
      const bool is_held = MaskOf(slot) != 0;
      if (was_held && !is_held) --s.held;
      if (!was_held && is_held) ++s.held;
      if (SlotEmpty(slot.count)) EraseSlotLocked(s, pos, *this);
      return;
    }
    pos = (pos + 1) & s.mask;
  }
  // A new key. A remove that overtook its add lands here too and leaves a
  // count of -1 until the add arrives.
  if (value == 0) return;  // MarkAbsent of an unknown key
  const int delta = value;
  if ((s.occupied + 1) * 4 > (s.mask + 1) * 3) {
    GrowLocked(s, *this);
    pos = h & s.mask;
    while (!SlotEmpty(s.slots[pos].count)) pos = (pos + 1) & s.mask;
  }
  Slot& slot = s.slots[pos];
  slot.key = key.bytes;
  slot.count = {};
  slot.count[t] = static_cast<int16_t>(delta);
  ++s.occupied;
  if (delta > 0) {
    ++s.present[t];
    ++s.held;
  }
}

void BlockIndex::GrowLocked(Shard& s, const BlockIndex& index) {
  const size_t old_cap = s.mask + 1;
  const size_t new_cap = old_cap * 2;
  auto fresh = std::make_unique<Slot[]>(new_cap);
  const size_t new_mask = new_cap - 1;
  for (size_t i = 0; i < old_cap; ++i) {
    const Slot& slot = s.slots[i];
    if (SlotEmpty(slot.count)) continue;
    BlockKey k;
    k.bytes = slot.key;
    size_t pos = index.Hash(k) & new_mask;
    while (!SlotEmpty(fresh[pos].count)) pos = (pos + 1) & new_mask;
    fresh[pos] = slot;
  }
  s.slots = std::move(fresh);
  s.mask = new_mask;
}

void BlockIndex::EraseSlotLocked(Shard& s, size_t pos, const BlockIndex& index) {
  // Backward-shift deletion: pull later members of the probe run into the
  // hole when their home slot does not lie cyclically in (hole, their slot].
  size_t hole = pos;
  size_t j = pos;
  for (;;) {
    j = (j + 1) & s.mask;
    const Slot& cand = s.slots[j];
    if (SlotEmpty(cand.count)) break;
    BlockKey k;
    k.bytes = cand.key;
    const size_t home = index.Hash(k) & s.mask;
    const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (stays) continue;
    s.slots[hole] = cand;
    hole = j;
  }
  s.slots[hole].count = {};
  --s.occupied;
}

TierMask BlockIndex::Lookup(const BlockKey& key) const {
  const uint64_t h = Hash(key);
  Shard& s = ShardFor(h);
  MutexLock lock(&s.mu);
  size_t pos = h & s.mask;
  while (!SlotEmpty(s.slots[pos].count)) {
    const Slot& slot = s.slots[pos];
    if (slot.key == key.bytes) return MaskOf(slot);
    pos = (pos + 1) & s.mask;
  }
  return 0;
}

size_t BlockIndex::MatchPrefix(std::span<const BlockKey> keys, std::span<TierMask> masks) const {
  assert(masks.empty() || masks.size() >= keys.size());
  size_t n = 0;
  for (; n < keys.size(); ++n) {
    const TierMask m = Lookup(keys[n]);
    if (m == 0) break;
    if (!masks.empty()) masks[n] = m;
  }
  return n;
}

size_t BlockIndex::KeyCount() const {
  size_t n = 0;
  for (size_t i = 0; i < kShards; ++i) {
    MutexLock lock(&shards_[i].mu);
    n += shards_[i].held;
  }
  return n;
}

size_t BlockIndex::KeyCount(IndexTier tier) const {
  const size_t t = static_cast<size_t>(tier);
  size_t n = 0;
  for (size_t i = 0; i < kShards; ++i) {
    MutexLock lock(&shards_[i].mu);
    n += shards_[i].present[t];
  }
  return n;
}

size_t BlockIndex::MemoryBytes() const {
  size_t n = 0;
  for (size_t i = 0; i < kShards; ++i) {
    MutexLock lock(&shards_[i].mu);
    n += (shards_[i].mask + 1) * sizeof(Slot);
  }
  return n;
}

}  // namespace kvtier
