// TieredBackingStore over a real TieredCache in a temp folder: Match, Store,
// Load from the host tier (the host entry's own buffer) and, after
// reopening, from the disk tier (read once, promoted without a copy) with
// exact bytes, misses, blocks with long headers, and a pool restoring a
// sequence through it.
#include "kvtier/tiered_backing_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "core/mutex.h"
#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/env.h"
#include "kvtier/tiered_cache.h"
#include "synth/block_generator.h"
#include "testing/map_backing_store.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

class TempFolder {
 public:
  TempFolder() {
    std::string t = (std::filesystem::temp_directory_path() / "kvtier_tbs_XXXXXX").string();
    if (::mkdtemp(t.data()) != nullptr) path_ = t;
  }
  ~TempFolder() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class TieredBackingStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = *ModelLayout::Preset("tiny");
    NamespaceOptions ns;
    ns.model_id = "tbs-test";
    ns.layout_signature = layout_.Signature();
    ns.block_tokens = layout_.block_tokens;
    chain_ = std::make_unique<KeyChain>(*KeyChain::Create(ns));
    std::vector<uint32_t> tokens(5 * layout_.block_tokens);
    std::iota(tokens.begin(), tokens.end(), 1000);
    keys_ = chain_->KeysFor(tokens);
    Open();
  }

  void Open() {
    CacheOptions co;
    co.layout_signature = layout_.Signature();
    co.host.capacity_bytes = 8 << 20;
    DiskTierOptions d;
    d.dir = dir_.path() + "/cache";
    co.disk = d;
    cache_ = cache_test::OpenCache(co);
    ASSERT_NE(cache_, nullptr);
    auto store = TieredBackingStore::Create(cache_.get());
    ASSERT_THAT(store, IsOk());
    store_ = std::move(store).value();
  }

  void Reopen() {
    store_.reset();
    ASSERT_THAT(cache_->Close(), IsOk());
    cache_.reset();
    Open();
  }

  SharedBlock Block(size_t i, std::vector<std::vector<std::string>> meta = {}) {
    const BlockKey parent = i == 0 ? chain_->ns() : keys_[i - 1];
    std::vector<std::vector<std::byte>> tensors = MakeBlockTensors(layout_, keys_[i]);
    std::vector<std::span<const std::byte>> views(tensors.begin(), tensors.end());
    EncodeRequest req;
    req.layout = &layout_;
    req.key = keys_[i];
    req.parent = parent;
    req.ns = chain_->ns();
    req.created_at = 1700000000;
    req.meta_states = std::move(meta);
    req.tensors = views;
    auto file = EncodeBlock(req);
    EXPECT_THAT(file, IsOk());
    return std::make_shared<const BlockBuffer>(std::move(file).value());
  }

  static std::vector<std::byte> Bytes(const SharedBlock& b) {
    return std::vector<std::byte>(b->span().begin(), b->span().end());
  }

  TempFolder dir_;
  ModelLayout layout_;
  std::unique_ptr<KeyChain> chain_;
  std::vector<BlockKey> keys_;
  std::unique_ptr<TieredCache> cache_;
  std::unique_ptr<TieredBackingStore> store_;
};

TEST_F(TieredBackingStoreTest, CreateChecksItsArguments) {
  EXPECT_THAT(TieredBackingStore::Create(nullptr), StatusIs(StatusCode::kInvalidArgument));
}

TEST_F(TieredBackingStoreTest, StoresMatchesAndLoadsFromHostThenDisk) {
  std::vector<SharedBlock> blocks;
  for (size_t i = 0; i < 3; ++i) {
    blocks.push_back(Block(i));
    ASSERT_THAT(store_->Store(keys_[i], blocks[i]), IsOk());
  }
  EXPECT_EQ(store_->Match(keys_), 3u);
  EXPECT_EQ(store_->Match(std::span<const BlockKey>(keys_).subspan(3)), 0u);

  std::vector<BlockKey> ask = {keys_[0], keys_[1], keys_[2], keys_[3]};
  std::vector<SharedBlock> got = LoadAndWait(*store_, ask);
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    ASSERT_NE(got[i], nullptr) << i;
    EXPECT_EQ(Bytes(got[i]), Bytes(blocks[i])) << i;
    EXPECT_THAT(CheckBlockFile(got[i]->span(), layout_, keys_[i]), IsOk());
  }
  EXPECT_EQ(got[3], nullptr);
  TieredBackingStoreCounters c = store_->counters();
  EXPECT_EQ(c.stored_blocks, 3u);
  EXPECT_EQ(c.loaded_host, 3u);
  EXPECT_EQ(c.loaded_disk, 0u);
  EXPECT_EQ(c.load_misses, 1u);
  EXPECT_EQ(c.loaded_bytes, blocks[0]->size() * 3);

  Reopen();  // dirty host blocks were written to disk on Close
  EXPECT_EQ(store_->Match(keys_), 3u);
  got = LoadAndWait(*store_, std::vector<BlockKey>{keys_[2], keys_[0]});
  ASSERT_EQ(got.size(), 2u);
  ASSERT_NE(got[0], nullptr);
  ASSERT_NE(got[1], nullptr);
  EXPECT_EQ(Bytes(got[0]), Bytes(blocks[2]));
  EXPECT_EQ(Bytes(got[1]), Bytes(blocks[0]));
  c = store_->counters();
  EXPECT_EQ(c.loaded_disk, 2u);
  EXPECT_EQ(c.loaded_host, 0u);
  EXPECT_EQ(c.load_misses, 0u);
}

