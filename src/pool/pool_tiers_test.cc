// BlockPool with lower tiers (MapBackingStore): store policies, prefix loads
// (blocking and asynchronous), bad tier blocks, offload → restore, also in a
// later process, and what crosses as block files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <numeric>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/block_pool.h"
#include "pool/pool_test_util.h"
#include "pool/stream_copy.h"
#include "synth/block_generator.h"
#include "testing/map_backing_store.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::pool_testing::AppendMode;
using ::kvtier::pool_testing::Commit;
using ::kvtier::pool_testing::KvOracle;
using ::kvtier::pool_testing::TestLayout;
using ::kvtier::pool_testing::TestOptions;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

std::vector<uint32_t> Iota(size_t n, uint32_t start = 100) {
  std::vector<uint32_t> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

std::vector<uint32_t> Plus(std::vector<uint32_t> v, uint32_t t) {
  v.push_back(t);
  return v;
}

class PoolTiersTest : public ::testing::Test {
 protected:
  PoolTiersTest() {
    NamespaceOptions ns;
    ns.model_id = "pool-test-model";
    ns.layout_signature = layout_.Signature();
    ns.block_tokens = layout_.block_tokens;
    chain_ = std::make_unique<KeyChain>(*KeyChain::Create(ns));
  }

  std::unique_ptr<BlockPool> Make(BlockBackingStore* store, uint32_t total_blocks = 16,
                                  StorePolicy policy = StorePolicy::kOnFill, bool retain = true) {
    PoolOptions o = TestOptions(layout_, total_blocks);
    o.store = store;
    o.store_policy = policy;
    o.retain_freed_blocks = retain;
    auto pool = BlockPool::Create(o);
    EXPECT_THAT(pool, IsOk());
    return pool.ok() ? std::move(pool).value() : nullptr;
  }

  void Fill(BlockPool* pool, uint64_t seq, const std::vector<uint32_t>& tokens,
            size_t expect_matched) {
    auto m = pool->Allocate(seq, tokens);
    ASSERT_THAT(m, IsOk());
    ASSERT_EQ(*m, expect_matched);
    ASSERT_THAT(kv_.Write(pool, seq, tokens, *m, tokens.size(), AppendMode::kLayer), IsOk());
  }

  // Stores the full blocks of `tokens` in store_ (through a pool that is
  // gone after) and returns their keys.
  std::vector<BlockKey> StoreBlocksOf(const std::vector<uint32_t>& tokens) {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, tokens, 0);
    return chain_->KeysFor(tokens);
  }

  ModelLayout layout_ = TestLayout();
  KvOracle kv_{layout_};
  std::unique_ptr<KeyChain> chain_;
  MapBackingStore store_;
};

TEST_F(PoolTiersTest, FullBlocksAreStoredAsBlockFilesWhenTheyFill) {
  auto pool = Make(&store_);
  const std::vector<uint32_t> a = Iota(10);
  Fill(pool.get(), 1, a, 0);
  const std::vector<BlockKey> keys = chain_->KeysFor(a);
  ASSERT_EQ(keys.size(), 2u);
  EXPECT_EQ(store_.size(), 2u);  // the partial block is not stored

  uint64_t bytes = 0;
  const std::string signature = layout_.Signature();
  for (size_t b = 0; b < 2; ++b) {
    SharedBlock file = store_.Get(keys[b]);
    ASSERT_NE(file, nullptr);
    bytes += file->size();
    DecodeOptions opts;
    opts.expected_key = &keys[b];
    opts.expected_signature = &signature;
    auto decoded = DecodeBlock(file->span(), opts);
    ASSERT_THAT(decoded, IsOk());
    EXPECT_EQ(decoded->meta.token_count, 4u);
    EXPECT_EQ(decoded->meta.parent, b == 0 ? chain_->ns() : keys[0]);
    EXPECT_EQ(decoded->meta.ns, chain_->ns());
    ASSERT_EQ(decoded->tensors.size(), 4u);
    // Tensor (l, k) is the [2, 4, 4] slice of the oracle's packed view.
    for (uint32_t l = 0; l < 2; ++l) {
      for (uint32_t k = 0; k < 2; ++k) {
        const TensorView& t = decoded->tensors[l * 2 + k];
        EXPECT_EQ(t.name, "layer_" + std::to_string(l) + "_state_" + std::to_string(k));
        EXPECT_EQ(t.shape, (std::vector<uint64_t>{2, 4, 4}));
        std::vector<std::byte> packed = kv_.Packed(a, 8, l, k);  // [2, 8, 4], 8-byte rows
        ASSERT_EQ(t.data.size(), 64u);
        for (int h = 0; h < 2; ++h) {
          EXPECT_EQ(std::memcmp(t.data.data() + h * 32, packed.data() + h * 64 + b * 32, 32), 0);
        }
      }
    }
  }
  PoolStats s = pool->GetStats();
  EXPECT_EQ(s.stored_blocks, 2u);
  EXPECT_EQ(s.stored_bytes, bytes);
  EXPECT_EQ(s.store_errors, 0u);
}

