// HostTier driven with random operations on two tiers sharing one budget,
// against a model of what each tier may hold: every key's last stored block
// and state. After every operation: a tier holds a key only with the block
// last stored for it; its entries, bytes and dirty figures are those of the
// keys it holds; the key listener's count per key is 1 for a held key and 0
// otherwise; the budget's used and reserved bytes are the tiers' sums and
// never exceed its capacity; and every block the eviction sink receives is
// the dirty block last stored for its key. Gets return that block, byte for
// byte, or miss; the counters count exactly the calls made.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvtier/block_buffer.h"
#include "kvtier/host_tier.h"

namespace kvtier {
namespace host_property {
namespace {

constexpr size_t kTiers = 2;
constexpr uint8_t kKeys = 16;

BlockKey KeyOf(uint8_t i) {
  BlockKey k;
  k.bytes[0] = i;
  k.bytes[1] = 0x3C;
  return k;
}

// A block of `size` bytes, each a function of its serial number.
SharedBlock MakeBlock(uint64_t serial, size_t size) {
  Result<BlockBuffer> b = BlockBuffer::Allocate(size);
  EXPECT_TRUE(b.ok());
  for (size_t i = 0; i < size; ++i) b->data()[i] = static_cast<std::byte>(serial * 131 + i);
  return std::make_shared<const BlockBuffer>(*std::move(b));
}

struct Stored {
  SharedBlock block;
  bool dirty = false;
};

// What the test knows of one tier.
struct TierModel {
  std::unique_ptr<HostTier> tier;
  std::map<uint8_t, Stored> last;   // the last block stored per key
  std::map<uint8_t, int> listener;  // the key listener's count per key
  std::vector<HostTier::Reservation> reservations;
  uint64_t sink_calls = 0;
  uint64_t gets = 0, hits = 0, puts_ok = 0, replacements = 0, erases = 0;
  uint64_t rejections = 0, put_failures = 0, reserves = 0, reserve_failures = 0;
};

class Property {
 public:
  Property(uint64_t seed, HostEvictionPolicy policy, uint64_t capacity)
      : rng_(seed), capacity_(capacity) {
    Result<std::shared_ptr<SharedHostBudget>> budget = SharedHostBudget::Create(capacity, policy);
    EXPECT_TRUE(budget.ok());
    budget_ = *budget;
    for (size_t t = 0; t < kTiers; ++t) {
      HostTierOptions o;
      o.shared_budget = budget_;
      TierModel* m = &tiers_[t];
      o.eviction_sink = [this, m](const BlockKey& key, SharedBlock block) {
        ++m->sink_calls;
        // The dirty block last stored for the key, nothing else.
        const auto it = m->last.find(key.bytes[0]);
        if (it == m->last.end() || it->second.block != block || !it->second.dirty) ++wrong_sinks_;
        return Status::Ok();
      };
      o.key_listener = [m](const BlockKey& key, KeyPresence change) {
        m->listener[key.bytes[0]] += change == KeyPresence::kAdded ? 1 : -1;
      };
      Result<std::unique_ptr<HostTier>> tier = HostTier::Create(std::move(o));
      EXPECT_TRUE(tier.ok());
      m->tier = *std::move(tier);
    }
  }

  uint64_t R(uint64_t n) { return n == 0 ? 0 : rng_() % n; }