// Blocks are read into buffers of their exact size, whatever their header
// length: no estimate, no second read.
TEST_F(TieredBackingStoreTest, BlocksWithLongHeadersAreServedWhole) {
  std::vector<std::vector<std::string>> meta(layout_.layers.size(),
                                             std::vector<std::string>(6, std::string(1000, 'm')));
  SharedBlock big = Block(0, meta);
  SharedBlock normal = Block(1);
  ASSERT_GT(big->size(), normal->size() + 4096);
  ASSERT_THAT(store_->Store(keys_[0], big), IsOk());
  ASSERT_THAT(store_->Store(keys_[1], normal), IsOk());
  for (int round = 0; round < 2; ++round) {  // host, then disk
    std::vector<SharedBlock> got = LoadAndWait(*store_, std::vector<BlockKey>{keys_[0], keys_[1]});
    ASSERT_EQ(got.size(), 2u);
    ASSERT_NE(got[0], nullptr) << round;
    ASSERT_NE(got[1], nullptr) << round;
    EXPECT_EQ(Bytes(got[0]), Bytes(big));
    EXPECT_EQ(Bytes(got[1]), Bytes(normal));
    EXPECT_EQ(store_->counters().load_misses, 0u);
    if (round == 0) Reopen();
  }
  EXPECT_EQ(cache_->Stats().disk->loads, 2u);
}

TEST_F(TieredBackingStoreTest, AHostHitIsTheHostEntrysOwnBuffer) {
  SharedBlock block = Block(0);
  ASSERT_THAT(store_->Store(keys_[0], block), IsOk());
  std::vector<SharedBlock> got = LoadAndWait(*store_, std::span(keys_).first(1));
  ASSERT_EQ(got.size(), 1u);
  // Not a copy: the very buffer the cache holds as its host entry.
  EXPECT_EQ(got[0].get(), block.get());
  EXPECT_EQ(store_->counters().loaded_host, 1u);
}

TEST_F(TieredBackingStoreTest, ADiskHitIsReadOnceAndPromotedWithoutACopy) {
  ASSERT_THAT(store_->Store(keys_[0], Block(0)), IsOk());
  Reopen();
  std::vector<SharedBlock> first = LoadAndWait(*store_, std::span(keys_).first(1));
  ASSERT_NE(first[0], nullptr);
  EXPECT_EQ(Bytes(first[0]), Bytes(Block(0)));
  std::vector<SharedBlock> second = LoadAndWait(*store_, std::span(keys_).first(1));
  // The host entry the read was promoted into is the read's own buffer.
  EXPECT_EQ(second[0].get(), first[0].get());
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.disk->loads, 1u);
  EXPECT_EQ(s.promotions, 1u);
  EXPECT_EQ(s.hits_disk, 1u);
  EXPECT_EQ(s.hits_host, 1u);
  TieredBackingStoreCounters c = store_->counters();
  EXPECT_EQ(c.loaded_disk, 1u);
  EXPECT_EQ(c.loaded_host, 1u);
}