TEST_F(PoolTiersTest, StorePolicies) {
  const std::vector<uint32_t> a = Iota(10);
  {
    MapBackingStore store;
    auto pool = Make(&store, 16, StorePolicy::kOnSequenceEnd);
    Fill(pool.get(), 1, a, 0);
    EXPECT_EQ(store.size(), 0u);
    ASSERT_THAT(pool->Remove(1), IsOk());
    EXPECT_EQ(store.size(), 2u);
    EXPECT_EQ(pool->GetStats().stored_blocks, 2u);
  }
  {
    MapBackingStore store;
    auto pool = Make(&store, 16, StorePolicy::kNever);
    Fill(pool.get(), 1, a, 0);
    ASSERT_THAT(pool->Remove(1), IsOk());
    EXPECT_EQ(store.size(), 0u);
    EXPECT_EQ(store.store_calls(), 0u);
    // Eviction still offloads through the store.
    Fill(pool.get(), 2, a, 8);
    ASSERT_THAT(pool->Evict(2), IsOk());
    EXPECT_EQ(store.size(), 2u);
  }
}

TEST_F(PoolTiersTest, PrefixLoadsFromTheTierInALaterProcess) {
  const std::vector<uint32_t> a = Iota(14);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  ASSERT_EQ(store_.size(), 3u);
  std::unique_ptr<MapBackingStore> reopened = store_.CloneBytes();
  auto pool = Make(reopened.get());
  AllocateInfo info = *pool->AllocateAsync(7, Plus(a, 1));
  EXPECT_EQ(info.matched_tokens, 12u);
  EXPECT_EQ(info.pool_blocks, 0u);
  EXPECT_EQ(info.tier_blocks, 3u);
  EXPECT_TRUE(info.load_pending);
  EXPECT_EQ(*pool->WaitLoaded(7), 12u);
  EXPECT_TRUE(kv_.Check(pool.get(), 7, std::span(a).first(12)));
  PoolStats s = pool->GetStats();
  EXPECT_EQ(s.loaded_blocks, 3u);
  EXPECT_EQ(s.loaded_bytes, store_.Get(chain_->KeysFor(a)[0])->size() * 3);
  EXPECT_EQ(s.prefix_hit_blocks_tier, 3u);
  EXPECT_EQ(s.load_misses, 0u);
  EXPECT_EQ(s.stored_blocks, 0u);  // loaded blocks are not stored again

  // Now the pool holds them: a second sequence shares them without a load.
  EXPECT_EQ(*pool->Allocate(8, a), 12u);
  EXPECT_EQ(reopened->load_calls(), 1u);
  EXPECT_EQ(*pool->BlockTable(8), *pool->BlockTable(7));
}

TEST_F(PoolTiersTest, BlocksWrittenByAnotherWriterLoadIntoSlots) {
  // The block generator's files (not the pool's) for the keys of `a`.
  const std::vector<uint32_t> a = Iota(9);
  const std::vector<BlockKey> keys = chain_->KeysFor(a);
  for (size_t b = 0; b < keys.size(); ++b) {
    auto file = MakeBlockFile(layout_, keys[b], b == 0 ? chain_->ns() : keys[b - 1], chain_->ns());
    ASSERT_THAT(file, IsOk());
    ASSERT_THAT(store_.Store(keys[b], std::make_shared<const BlockBuffer>(*std::move(file))),
                IsOk());
  }
  auto pool = Make(&store_);
  ASSERT_EQ(*pool->Allocate(1, a), 8u);
  auto table = *pool->BlockTable(1);
  ASSERT_EQ(table.size(), 2u);
  for (size_t b = 0; b < 2; ++b) {
    std::byte* slot = *pool->SlotAddress(table[b]);
    auto tensors = MakeBlockTensors(layout_, keys[b]);
    for (uint32_t l = 0; l < 2; ++l) {
      for (uint32_t k = 0; k < 2; ++k) {
        SlotTensorGeometry g = pool->TensorGeometry(l, k);
        const auto& want = tensors[l * 2 + k];
        ASSERT_EQ(g.bytes, want.size());
        EXPECT_EQ(std::memcmp(slot + g.offset, want.data(), want.size()), 0);
      }
    }
  }
}