  void Step(uint64_t step) {
    TierModel& m = tiers_[R(kTiers)];
    const uint8_t k = static_cast<uint8_t>(R(kKeys));
    const BlockKey key = KeyOf(k);
    switch (R(12)) {
      case 0:
      case 1:
      case 2: {  // Put, now and then with a reservation
        // Mostly small (16 or more fit), now and then a quarter of the
        // budget, rarely more than all of it (a rejection).
        const uint64_t pick = R(16);
        const size_t size = pick == 0   ? capacity_ + 1 + R(100)
                            : pick == 1 ? 1 + R(capacity_ / 4)
                                        : 1 + R(capacity_ / 16);
        SharedBlock block = MakeBlock(++serial_, size);
        const bool dirty = R(2) == 0;
        std::optional<HostTier::Reservation> res;
        if (R(4) == 0) {
          Result<HostTier::Reservation> r = m.tier->Reserve(size);
          ++(r.ok() ? m.reserves : m.reserve_failures);
          if (r.ok()) res = std::move(*r);
        }
        const bool present = m.tier->Contains(key);
        const Status s =
            m.tier->Put(key, block, dirty ? HostEntryState::kDirty : HostEntryState::kClean,
                        res ? &*res : nullptr);
        if (s.ok()) {
          ++m.puts_ok;
          if (present) ++m.replacements;
          m.last[k] = Stored{block, dirty};
          ASSERT_TRUE(m.tier->Contains(key)) << "step " << step << ": stored, then gone";
          if (res) {
            ASSERT_TRUE(res->empty()) << "step " << step;
          }
        } else {
          ASSERT_TRUE(s.IsResourceExhausted()) << "step " << step << ": " << s.ToString();
          ++(size > capacity_ ? m.rejections : m.put_failures);
          if (res) {
            ASSERT_EQ(res->bytes(), size) << "step " << step;
          }
        }
        break;
      }
      case 3:
      case 4: {  // Get, with or without a destination
        ++m.gets;
        std::vector<std::byte> dst(R(3) == 0 ? 0 : 1 + R(capacity_ / 12));
        Result<SharedBlock> got = m.tier->Get(key, dst);
        if (!got.ok()) {  // a destination too small: nothing counted
          ASSERT_TRUE(got.status().IsInvalidArgument()) << "step " << step;
          --m.gets;
          break;
        }
        ExpectServed(m, k, *got, dst, step);
        break;
      }
      case 5: {  // GetMany of a few keys
        std::vector<BlockKey> keys;
        std::vector<uint8_t> ks;
        for (uint64_t i = 0, n = 1 + R(4); i < n; ++i) {
          ks.push_back(static_cast<uint8_t>(R(kKeys)));
          keys.push_back(KeyOf(ks.back()));
        }
        std::vector<Result<SharedBlock>> got = m.tier->GetMany(keys);
        ASSERT_EQ(got.size(), keys.size());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_TRUE(got[i].ok()) << "step " << step;
          ++m.gets;
          ExpectServed(m, ks[i], *got[i], {}, step);
        }
        break;
      }
      case 6: {
        const bool present = m.tier->Contains(key);
        ASSERT_EQ(m.tier->Erase(key), present) << "step " << step;
        if (present) ++m.erases;
        break;
      }
      case 7: {
        const bool dirty_present = m.tier->Contains(key) && m.last.count(k) > 0 && m.last[k].dirty;
        ASSERT_EQ(m.tier->MarkClean(key), dirty_present) << "step " << step;
        if (dirty_present) m.last[k].dirty = false;
        break;
      }
      case 8: {  // a reservation taken or given back
        if (!m.reservations.empty() && R(2) == 0) {
          m.reservations.erase(m.reservations.begin() +
                               static_cast<ptrdiff_t>(R(m.reservations.size())));
        } else {
          Result<HostTier::Reservation> r = m.tier->Reserve(1 + R(capacity_ / 8));
          ++(r.ok() ? m.reserves : m.reserve_failures);
          if (r.ok()) m.reservations.push_back(std::move(*r));
        }
        break;
      }
      case 9:
        if (R(4) == 0) (void)m.tier->ShrinkTo(R(capacity_));
        break;
      case 10:
        if (R(8) == 0) (void)m.tier->Clear();
        break;
      case 11:
        if (R(8) == 0) (void)budget_->ShrinkTo(R(capacity_));
        break;
    }
  }