// LoadTensors: the disk tier reads the header and the selected tensors only
// (exact bytes), the selected bytes are the block's, and a partly valid
// buffer is never promoted into the host tier (a whole one is).
TEST_F(TieredBackingStoreTest, PartialLoadsReadOnlySelectedTensorsAndAreNotPromoted) {
  for (size_t i = 0; i < 2; ++i) ASSERT_THAT(store_->Store(keys_[i], Block(i)), IsOk());
  Reopen();
  const SharedBlock want = Block(0);
  Result<DecodedBlock> d = DecodeBlock(want->span(), {});
  ASSERT_THAT(d, IsOk());
  const uint64_t header = 8 + d->header_bytes;
  ASSERT_EQ(d->tensors.size(), 4u);  // tiny: 2 layers × K, V of 1024 bytes
  const TensorMask mask = {false, true, false, false};
  const std::vector<TensorMask> masks = {mask, {}};  // key 1: whole
  auto load = [&] {
    Mutex mu;
    CondVar cv;
    std::vector<SharedBlock> out(2);
    size_t arrived = 0;
    store_->LoadTensors(std::span(keys_).first(2), masks, [&](size_t i, SharedBlock b) {
      MutexLock lock(&mu);
      out[i] = std::move(b);
      ++arrived;
      cv.SignalAll();
    });
    MutexLock lock(&mu);
    while (arrived != 2) cv.Wait(&lock);
    return out;
  };
  std::vector<SharedBlock> got = load();
  ASSERT_NE(got[0], nullptr);
  ASSERT_NE(got[1], nullptr);
  ASSERT_EQ(got[0]->size(), want->size());
  EXPECT_EQ(std::memcmp(got[0]->data(), want->data(), header), 0);
  const uint64_t at = header + d->tensors[1].begin;
  EXPECT_EQ(std::memcmp(got[0]->data() + at, want->data() + at, 1024), 0);
  EXPECT_EQ(Bytes(got[1]), Bytes(Block(1)));
  CacheStats s = cache_->Stats();
  EXPECT_EQ(s.disk->bytes_read, header + 1024 + want->size());
  EXPECT_EQ(s.promotions, 1u);  // the whole block only
  EXPECT_EQ(cache_->Contains(keys_[0]), CacheTier::kDisk);
  EXPECT_EQ(cache_->Contains(keys_[1]), CacheTier::kHost);
  // Again: block 0 is read partially from disk once more, block 1 is a host hit.
  got = load();
  s = cache_->Stats();
  EXPECT_EQ(s.hits_disk, 3u);
  EXPECT_EQ(s.hits_host, 1u);
  EXPECT_EQ(s.disk->bytes_read, 2 * (header + 1024) + want->size());
}

TEST_F(TieredBackingStoreTest, APoolRestoresThroughItAfterAReopen) {
  PoolOptions po;
  po.layout = layout_;
  po.key_namespace.model_id = "tbs-test";
  po.total_blocks = 16;
  po.store = store_.get();
  auto pool = BlockPool::Create(po);
  ASSERT_THAT(pool, IsOk());
  const size_t bt = layout_.block_tokens, n = 3 * bt;
  std::vector<uint32_t> tokens(n + 1);
  std::iota(tokens.begin(), tokens.end(), 1000);  // the same tokens as keys_
  ASSERT_THAT((*pool)->Allocate(1, tokens), IsOk());
  // K/V: each state's [A, n, B] bytes from a counter.
  for (uint32_t l = 0; l < layout_.layers.size(); ++l) {
    std::vector<std::vector<std::byte>> states;
    std::vector<std::span<const std::byte>> views;
    for (const TensorSpec& t : layout_.layers[l].states) {
      states.emplace_back(t.ByteSize() / bt * n);
      for (size_t i = 0; i < states.back().size(); ++i) {
        states.back()[i] = static_cast<std::byte>((i * 7 + l * 31 + t.role.size()) & 0xff);
      }
      views.emplace_back(states.back());
    }
    ASSERT_THAT((*pool)->AppendLayer(1, l, 0, n, views), IsOk());
  }
  ASSERT_THAT((*pool)->Advance(1, std::span(tokens).first(n)), IsOk());
  std::vector<std::shared_ptr<const PackedLayerView>> want;
  for (uint32_t l = 0; l < layout_.layers.size(); ++l) want.push_back(*(*pool)->PackedLayer(1, l));
  EXPECT_EQ(store_->counters().stored_blocks, 3u);
  pool->reset();

  Reopen();
  po.store = store_.get();
  auto again = BlockPool::Create(po);
  ASSERT_THAT(again, IsOk());
  auto m = (*again)->Allocate(7, tokens);
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(*m, n);
  EXPECT_EQ(store_->counters().loaded_disk, 3u);
  for (uint32_t l = 0; l < layout_.layers.size(); ++l) {
    auto view = (*again)->PackedLayer(7, l);
    ASSERT_THAT(view, IsOk());
    ASSERT_EQ((*view)->states.size(), want[l]->states.size());
    for (size_t s = 0; s < want[l]->states.size(); ++s) {
      const auto& a = (*view)->states[s].data;
      const auto& b = want[l]->states[s].data;
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0) << "layer " << l << " state " << s;
    }
  }
}

}  // namespace
}  // namespace kvtier