TEST_F(PoolTiersTest, AsyncLoadBlocksOnlyItsOwnSequence) {
  const std::vector<uint32_t> a = Iota(14);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  auto pool = Make(&store_);
  store_.HoldLoads();
  AllocateInfo info = *pool->AllocateAsync(1, Plus(a, 3));
  ASSERT_TRUE(info.load_pending);
  EXPECT_EQ(info.matched_tokens, 12u);

  std::vector<std::byte> row(16);
  std::span<const std::byte> kv[] = {row, row};
  EXPECT_THAT(pool->AppendToken(1, 0, 12, kv), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool->Advance(1, a), StatusIs(StatusCode::kFailedPrecondition));
  // The block table is readable while loading; no block has landed yet.
  auto table = pool->BlockTable(1);
  ASSERT_THAT(table, IsOk());
  EXPECT_EQ(table->size(), 3u);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 0), 0u);
  EXPECT_THAT(pool->PackedLayer(1, 0), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool->Evict(1), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(pool->AllocateAsync(1, a), StatusIs(StatusCode::kFailedPrecondition));
  // Other sequences go on meanwhile.
  Fill(pool.get(), 2, Iota(6, 900), 0);
  EXPECT_TRUE(kv_.Check(pool.get(), 2, Iota(6, 900)));

  std::thread releaser([&] { store_.ReleaseLoads(); });
  EXPECT_EQ(*pool->WaitLoaded(1), 12u);
  releaser.join();
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(12)));
  ASSERT_THAT(kv_.Write(pool.get(), 1, Plus(a, 3), 12, 15, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, Plus(a, 3)));
}

// A store that hands blocks over when the test says, in the test's order.
class ManualStore final : public BlockBackingStore {
 public:
  explicit ManualStore(MapBackingStore* inner) : inner_(inner) {}
  size_t Match(std::span<const BlockKey> keys) override { return inner_->Match(keys); }
  Status Store(const BlockKey& key, SharedBlock block) override {
    return inner_->Store(key, std::move(block));
  }
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override {
    keys_.assign(keys.begin(), keys.end());
    on_block_ = std::move(on_block);
  }
  // Hands over block i (or a miss).
  void Deliver(size_t i, bool miss = false) {
    on_block_(i, miss ? nullptr : inner_->Get(keys_[i]));
  }

 private:
  MapBackingStore* inner_;
  std::vector<BlockKey> keys_;
  BlockArrivalCallback on_block_;
};

TEST_F(PoolTiersTest, TheReadyPrefixGrowsAsBlocksLandInAnyOrder) {
  const std::vector<uint32_t> a = Iota(16);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  ManualStore manual(&store_);
  auto pool = Make(&manual);
  AllocateInfo info = *pool->AllocateAsync(1, Plus(a, 1));
  ASSERT_TRUE(info.load_pending);
  ASSERT_EQ(info.tier_blocks, 4u);
  const std::vector<uint32_t> table = *pool->BlockTable(1);
  ASSERT_EQ(table.size(), 4u);

  manual.Deliver(2);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 0), 0u);  // block 0 is still missing
  manual.Deliver(0);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 4), 4u);
  // Block 0's K/V is in its slot already, while the load goes on.
  EXPECT_TRUE(kv_.CheckSlot(pool.get(), table[0], std::span(a).first(4), 0));
  manual.Deliver(1);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 8), 12u);                                // blocks 0-2 now
  EXPECT_THAT(pool->Advance(1, a), StatusIs(StatusCode::kFailedPrecondition));  // still loading
  manual.Deliver(3);
  EXPECT_EQ(*pool->WaitLoaded(1), 16u);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 100), 16u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  EXPECT_EQ(pool->GetStats().loaded_blocks, 4u);
}