  void ExpectInvariants(uint64_t step) {
    uint64_t used = 0, entries = 0, reserved = 0;
    for (TierModel& m : tiers_) {
      uint64_t held = 0, bytes = 0, dirty = 0, dirty_bytes = 0;
      for (uint8_t k = 0; k < kKeys; ++k) {
        const bool in = m.tier->Contains(KeyOf(k));
        ASSERT_EQ(m.listener[k], in ? 1 : 0) << "step " << step << " key " << int{k};
        if (!in) continue;
        ASSERT_EQ(m.last.count(k), 1u) << "step " << step << ": a key never stored";
        ++held;
        bytes += m.last[k].block->size();
        if (m.last[k].dirty) {
          ++dirty;
          dirty_bytes += m.last[k].block->size();
        }
      }
      const HostTierStats s = m.tier->Stats();
      ASSERT_EQ(s.entries, held) << "step " << step;
      ASSERT_EQ(s.bytes, bytes) << "step " << step;
      ASSERT_EQ(s.dirty_entries, dirty) << "step " << step;
      ASSERT_EQ(s.dirty_bytes, dirty_bytes) << "step " << step;
      ASSERT_EQ(s.hits, m.hits) << "step " << step;
      ASSERT_EQ(s.misses, m.gets - m.hits) << "step " << step;
      ASSERT_EQ(s.rejections, m.rejections) << "step " << step;
      ASSERT_EQ(s.put_failures, m.put_failures) << "step " << step;
      ASSERT_EQ(s.reservations, m.reserves) << "step " << step;
      ASSERT_EQ(s.reservation_failures, m.reserve_failures) << "step " << step;
      ASSERT_EQ(s.puts, m.puts_ok) << "step " << step;
      ASSERT_EQ(s.replacements, m.replacements) << "step " << step;
      ASSERT_EQ(s.erases, m.erases) << "step " << step;
      ASSERT_EQ(s.dirty_evictions, m.sink_calls) << "step " << step;
      uint64_t held_reserved = 0;
      for (const HostTier::Reservation& r : m.reservations) held_reserved += r.bytes();
      ASSERT_EQ(s.reserved_bytes, held_reserved) << "step " << step;
      used += bytes;
      entries += held;
      reserved += held_reserved;
    }
    const HostBudgetStats b = budget_->Stats();
    ASSERT_EQ(b.used_bytes, used) << "step " << step;
    ASSERT_EQ(b.entries, entries) << "step " << step;
    ASSERT_EQ(b.reserved_bytes, reserved) << "step " << step;
    ASSERT_LE(b.used_bytes + b.reserved_bytes, capacity_) << "step " << step;
    ASSERT_EQ(wrong_sinks_, 0u) << "step " << step;
  }

 private:
  // A hit is the block last stored for the key (and `dst` holds its bytes);
  // a miss is a key the tier does not hold.
  void ExpectServed(TierModel& m, uint8_t k, const SharedBlock& got, std::span<const std::byte> dst,
                    uint64_t step) {
    if (got == nullptr) {
      ASSERT_FALSE(m.tier->Contains(KeyOf(k))) << "step " << step;
      return;
    }
    ++m.hits;
    ASSERT_EQ(m.last.count(k), 1u) << "step " << step;
    ASSERT_EQ(got, m.last[k].block) << "step " << step << " key " << int{k};
    if (!dst.empty()) {
      ASSERT_EQ(std::memcmp(dst.data(), got->data(), got->size()), 0) << "step " << step;
    }
  }

  std::mt19937_64 rng_;
  uint64_t capacity_;
  uint64_t serial_ = 0;
  uint64_t wrong_sinks_ = 0;
  std::shared_ptr<SharedHostBudget> budget_;
  TierModel tiers_[kTiers];
};

void Drive(uint64_t seed, HostEvictionPolicy policy, uint64_t capacity, uint64_t steps) {
  SCOPED_TRACE("seed " + std::to_string(seed) + " capacity " + std::to_string(capacity) +
               (policy == HostEvictionPolicy::kLru ? " lru" : " reuse"));
  Property p(seed, policy, capacity);
  for (uint64_t step = 0; step < steps; ++step) {
    p.Step(step);
    if (::testing::Test::HasFatalFailure()) return;
    p.ExpectInvariants(step);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

TEST(HostTierProperty, TwoTiersOnOneBudgetHoldOnlyTheirLastBlocksAndCountExactly) {
  for (uint64_t seed = 1; seed <= 8; ++seed) {
    Drive(seed, HostEvictionPolicy::kLru, /*capacity=*/4096 + 512 * seed, 2500);
    Drive(seed, HostEvictionPolicy::kReuse, /*capacity=*/4096 + 512 * seed, 2500);
  }
}

}  // namespace
}  // namespace host_property
}  // namespace kvtier
