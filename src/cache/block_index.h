// BlockIndex: which tiers hold a key, answered from memory (no I/O).
//
// TieredCache::Match(chain) asks it how many leading blocks of a key chain
// are available and where. Tiers report keys entering and leaving them
// through the callbacks their owner wires (HostKeyListener for the host
// tier); the index only ever hears events, it never asks a tier.
//
// Per key and tier the index keeps a signed presence count: +1 per add,
// -1 per remove. A tier applies its events in strict add/remove alternation
// per key, but hands them out after releasing its own lock, so two threads'
// events may reach the index in either order. Counting makes them commute:
// once the calls in flight have returned, a count is exactly 1 or 0 and the
// answer is the truth. In between, an answer may be briefly stale in either
// direction, which is harmless: a stale "present" is a load that misses, a
// stale "absent" is a hit not taken. The full 32-byte key is stored, so the
// index never confuses two keys.
//
// Layout: 64 shards, each an open-addressing table (linear probing,
// backward-shift deletion, no tombstones) of 38-byte slots (key + one int16
// count per tier) behind its own mutex. A slot is occupied while any of its
// counts is non-zero. Tables double when 3/4 full, so an index holds
// between ~51 and ~101 bytes per key.
//
// Thread safety: all methods may be called concurrently. Each call locks
// at most one shard at a time; no callback runs under a shard lock.
#ifndef KVTIER_CACHE_BLOCK_INDEX_H_
#define KVTIER_CACHE_BLOCK_INDEX_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "kvtier/block_key.h"

namespace kvtier {

// The tiers the index tracks, as bit positions of a TierMask.
enum class IndexTier : uint8_t { kHost = 0, kDisk = 1, kRemote = 2 };
inline constexpr size_t kIndexTierCount = 3;

// Bit (1 << tier) set when that tier holds the key.
using TierMask = uint8_t;
inline constexpr TierMask TierBit(IndexTier t) { return TierMask(1u << static_cast<unsigned>(t)); }

class BlockIndex {
 public:
  struct Options {
    // Keys expected; tables are sized for it up front (0 = grow on demand).
    size_t expected_keys = 0;
    // Seed of the slot hash. Keys are SHA-256 outputs, but a caller that
    // fears crafted keys clustering the probes may pass a random seed.
    uint64_t hash_seed = 0;
  };

  BlockIndex() : BlockIndex(Options{}) {}
  explicit BlockIndex(const Options& options);
  BlockIndex(const BlockIndex&) = delete;
  BlockIndex& operator=(const BlockIndex&) = delete;
  ~BlockIndex();

  // One presence event from a tier.
  void Add(const BlockKey& key, IndexTier tier);
  void Remove(const BlockKey& key, IndexTier tier);

  // For a tier whose presence its owner learns by asking rather than from
  // events (the disk tier, which other processes change too): sets the
  // tier's count for `key` to exactly 1 (present) or 0 (absent). Idempotent.
  // Use either these or Add/Remove for a given tier, never both.
  void MarkPresent(const BlockKey& key, IndexTier tier);
  void MarkAbsent(const BlockKey& key, IndexTier tier);

  // The tiers that hold `key` (0 = none).
  TierMask Lookup(const BlockKey& key) const;

  // Walks `keys` in order and stops at the first key no tier holds. Writes
  // each matched key's mask to `masks` (REQUIRES: masks.size() >=
  // keys.size(), or masks empty to skip them). Returns the matched count.
  size_t MatchPrefix(std::span<const BlockKey> keys, std::span<TierMask> masks = {}) const;

  // Keys held by at least one tier.
  size_t KeyCount() const;
  // Keys held by `tier`.
  size_t KeyCount(IndexTier tier) const;
  // Bytes of table memory (slots) the index holds.
  size_t MemoryBytes() const;

 private:
  static constexpr size_t kShardBits = 6;
  static constexpr size_t kShards = size_t{1} << kShardBits;

  struct Slot {
    std::array<uint8_t, 32> key;
    std::array<int16_t, kIndexTierCount> count;  // all zero = empty slot
  };
  static_assert(sizeof(Slot) == 32 + 2 * kIndexTierCount, "no padding in a slot");

  struct alignas(64) Shard {
    mutable Mutex mu;
    std::unique_ptr<Slot[]> slots GUARDED_BY(mu);
    size_t mask GUARDED_BY(mu) = 0;      // capacity - 1 (capacity a power of 2)
    size_t occupied GUARDED_BY(mu) = 0;  // slots with a non-zero count
    size_t held GUARDED_BY(mu) = 0;      // slots with a positive count
    std::array<size_t, kIndexTierCount> present GUARDED_BY(mu){};  // counts > 0
  };

  uint64_t Hash(const BlockKey& key) const;
  Shard& ShardFor(uint64_t hash) const { return shards_[hash >> (64 - kShardBits)]; }
  enum class CountUpdate : uint8_t { kAdd, kSet };
  // Adds `value` to the tier's count (kAdd) or sets the count to it (kSet).
  void Apply(const BlockKey& key, IndexTier tier, int value, CountUpdate how);
  static void GrowLocked(Shard& shard, const BlockIndex& index) REQUIRES(shard.mu);
  static void EraseSlotLocked(Shard& shard, size_t pos, const BlockIndex& index) REQUIRES(shard.mu);
  static TierMask MaskOf(const Slot& slot);

  const uint64_t seed_;
  std::unique_ptr<Shard[]> shards_;
};

}  // namespace kvtier

#endif  // KVTIER_CACHE_BLOCK_INDEX_H_