// Threads that wait while blocks land: one for a prefix (WaitTokensLoaded),
// which each block that grows the ready prefix wakes, one for the whole load
// (WaitLoaded), which only the last block wakes. Each returns what it waited
// for; none is left waiting.
TEST_F(PoolTiersTest, WaitersWakeForThePrefixTheyWaitForAndForTheEnd) {
  const std::vector<uint32_t> a = Iota(16);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  ManualStore manual(&store_);
  auto pool = Make(&manual);
  ASSERT_TRUE(pool->AllocateAsync(1, Plus(a, 1))->load_pending);
  std::atomic<size_t> prefix{0}, whole{0};
  std::thread prefix_waiter([&] { prefix = *pool->WaitTokensLoaded(1, 8); });
  std::thread whole_waiter([&] { whole = *pool->WaitLoaded(1); });
  // Not a timing assertion: the waits are more likely entered before the
  // blocks land, which is the case under test (either way they must return).
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  manual.Deliver(1);
  manual.Deliver(0);  // the prefix is 8 tokens now: the prefix waiter wakes
  prefix_waiter.join();
  EXPECT_EQ(prefix.load(), 8u);
  EXPECT_EQ(whole.load(), 0u);  // still waiting: blocks 2 and 3 are out
  manual.Deliver(3);
  manual.Deliver(2);
  whole_waiter.join();
  EXPECT_EQ(whole.load(), 16u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
}

TEST_F(PoolTiersTest, AMissAfterLaterBlocksLandedShortensTheSequence) {
  const std::vector<uint32_t> a = Iota(16);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  ManualStore manual(&store_);
  auto pool = Make(&manual, 8);
  ASSERT_TRUE(pool->AllocateAsync(1, Plus(a, 1))->load_pending);
  manual.Deliver(3);
  manual.Deliver(2);
  manual.Deliver(0);
  EXPECT_EQ(*pool->WaitTokensLoaded(1, 0), 4u);
  manual.Deliver(1, /*miss=*/true);
  // Blocks 2 and 3 landed in vain: the sequence ends after block 0.
  EXPECT_EQ(*pool->WaitLoaded(1), 4u);
  EXPECT_EQ(pool->BlockTable(1)->size(), 1u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(4)));
  PoolStats s = pool->GetStats();
  EXPECT_EQ(s.loaded_blocks, 1u);
  EXPECT_EQ(s.load_misses, 3u);
  EXPECT_EQ(pool->FreeCount(), 7u);
}

// The pool waits for its loads before it goes: the store's late callbacks
// never reach a destroyed pool.
TEST_F(PoolTiersTest, DestroyingAPoolWaitsForItsLoads) {
  const std::vector<uint32_t> a = Iota(8);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  store_.HoldLoads();
  auto pool = Make(&store_);
  ASSERT_TRUE(pool->AllocateAsync(1, Plus(a, 1))->load_pending);
  std::atomic<bool> destroyed{false};
  std::thread destroyer([&] {
    pool.reset();
    destroyed = true;
  });
  // It cannot finish while the load is held.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(destroyed.load());
  store_.ReleaseLoads();
  destroyer.join();
  EXPECT_TRUE(destroyed.load());
}

TEST_F(PoolTiersTest, RemoveWaitsForALoadInFlight) {
  const std::vector<uint32_t> a = Iota(12);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  auto pool = Make(&store_, 8);
  store_.HoldLoads();
  ASSERT_TRUE(pool->AllocateAsync(1, Plus(a, 1))->load_pending);
  std::thread remover([&] { EXPECT_THAT(pool->Remove(1), IsOk()); });
  store_.ReleaseLoads();
  remover.join();
  EXPECT_FALSE(pool->HasSequence(1));
  EXPECT_EQ(pool->FreeCount(), 8u);
  EXPECT_EQ(pool->GetStats().blocks_cached, 3u);
}

