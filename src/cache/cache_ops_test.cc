// TieredCache::Contains, Erase, Clear and Prometheus, per tier: host only,
// disk (one cache, and two caches sharing a folder as two processes would,
// with a second layout in it), and remote (real redis-server processes, as
// in cache_remote_test.cc: each test under its own key prefix).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cache/cache_test_util.h"
#include "kvtier/tiered_cache.h"
#include "testing/prometheus_text.h"
#include "testing/raw_redis.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace kvtier::cache_test {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

std::string TestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// Blocks of a second layout (another signature) for the shared-folder tests.
const ModelLayout& OtherLayout() {
  static const ModelLayout* layout =
      new ModelLayout(ModelLayout::Attention("other", 2, 2, 8, DType::kF16, 16));
  return *layout;
}

SharedBlock MakeOtherBlock(const BlockKey& key) {
  BlockKey zero{};
  Result<BlockBuffer> buf = MakeBlockFile(OtherLayout(), key, zero, zero, 1'700'000'000);
  if (!buf.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

TEST(CacheOps, HostOnly) {
  std::unique_ptr<TieredCache> c = OpenCache(HostOnlyOptions(16));
  ASSERT_NE(c, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 4);
  ASSERT_THAT(c->Store(keys, Blocks(keys)), IsOk());
  EXPECT_EQ(c->Contains(keys[0]), CacheTier::kHost);
  EXPECT_EQ(c->Contains(TestBlockKey(99)), CacheTier::kNone);
  // Contains reads no data: nothing is counted as a lookup.
  EXPECT_EQ(c->Stats().lookups, 0u);

  Result<bool> erased = c->Erase(keys[0]);
  ASSERT_THAT(erased, IsOk());
  EXPECT_TRUE(*erased);
  EXPECT_EQ(c->Contains(keys[0]), CacheTier::kNone);
  EXPECT_EQ(c->Match(keys).blocks, 0u);
  erased = c->Erase(keys[0]);
  ASSERT_THAT(erased, IsOk());
  EXPECT_FALSE(*erased);

  Result<uint64_t> cleared = c->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 3u);
  for (const BlockKey& k : keys) EXPECT_EQ(c->Contains(k), CacheTier::kNone);
  CacheStats s = c->Stats();
  EXPECT_EQ(s.index_keys, 0u);
  EXPECT_EQ(s.host.entries, 0u);

  const std::string text = c->Prometheus();
  EXPECT_THAT(text, HasSubstr("kvtier_cache_stores"));
  EXPECT_THAT(text, HasSubstr("kvtier_host_"));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(text));

  ASSERT_THAT(c->Close(), IsOk());
  EXPECT_EQ(c->Contains(keys[1]), CacheTier::kNone);
  EXPECT_THAT(c->Erase(keys[1]), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(c->Clear(), StatusIs(StatusCode::kFailedPrecondition));
}

TEST(CacheOps, DiskEraseDropsEveryCopyAndTheHint) {
  TempDir dir("cache_ops_disk");
  std::unique_ptr<TieredCache> c = OpenCache(DiskOptions(dir.path(), 2));
  ASSERT_NE(c, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 6);
  StoreOptions through;
  through.write_policy = WritePolicy::kWriteThrough;
  ASSERT_THAT(c->Store(keys, Blocks(keys), through), IsOk());
  ASSERT_THAT(c->Flush(), IsOk());
  // The host tier holds the last 2; the rest are on disk only.
  EXPECT_EQ(c->Contains(keys[0]), CacheTier::kDisk);
  EXPECT_EQ(c->Contains(keys[5]), CacheTier::kHost);

  for (const BlockKey& k : {keys[0], keys[5]}) {
    Result<bool> erased = c->Erase(k);
    ASSERT_THAT(erased, IsOk());
    EXPECT_TRUE(*erased);
    EXPECT_EQ(c->Contains(k), CacheTier::kNone);
  }
  EXPECT_EQ(c->Match(keys).blocks, 0u);  // the chain now starts with a hole
  std::vector<std::byte> buf(BlockBytes());
  const std::span<std::byte> dsts[] = {buf};
  Result<LoadFuture> f = c->Load(std::span<const BlockKey>(&keys[5], 1), dsts);
  ASSERT_THAT(f, IsOk());
  Result<std::vector<LoadedBlock>> got = f->Get();
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ((*got)[0].tier, CacheTier::kNone);
  // A write-back entry that is erased is not written down afterwards.
  const std::vector<BlockKey> dirty = Keys(10, 1);
  ASSERT_THAT(c->Store(dirty, Blocks(dirty)), IsOk());
  ASSERT_TRUE(*c->Erase(dirty[0]));
  ASSERT_THAT(c->Flush(), IsOk());
  EXPECT_EQ(c->Contains(dirty[0]), CacheTier::kNone);
  EXPECT_EQ(c->Contains(keys[1]), CacheTier::kDisk);
}

// Two caches on one folder (each with its own disk tier and index
// connections, as two processes have), plus a cache of another layout in
// the same folder: A stores, B sees; A erases and clears, B misses; the
// other layout's blocks are kept.
TEST(CacheOps, SharedFolderEraseAndClear) {
  TempDir dir("cache_ops_shared");
  std::unique_ptr<TieredCache> a = OpenCache(DiskOptions(dir.path(), 2));
  std::unique_ptr<TieredCache> b = OpenCache(DiskOptions(dir.path(), 2));
  CacheOptions oo = DiskOptions(dir.path(), 2);
  oo.layout_signature = OtherLayout().Signature();
  std::unique_ptr<TieredCache> other = OpenCache(oo);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(other, nullptr);

  const std::vector<BlockKey> keys = Keys(0, 5);
  ASSERT_THAT(a->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(a->Flush(), IsOk());
  const std::vector<BlockKey> other_keys = Keys(100, 3);
  std::vector<SharedBlock> other_blocks;
  for (const BlockKey& k : other_keys) other_blocks.push_back(MakeOtherBlock(k));
  ASSERT_THAT(other->Store(other_keys, other_blocks), IsOk());
  ASSERT_THAT(other->Flush(), IsOk());

  for (const BlockKey& k : keys) EXPECT_EQ(b->Contains(k), CacheTier::kDisk);
  EXPECT_EQ(b->Match(keys).blocks, keys.size());

  ASSERT_TRUE(*a->Erase(keys[0]));
  EXPECT_EQ(b->Contains(keys[0]), CacheTier::kNone);
  // B's Match answers from the hints its index learnt (a stale one costs
  // one disk miss on Load, which clears it).
  {
    Result<LoadFuture> f = b->LoadShared(std::span<const BlockKey>(&keys[0], 1));
    ASSERT_THAT(f, IsOk());
    EXPECT_EQ((*f->Get())[0].tier, CacheTier::kNone);
  }
  EXPECT_EQ(b->Match(keys).blocks, 0u);

  Result<uint64_t> cleared = a->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 4u);
  for (const BlockKey& k : keys) {
    EXPECT_EQ(a->Contains(k), CacheTier::kNone);
    EXPECT_EQ(b->Contains(k), CacheTier::kNone);
  }
  // B's index learnt keys[1..] from the disk tier; its loads now miss (and
  // clear those hints).
  std::vector<LoadedBlock> got;
  {
    Result<LoadFuture> f = b->LoadShared(std::span<const BlockKey>(keys).subspan(1));
    ASSERT_THAT(f, IsOk());
    Result<std::vector<LoadedBlock>> r = f->Get();
    ASSERT_THAT(r, IsOk());
    got = *r;
  }
  for (const LoadedBlock& l : got) EXPECT_EQ(l.tier, CacheTier::kNone);
  // The other layout's blocks are still there.
  for (const BlockKey& k : other_keys) EXPECT_NE(other->Contains(k), CacheTier::kNone);
  ASSERT_THAT(other->Close(), IsOk());
  std::unique_ptr<TieredCache> reopened = OpenCache(oo);
  ASSERT_NE(reopened, nullptr);
  for (const BlockKey& k : other_keys) EXPECT_EQ(reopened->Contains(k), CacheTier::kDisk);
}

enum class Where { kSingle, kCluster };

class CacheOpsRemoteTest : public ::testing::TestWithParam<Where> {
 protected:
  CacheOptions Options(const std::string& dir) {
    Result<std::string> u = GetParam() == Where::kSingle ? testing::TestRedisUrl()
                                                         : testing::TestRedisClusterUrl();
    EXPECT_TRUE(u.ok()) << u.status().ToString();
    CacheOptions o = dir.empty() ? HostOnlyOptions(2) : DiskOptions(dir, 2);
    RemoteTierOptions r;
    r.url = u.ok() ? *u : "";
    r.layout = TinyLayout();
    r.key_prefix = prefix_;
    r.connections_per_node = 2;
    r.writer_threads = 1;
    o.remote = r;
    return o;
  }
  std::string prefix_ = testing::UniqueKeyPrefix(TestName());
};

INSTANTIATE_TEST_SUITE_P(Servers, CacheOpsRemoteTest,
                         ::testing::Values(Where::kSingle, Where::kCluster), [](const auto& info) {
                           return info.param == Where::kSingle ? "Single" : "Cluster";
                         });

// Host A stores (RAM for 2 blocks, Redis for all); host B, with no folder,
// sees them in Redis. A's erase and clear remove them from Redis too.
TEST_P(CacheOpsRemoteTest, EraseAndClearReachRedis) {
  std::unique_ptr<TieredCache> a = OpenCache(Options(""));
  std::unique_ptr<TieredCache> b = OpenCache(Options(""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 4);
  ASSERT_THAT(a->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(a->Flush(), IsOk());
  EXPECT_EQ(a->Contains(keys[3]), CacheTier::kHost);
  for (const BlockKey& k : keys) EXPECT_EQ(b->Contains(k), CacheTier::kRemote);

  ASSERT_TRUE(*a->Erase(keys[3]));
  EXPECT_EQ(a->Contains(keys[3]), CacheTier::kNone);
  EXPECT_EQ(b->Contains(keys[3]), CacheTier::kNone);
  // B promotes keys[0] into its own RAM: B's clear then erases it in Redis
  // (a key its host tier held).
  std::vector<std::byte> buf(BlockBytes());
  const std::span<std::byte> dsts[] = {buf};
  Result<LoadFuture> f = b->Load(std::span<const BlockKey>(&keys[0], 1), dsts);
  ASSERT_THAT(f, IsOk());
  ASSERT_EQ((*f->Get())[0].tier, CacheTier::kRemote);
  EXPECT_EQ(b->Contains(keys[0]), CacheTier::kHost);
  // B's clear also scans Redis: keys[1] and keys[2], which B never held,
  // are this layout's blocks and go too.
  Result<uint64_t> cleared = b->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 3u);
  EXPECT_EQ(a->Contains(keys[0]), CacheTier::kNone);
  EXPECT_EQ(b->Contains(keys[1]), CacheTier::kNone);
  EXPECT_EQ(b->Contains(keys[2]), CacheTier::kNone);
  // A's host tier still held keys[2]: its clear erases that copy only.
  cleared = a->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 1u);
  EXPECT_EQ(a->Contains(keys[2]), CacheTier::kNone);
}

// A cache that never held a key clears it in Redis (SCAN of every master,
// header checked): every part, and the `:mac` name a signed value has.
// Another layout's blocks under the same prefix, and a value that is not a
// block, are kept.
TEST_P(CacheOpsRemoteTest, ClearScansRedisAndKeepsOtherLayouts) {
  // Parts of 4 KiB: each tiny block (4 KiB of data and its header) is two.
  CacheOptions two_parts = Options("");
  two_parts.remote->part_bytes = 4096;
  std::unique_ptr<TieredCache> a = OpenCache(two_parts);
  CacheOptions oo = Options("");
  oo.layout_signature = OtherLayout().Signature();
  oo.remote->layout = OtherLayout();
  std::unique_ptr<TieredCache> other = OpenCache(oo);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(other, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 6);
  ASSERT_THAT(a->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(a->Flush(), IsOk());
  const std::vector<BlockKey> other_keys = Keys(100, 3);
  std::vector<SharedBlock> other_blocks;
  for (const BlockKey& k : other_keys) other_blocks.push_back(MakeOtherBlock(k));
  ASSERT_THAT(other->Store(other_keys, other_blocks), IsOk());
  ASSERT_THAT(other->Flush(), IsOk());
  ASSERT_THAT(a->Close(), IsOk());
  ASSERT_THAT(other->Close(), IsOk());

  Result<std::string> url = GetParam() == Where::kSingle ? testing::TestRedisUrl()
                                                         : testing::TestRedisClusterUrl();
  ASSERT_THAT(url, IsOk());
  testing::RawRedis raw(*url);
  const std::string mac = prefix_ + "{" + keys[0].Hex() + "}:mac";
  const std::string junk = prefix_ + "{" + Keys(50, 1)[0].Hex() + "}";
  ASSERT_EQ(raw.Run({"SET", mac, "signature"}), "status:OK");
  ASSERT_EQ(raw.Run({"SET", junk, "not a block"}), "status:OK");
  // An empty value reads as GETRANGE's answer for a key gone since the
  // SCAN: not a block, kept (and no read of zero bytes).
  const std::string empty = prefix_ + "{" + Keys(60, 1)[0].Hex() + "}";
  ASSERT_EQ(raw.Run({"SET", empty, ""}), "status:OK");
  const std::string part1 = prefix_ + "{" + keys[1].Hex() + "}:1";
  ASSERT_EQ(raw.Run({"EXISTS", part1}), "int:1");

  std::unique_ptr<TieredCache> fresh = OpenCache(two_parts);
  ASSERT_NE(fresh, nullptr);
  for (const BlockKey& k : keys) EXPECT_EQ(fresh->Contains(k), CacheTier::kRemote);
  Result<uint64_t> cleared = fresh->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, keys.size());
  for (const BlockKey& k : keys) EXPECT_EQ(fresh->Contains(k), CacheTier::kNone);
  EXPECT_EQ(raw.Run({"EXISTS", mac}), "int:0");
  EXPECT_EQ(raw.Run({"EXISTS", part1}), "int:0");
  EXPECT_EQ(raw.Run({"EXISTS", junk}), "int:1");
  EXPECT_EQ(raw.Run({"EXISTS", empty}), "int:1");
  std::unique_ptr<TieredCache> other_again = OpenCache(oo);
  ASSERT_NE(other_again, nullptr);
  for (const BlockKey& k : other_keys) EXPECT_EQ(other_again->Contains(k), CacheTier::kRemote);
  // Nothing of this layout is left: a second clear finds nothing.
  cleared = fresh->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 0u);
  (void)raw.Run({"DEL", junk});
  (void)raw.Run({"DEL", empty});
}

// A prefix with glob characters clears only its own blocks: clearing under
// "<p>*:" leaves the blocks under "<p>x:" (same layout, same name length),
// whether the SCAN pattern's escaping or the reads of the tier's own names
// keep them out.
TEST_P(CacheOpsRemoteTest, ClearsOnlyItsOwnPrefixWhateverItsCharacters) {
  CacheOptions star = Options("");
  star.remote->key_prefix = prefix_ + "*:";
  CacheOptions x = Options("");
  x.remote->key_prefix = prefix_ + "x:";
  std::unique_ptr<TieredCache> a = OpenCache(x);
  ASSERT_NE(a, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 3);
  ASSERT_THAT(a->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(a->Flush(), IsOk());
  ASSERT_THAT(a->Close(), IsOk());
  std::unique_ptr<TieredCache> s = OpenCache(star);
  ASSERT_NE(s, nullptr);
  Result<uint64_t> cleared = s->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, 0u);
  std::unique_ptr<TieredCache> again = OpenCache(x);
  ASSERT_NE(again, nullptr);
  for (const BlockKey& k : keys) EXPECT_EQ(again->Contains(k), CacheTier::kRemote);
  cleared = again->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, keys.size());
}

// With a disk tier, Clear erases in Redis every key the folder holds.
TEST_P(CacheOpsRemoteTest, ClearErasesTheFolderKeysInRedis) {
  TempDir dir("cache_ops_remote");
  std::unique_ptr<TieredCache> a = OpenCache(Options(dir.path()));
  std::unique_ptr<TieredCache> b = OpenCache(Options(""));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  const std::vector<BlockKey> keys = Keys(0, 6);
  ASSERT_THAT(a->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(a->Flush(), IsOk());
  for (const BlockKey& k : keys) EXPECT_EQ(b->Contains(k), CacheTier::kRemote);
  Result<uint64_t> cleared = a->Clear();
  ASSERT_THAT(cleared, IsOk());
  EXPECT_EQ(*cleared, keys.size());
  for (const BlockKey& k : keys) {
    EXPECT_EQ(a->Contains(k), CacheTier::kNone);
    EXPECT_EQ(b->Contains(k), CacheTier::kNone);
  }
  EXPECT_THAT(a->Prometheus(), HasSubstr("kvtier_remote_"));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(a->Prometheus()));
}

}  // namespace
}  // namespace kvtier::cache_test