TEST_F(PoolTiersTest, BadTierBlocksShortenTheMatch) {
  const std::vector<uint32_t> a = Iota(14);
  {
    auto pool = Make(&store_);
    Fill(pool.get(), 1, a, 0);
  }
  const std::vector<BlockKey> keys = chain_->KeysFor(a);
  // A corrupt block 1: blocks 1 and 2 are dropped, block 0 is kept.
  {
    std::unique_ptr<MapBackingStore> store = store_.CloneBytes();
    store->Corrupt(keys[1]);
    auto pool = Make(store.get(), 8);
    EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 4u);
    EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(4)));
    PoolStats s = pool->GetStats();
    EXPECT_EQ(s.loaded_blocks, 1u);
    EXPECT_EQ(s.load_misses, 2u);
    EXPECT_EQ(s.prefix_hit_blocks_tier, 1u);
    EXPECT_EQ(pool->FreeCount(), 7u);
  }
  // Present at Match, gone by Load.
  {
    std::unique_ptr<MapBackingStore> store = store_.CloneBytes();
    auto pool = Make(store.get(), 8);
    store->HoldLoads();
    AllocateInfo info = *pool->AllocateAsync(1, Plus(a, 1));
    EXPECT_EQ(info.matched_tokens, 12u);
    store->Erase(keys[2]);
    store->ReleaseLoads();
    EXPECT_EQ(*pool->WaitLoaded(1), 8u);
    EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(8)));
    EXPECT_EQ(pool->GetStats().load_misses, 1u);
  }
  // A block of another layout is never served.
  {
    ModelLayout other = TestLayout(2, 2, 8, 4);
    auto file = MakeBlockFile(other, keys[0], chain_->ns(), chain_->ns());
    ASSERT_THAT(file, IsOk());
    MapBackingStore store;
    ASSERT_THAT(store.Store(keys[0], std::make_shared<const BlockBuffer>(*std::move(file))),
                IsOk());
    auto pool = Make(&store, 8);
    EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 0u);
    EXPECT_EQ(pool->GetStats().load_misses, 1u);
  }
}

// Hands out the bytes it was given for each key, unverified: a store with a
// bug, which the pool's own header check must catch. Filled before the pool
// uses it, then only read.
class UncheckedStore final : public BlockBackingStore {
 public:
  void Put(const BlockKey& key, SharedBlock block) { blocks_[key] = std::move(block); }
  size_t Match(std::span<const BlockKey> keys) override {
    size_t n = 0;
    while (n < keys.size() && blocks_.count(keys[n]) != 0) ++n;
    return n;
  }
  Status Store(const BlockKey&, SharedBlock) override { return Status::Ok(); }
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override {
    for (size_t i = 0; i < keys.size(); ++i) {
      auto it = blocks_.find(keys[i]);
      on_block(i, it == blocks_.end() ? nullptr : it->second);
    }
  }

 private:
  std::unordered_map<BlockKey, SharedBlock, BlockKeyHash> blocks_;
};

// The pool checks each block's header itself (key, signature, sizes, its
// meta_checksum), also once it has seen blocks of that shape (whose headers
// it then reads without a JSON parse): a store that hands out another key's
// block, or a header edited behind its meta_checksum, gets a miss there and
// the prefix ends before it, never those bytes.
TEST_F(PoolTiersTest, AStoreBugIsAMissAlsoForAHeaderOfAKnownShape) {
  const std::vector<uint32_t> a = Iota(17);  // 4 full blocks
  const std::vector<BlockKey> keys = StoreBlocksOf(a);
  ASSERT_EQ(keys.size(), 4u);
  auto serve = [&](UncheckedStore* store) {
    for (const BlockKey& k : keys) store->Put(k, store_.Get(k));
  };
  {
    UncheckedStore store;
    serve(&store);
    store.Put(keys[2], store_.Get(keys[3]));  // a valid block of the same shape
    auto pool = Make(&store, 8);
    EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 8u);
    EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(8)));
    EXPECT_EQ(pool->GetStats().loaded_blocks, 2u);
    EXPECT_EQ(pool->GetStats().load_misses, 2u);
  }
  {
    // One digit of block 1's first tensor checksum: its meta_checksum no
    // longer matches.
    const SharedBlock good = store_.Get(keys[1]);
    std::vector<std::byte> bytes(good->span().begin(), good->span().end());
    const std::string text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
    const size_t field = text.find("\"tensor_checksums\"");
    ASSERT_NE(field, std::string::npos);
    const size_t digit = text.find("xxh3-128:", field) + 9;
    bytes[digit] = static_cast<std::byte>(text[digit] == '0' ? '1' : '0');
    DecodeOptions opts;
    EXPECT_EQ(BlockFileErrorOf(DecodeBlock(bytes, opts).status()),
              BlockFileError::kMetaChecksumMismatch);
    auto edited = BlockBuffer::Allocate(bytes.size());
    ASSERT_THAT(edited, IsOk());
    std::memcpy(edited->data(), bytes.data(), bytes.size());
    UncheckedStore store;
    serve(&store);
    store.Put(keys[1], std::make_shared<const BlockBuffer>(*std::move(edited)));
    auto pool = Make(&store, 8);
    EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 4u);
    EXPECT_TRUE(kv_.Check(pool.get(), 1, std::span(a).first(4)));
    EXPECT_EQ(pool->GetStats().loaded_blocks, 1u);
    EXPECT_EQ(pool->GetStats().load_misses, 3u);
  }
}

// A block the pool restored before carries the pool's header note and is
// restored again without a header check (BlockBuffer::HeaderNote): the
// same bytes land. The note names its key: the same buffer handed out
// under another key is still a miss. Another pool (a decoder of its own)
// checks the header itself.
TEST_F(PoolTiersTest, ANotedBlockUnderAnotherKeyIsAMiss) {
  const std::vector<uint32_t> a = Iota(17);  // 4 full blocks
  const std::vector<BlockKey> keys = StoreBlocksOf(a);
  ASSERT_EQ(keys.size(), 4u);
  UncheckedStore store;
  for (const BlockKey& k : keys) store.Put(k, store_.Get(k));
  auto pool = Make(&store, 8, StorePolicy::kOnFill, /*retain=*/false);
  for (uint64_t seq = 1; seq <= 2; ++seq) {  // the second restore reads the notes
    EXPECT_EQ(*pool->Allocate(seq, Plus(a, 1)), 16u);
    EXPECT_TRUE(kv_.Check(pool.get(), seq, std::span(a).first(16)));
    ASSERT_THAT(pool->Remove(seq), IsOk());
  }
  EXPECT_EQ(pool->GetStats().loaded_blocks, 8u);
  EXPECT_EQ(pool->GetStats().load_misses, 0u);
  store.Put(keys[2], store_.Get(keys[3]));  // noted, for keys[3]
  EXPECT_EQ(*pool->Allocate(3, Plus(a, 1)), 8u);
  EXPECT_TRUE(kv_.Check(pool.get(), 3, std::span(a).first(8)));
  EXPECT_EQ(pool->GetStats().loaded_blocks, 10u);
  EXPECT_EQ(pool->GetStats().load_misses, 2u);
  ASSERT_THAT(pool->Remove(3), IsOk());
  auto second = Make(&store, 8);
  EXPECT_EQ(*second->Allocate(1, Plus(a, 1)), 8u);
  EXPECT_TRUE(kv_.Check(second.get(), 1, std::span(a).first(8)));
  EXPECT_EQ(second->GetStats().load_misses, 2u);
}

TEST_F(PoolTiersTest, EvictedSequenceRestoresThroughTheTier) {
  auto pool = Make(&store_, 16, StorePolicy::kOnFill, /*retain=*/false);
  const std::vector<uint32_t> a = Iota(10);
  Fill(pool.get(), 1, a, 0);
  ASSERT_THAT(pool->Evict(1), IsOk());
  EXPECT_EQ(pool->FreeCount(), 16u);
  EXPECT_EQ(pool->GetStats().offloaded_blocks, 3u);

  AllocateInfo info = *pool->AllocateAsync(1, Plus(a, 9));
  EXPECT_TRUE(info.restored);
  EXPECT_EQ(info.tier_blocks, 2u);
  EXPECT_EQ(info.matched_tokens, 10u);  // 2 full blocks + the partial one
  EXPECT_EQ(*pool->WaitLoaded(1), 10u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  ASSERT_THAT(kv_.Write(pool.get(), 1, Plus(a, 9), 10, 11, AppendMode::kToken), IsOk());
  EXPECT_TRUE(kv_.Check(pool.get(), 1, Plus(a, 9)));

  // A later process has the full blocks, by key.
  ASSERT_THAT(pool->Evict(1), IsOk());
  pool.reset();
  std::unique_ptr<MapBackingStore> reopened = store_.CloneBytes();
  auto later = Make(reopened.get());
  EXPECT_EQ(*later->Allocate(1, Plus(a, 9)), 8u);
  EXPECT_TRUE(kv_.Check(later.get(), 1, std::span(a).first(8)));
}

// Blocks past StreamCopy's threshold, of a size no multiple of a cache
// line, restore to the oracle's bytes by each way a restore writes a slot:
// an offloaded sequence's full blocks from the tier and its partial block
// from host memory, then a later pool's blocks from the tier (whose data
// starts after the header: unaligned).
TEST(PoolStreamedRestoreTest, BlocksPastTheStreamingThresholdRestoreExactly) {
  const ModelLayout layout = TestLayout(3, 2, 66, 170);
  const uint64_t block_bytes = layout.BlockBytes();
  ASSERT_GE(block_bytes, pool_internal::kStreamFromBytes);
  ASSERT_NE(block_bytes % 64, 0u);
  KvOracle kv(layout);
  MapBackingStore store;
  PoolOptions o = TestOptions(layout, 8);
  o.store = &store;
  o.retain_freed_blocks = false;
  auto created = BlockPool::Create(o);
  ASSERT_THAT(created, IsOk());
  std::unique_ptr<BlockPool> pool = std::move(created).value();
  const std::vector<uint32_t> a = Iota(2 * 170 + 160);  // 2 full blocks, 160 tokens more
  ASSERT_EQ(*pool->Allocate(1, a), 0u);
  ASSERT_THAT(kv.Write(pool.get(), 1, a, 0, a.size(), AppendMode::kLayer), IsOk());
  ASSERT_THAT(pool->Evict(1), IsOk());
  EXPECT_EQ(*pool->Allocate(1, Plus(a, 7)), a.size());
  EXPECT_EQ(pool->GetStats().loaded_blocks, 2u);
  EXPECT_TRUE(kv.Check(pool.get(), 1, a));
  pool.reset();
  std::unique_ptr<MapBackingStore> reopened = store.CloneBytes();
  o.store = reopened.get();
  created = BlockPool::Create(o);
  ASSERT_THAT(created, IsOk());
  std::unique_ptr<BlockPool> later = std::move(created).value();
  EXPECT_EQ(*later->Allocate(2, Plus(a, 7)), 340u);
  EXPECT_EQ(later->GetStats().loaded_blocks, 2u);
  EXPECT_TRUE(kv.Check(later.get(), 2, std::span(a).first(340)));
}

TEST_F(PoolTiersTest, FailedOffloadStoresKeepTheBlocksInHostMemory) {
  auto pool = Make(&store_, 16, StorePolicy::kNever, /*retain=*/false);
  const std::vector<uint32_t> a = Iota(10);
  Fill(pool.get(), 1, a, 0);
  store_.FailNextStores(2);
  ASSERT_THAT(pool->Evict(1), IsOk());
  EXPECT_EQ(store_.size(), 0u);
  PoolStats s = pool->GetStats();
  EXPECT_EQ(s.store_errors, 2u);
  EXPECT_EQ(s.stored_blocks, 0u);

  AllocateInfo info = *pool->AllocateAsync(1, Plus(a, 9));
  EXPECT_EQ(info.pool_blocks, 2u);  // from the offload record, not the tier
  EXPECT_EQ(info.tier_blocks, 0u);
  EXPECT_EQ(info.matched_tokens, 10u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));

  // Once a store succeeds the record lets go of the block.
  ASSERT_THAT(pool->Evict(1), IsOk());
  EXPECT_EQ(store_.size(), 2u);
  ASSERT_THAT(pool->Remove(1), IsOk());
  std::unique_ptr<MapBackingStore> reopened = store_.CloneBytes();
  auto later = Make(reopened.get());
  EXPECT_EQ(*later->Allocate(1, Plus(a, 9)), 8u);
  EXPECT_TRUE(kv_.Check(later.get(), 1, std::span(a).first(8)));
}

TEST_F(PoolTiersTest, SlotPressureOffloadsAndRestores) {
  auto pool = Make(&store_, 5, StorePolicy::kOnFill, /*retain=*/false);
  const std::vector<uint32_t> a = Iota(10), b = Iota(10, 500);
  Fill(pool.get(), 1, a, 0);  // 3 slots
  Fill(pool.get(), 2, b, 0);  // 3 slots: its last one evicts sequence 1
  EXPECT_FALSE(pool->HasSequence(1));
  EXPECT_TRUE(kv_.Check(pool.get(), 2, b));

  // Restoring 1 needs 3 slots: 2 are free, the third evicts sequence 2.
  EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 10u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  EXPECT_EQ(pool->DrainEvicted(), (std::vector<uint64_t>{1, 2}));

  // With 1 active, 2 gets its 2 full blocks back but no slot for the rest.
  const uint64_t one[] = {1};
  pool->SetActiveSequences(one);
  EXPECT_EQ(*pool->Allocate(2, Plus(b, 1)), 8u);
  EXPECT_TRUE(kv_.Check(pool.get(), 2, std::span(b).first(8)));
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  PoolStats s = pool->GetStats();
  EXPECT_EQ(s.evicted_sequences, 2u);
  EXPECT_EQ(s.restored_sequences, 2u);
  EXPECT_EQ(s.blocks_free, 0u);
}

// Device-like slot memory: bytes are stored XOR 0xa5, so any access that
// bypasses Copy() reads or writes the wrong bytes.
class ScramblingMemory final : public SlotMemory {
 public:
  MemoryKind kind() const override { return MemoryKind::kDevice; }
  Result<std::byte*> Allocate(size_t bytes) override { return host_->Allocate(bytes); }
  void Deallocate(std::byte* p, size_t bytes) override { host_->Deallocate(p, bytes); }
  void Copy(CopyDirection dir, const Copy2D& c) override {
    for (size_t r = 0; r < c.rows; ++r) {
      for (size_t i = 0; i < c.width; ++i) {
        std::byte b = c.src[r * c.src_pitch + i];
        if (dir != CopyDirection::kSlotToSlot) b ^= std::byte{0xa5};
        c.dst[r * c.dst_pitch + i] = b;
      }
    }
  }

 private:
  std::shared_ptr<SlotMemory> host_ = NewHostSlotMemory();
};

TEST_F(PoolTiersTest, PoolTouchesSlotMemoryOnlyThroughSlotMemory) {
  PoolOptions o = TestOptions(layout_, 6);
  o.store = &store_;
  o.retain_freed_blocks = false;
  o.memory = std::make_shared<ScramblingMemory>();
  auto created = BlockPool::Create(o);
  ASSERT_THAT(created, IsOk());
  std::unique_ptr<BlockPool> pool = std::move(created).value();
  const std::vector<uint32_t> a = Iota(10), b = Iota(14, 300);
  const std::vector<uint32_t> a8(a.begin(), a.begin() + 8);
  Fill(pool.get(), 1, a, 0);   // appends; block files stored on fill
  Fill(pool.get(), 2, a8, 7);  // shares 2 blocks, copies block 1 on write
  EXPECT_EQ(pool->GetStats().copy_on_write_blocks, 1u);
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  EXPECT_TRUE(kv_.Check(pool.get(), 2, a8));
  ASSERT_THAT(pool->Evict(1), IsOk());  // its partial block goes to host memory
  ASSERT_THAT(pool->Evict(2), IsOk());
  Fill(pool.get(), 3, b, 0);
  ASSERT_THAT(pool->Remove(3), IsOk());
  EXPECT_EQ(*pool->Allocate(1, Plus(a, 1)), 10u);  // tier loads + the partial block
  EXPECT_TRUE(kv_.Check(pool.get(), 1, a));
  EXPECT_EQ(*pool->Allocate(2, Plus(a8, 1)), 8u);
  EXPECT_TRUE(kv_.Check(pool.get(), 2, a8));
  // What reached the store decodes to the oracle's bytes.
  std::unique_ptr<MapBackingStore> reopened = store_.CloneBytes();
  auto later = Make(reopened.get());
  EXPECT_EQ(*later->Allocate(1, Plus(b, 1)), 12u);
  EXPECT_TRUE(kv_.Check(later.get(), 1, std::span(b).first(12)));
}

}  // namespace
}  // namespace kvtier
