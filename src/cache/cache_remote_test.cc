// TieredCache with a remote tier, against real redis-server processes (the
// URLs scripts/test exports in KVTIER_TEST_REDIS_URL and
// KVTIER_TEST_REDIS_CLUSTER_URL, or servers this process starts: see
// testing/redis_server.h). Each test uses its own key prefix; two caches in
// one test play two hosts (separate host tiers, separate folders or none)
// sharing one server.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "cache/cache_test_util.h"
#include "kvtier/block_file.h"
#include "kvtier/block_pool.h"
#include "kvtier/tiered_backing_store.h"
#include "kvtier/tiered_cache.h"
#include "testing/prometheus_text.h"
#include "testing/raw_redis.h"
#include "testing/redis_server.h"
#include "testing/status_matchers.h"

namespace kvtier::cache_test {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

enum class RemoteWhere { kSingle, kCluster };

std::string UrlFor(RemoteWhere w) {
  Result<std::string> u =
      w == RemoteWhere::kSingle ? testing::TestRedisUrl() : testing::TestRedisClusterUrl();
  EXPECT_TRUE(u.ok()) << u.status().ToString();
  return u.ok() ? *u : "";
}

// A layout whose blocks span several of the remote tier's 4 KiB parts
// (about 20 KiB of data).
ModelLayout MultiPartLayout() {
  return ModelLayout::Attention("multipart", 2, 2, 80, DType::kF16, 32);
}

std::string RemoteTestName() { return ::testing::UnitTest::GetInstance()->current_test_info()->name(); }

// A host whose clock runs `offset_micros` ahead of the real one: blocks it
// encodes carry a different created_at, so two hosts write different
// bytes for the same key.
class ClockEnv final : public EnvWrapper {
 public:
  ClockEnv(Env* base, uint64_t offset_micros) : EnvWrapper(base), offset_(offset_micros) {}
  uint64_t NowMicros() override { return target()->NowMicros() + offset_; }

 private:
  const uint64_t offset_;
};

RemoteTierOptions RemoteOptions(const std::string& url, const ModelLayout& layout,
                                const std::string& prefix) {
  RemoteTierOptions r;
  r.url = url;
  r.layout = layout;
  r.key_prefix = prefix;
  r.connections_per_node = 2;
  r.writer_threads = 1;
  // Matches here check what Redis holds, not the request path's budget
  // (CacheRemotePausedServerTest does): an ASan build on a loaded machine
  // can take more than 20 ms for a cluster's first round trips.
  r.lookup_budget_ms = r.command_timeout_ms;
  return r;
}

// A cache ("host") of tiny blocks on `dir` (empty: host-only) sharing the
// remote tier at `url` under `prefix`.
CacheOptions HostWithRemote(const std::string& dir, const std::string& url,
                            const std::string& prefix, uint64_t blocks = 64) {
  CacheOptions o = dir.empty() ? HostOnlyOptions(blocks) : DiskOptions(dir, blocks);
  o.remote = RemoteOptions(url, TinyLayout(), prefix);
  return o;
}

// Every block of a LoadShared, in key order (waits for the future).
std::vector<LoadedBlock> LoadAll(TieredCache& cache, std::span<const BlockKey> keys) {
  Result<LoadFuture> f = cache.LoadShared(keys);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  if (!f.ok()) return {};
  Result<std::vector<LoadedBlock>> r = f->Get();
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return r.ok() ? *r : std::vector<LoadedBlock>{};
}

bool SameBytes(const SharedBlock& a, const SharedBlock& b) {
  return a != nullptr && b != nullptr && a->size() == b->size() &&
         std::memcmp(a->data(), b->data(), a->size()) == 0;
}

class CacheRemoteTest : public ::testing::TestWithParam<RemoteWhere> {
 protected:
  std::string url_ = UrlFor(GetParam());
  std::string prefix_ = testing::UniqueKeyPrefix(RemoteTestName());
};

INSTANTIATE_TEST_SUITE_P(Servers, CacheRemoteTest,
                         ::testing::Values(RemoteWhere::kSingle, RemoteWhere::kCluster), [](const auto& info) {
                           return info.param == RemoteWhere::kSingle ? "Single" : "Cluster";
                         });

// Host A computes and stores; host B (another folder, empty RAM) finds the
// blocks in Redis, loads them verified and keeps them in its host tier.
TEST_P(CacheRemoteTest, SecondHostLoadsWhatTheFirstStored) {
  TempDir dir_a("cache_remote_a");
  TempDir dir_b("cache_remote_b");
  constexpr size_t kBlocks = 12;
  const std::vector<BlockKey> keys = Keys(0, kBlocks);
  const std::vector<SharedBlock> blocks = Blocks(keys);

  std::unique_ptr<TieredCache> a = OpenCache(HostWithRemote(dir_a.path(), url_, prefix_));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Store(keys, blocks).ok());
  ASSERT_TRUE(a->Flush().ok());
  CacheStats sa = a->Stats();
  EXPECT_EQ(sa.remote_puts_queued, kBlocks);
  EXPECT_EQ(sa.remote_puts_dropped, 0u);
  ASSERT_TRUE(sa.remote.has_value());
  EXPECT_EQ(sa.remote->stored, kBlocks);

  std::unique_ptr<TieredCache> b = OpenCache(HostWithRemote(dir_b.path(), url_, prefix_));
  ASSERT_NE(b, nullptr);
  MatchResult m = b->Match(keys);
  EXPECT_EQ(m.blocks, kBlocks);
  EXPECT_EQ(m.remote_blocks, kBlocks);
  EXPECT_EQ(m.host_blocks, 0u);
  EXPECT_EQ(m.disk_blocks, 0u);
  EXPECT_THAT(m.tiers, ::testing::Each(CacheTier::kRemote));

  // Block by block, through the callback, as a BlockPool restores.
  std::vector<LoadedBlock> got(kBlocks);
  std::atomic<int> calls{0};
  SharedLoadOptions lo;
  lo.on_block = [&](size_t i, const LoadedBlock& lb) {
    got[i] = lb;
    calls.fetch_add(1);
  };
  Result<LoadFuture> f = b->LoadShared(keys, lo);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE(f->Get().ok());
  EXPECT_EQ(calls.load(), static_cast<int>(kBlocks));
  for (size_t i = 0; i < kBlocks; ++i) {
    EXPECT_EQ(got[i].tier, CacheTier::kRemote) << i;
    EXPECT_TRUE(SameBytes(got[i].block, blocks[i])) << i;
  }
  CacheStats sb = b->Stats();
  EXPECT_EQ(sb.lookups, kBlocks);
  EXPECT_EQ(sb.hits_remote, kBlocks);
  EXPECT_EQ(sb.hits_disk, 0u);
  EXPECT_EQ(sb.misses, 0u);
  EXPECT_EQ(sb.remote_lookups, kBlocks);
  EXPECT_EQ(sb.remote_misses, 0u);
  EXPECT_EQ(sb.bytes_loaded_remote, kBlocks * BlockBytes());
  EXPECT_EQ(sb.remote_promotions, kBlocks);
  EXPECT_EQ(sb.promotions, kBlocks);
  EXPECT_EQ(sb.match_remote_probes, kBlocks);
  EXPECT_EQ(sb.match_remote_found, kBlocks);
  ASSERT_TRUE(sb.remote.has_value());
  EXPECT_EQ(sb.remote->hits, kBlocks);
  EXPECT_EQ(sb.remote->bad_values, 0u);

  // The promoted entry is the buffer the remote read landed in: the same
  // bytes come back from RAM, and Redis is not asked again.
  std::vector<LoadedBlock> again = LoadAll(*b, keys);
  ASSERT_EQ(again.size(), kBlocks);
  for (size_t i = 0; i < kBlocks; ++i) {
    EXPECT_EQ(again[i].tier, CacheTier::kHost) << i;
    EXPECT_TRUE(SameBytes(again[i].block, blocks[i])) << i;
  }
  sb = b->Stats();
  EXPECT_EQ(sb.hits_host, kBlocks);
  EXPECT_EQ(sb.hits_remote, kBlocks);
  EXPECT_EQ(sb.remote_lookups, kBlocks);
  EXPECT_EQ(sb.remote->lookups, kBlocks);
  m = b->Match(keys);
  EXPECT_EQ(m.host_blocks, kBlocks);
  EXPECT_EQ(m.remote_blocks, 0u);
  EXPECT_TRUE(b->Close().ok());
  EXPECT_TRUE(a->Close().ok());
}

// Load() (copies into the caller's buffers) serves remote hits too, in a
// host-only cache, and a key nobody stored is a counted miss.
TEST_P(CacheRemoteTest, CopyLoadFromRemoteInHostOnlyCache) {
  const std::vector<BlockKey> keys = Keys(100, 6);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  std::unique_ptr<TieredCache> a = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(a, nullptr);
  ASSERT_TRUE(a->Store(keys, blocks).ok());
  ASSERT_TRUE(a->Flush().ok());

  std::unique_ptr<TieredCache> b = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(b, nullptr);
  std::vector<BlockKey> ask = keys;
  ask.push_back(TestBlockKey(999));  // never stored
  Buffers buf(ask.size());
  Result<LoadFuture> f = b->Load(ask, buf.spans);
  ASSERT_TRUE(f.ok());
  Result<std::vector<LoadedBlock>> r = f->Get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ((*r)[i].tier, CacheTier::kRemote) << i;
    EXPECT_TRUE(CheckLoaded(keys[i], buf.spans[i], (*r)[i].bytes).ok()) << i;
  }
  EXPECT_EQ(r->back().tier, CacheTier::kNone);
  CacheStats s = b->Stats();
  EXPECT_EQ(s.hits_remote, keys.size());
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.remote_lookups, keys.size() + 1);
  EXPECT_EQ(s.remote_misses, 1u);
  EXPECT_DOUBLE_EQ(s.hit_ratio, static_cast<double>(keys.size()) / (keys.size() + 1));
}

// A load with a tensor mask that the local tiers miss reads only the
// header and the selected tensor from Redis (the remote tier's bytes_read
// exact), hands out verified bytes and never promotes the partly valid
// buffer; a whole block of the same load is promoted. With a disk tier (the
// partial disk miss falls through) and without one.
TEST_P(CacheRemoteTest, PartialLoadReadsSelectedTensorsFromRemoteNotPromoted) {
  uint64_t base = 300;
  for (const bool with_disk : {false, true}) {
    base += 10;
    const std::vector<BlockKey> keys = Keys(base, 2);
    const std::vector<SharedBlock> blocks = Blocks(keys);
    std::unique_ptr<TieredCache> a = OpenCache(HostWithRemote("", url_, prefix_));
    ASSERT_NE(a, nullptr);
    ASSERT_TRUE(a->Store(keys, blocks).ok());
    ASSERT_TRUE(a->Flush().ok());

    TempDir dir("cache_remote_partial");
    std::unique_ptr<TieredCache> b =
        OpenCache(HostWithRemote(with_disk ? dir.path() : "", url_, prefix_));
    ASSERT_NE(b, nullptr);
    Result<DecodedBlock> d = DecodeBlock(blocks[0]->span(), {});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    const uint64_t header = 8 + d->header_bytes;
    ASSERT_EQ(d->tensors.size(), 4u);  // tiny: 2 layers x K, V of 1024 bytes
    SharedLoadOptions options;
    options.tensor_masks = {{false, false, true, false}, {}};  // key 1: whole
    Result<LoadFuture> f = b->LoadShared(keys, std::move(options));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    Result<std::vector<LoadedBlock>> r = f->Get();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ((*r)[0].tier, CacheTier::kRemote);
    ASSERT_EQ((*r)[1].tier, CacheTier::kRemote);
    const SharedBlock& part = (*r)[0].block;
    ASSERT_NE(part, nullptr);
    ASSERT_EQ(part->size(), blocks[0]->size());
    EXPECT_EQ(std::memcmp(part->data(), blocks[0]->data(), header), 0);
    const uint64_t at = header + d->tensors[2].begin;
    EXPECT_EQ(std::memcmp(part->data() + at, blocks[0]->data() + at, 1024), 0);
    EXPECT_TRUE(SameBytes((*r)[1].block, blocks[1]));
    const CacheStats s = b->Stats();
    ASSERT_TRUE(s.remote.has_value());
    EXPECT_EQ(s.remote->bytes_read, header + 1024 + blocks[1]->size()) << with_disk;
    EXPECT_EQ(s.remote->bad_values, 0u);
    EXPECT_EQ(s.hits_remote, 2u);
    EXPECT_EQ(s.promotions, 1u);  // the whole block only
    EXPECT_EQ(s.remote_promotions, 1u);
    EXPECT_NE(b->Contains(keys[0]), CacheTier::kHost);
    EXPECT_EQ(b->Contains(keys[1]), CacheTier::kHost);
  }
}

// Match takes local blocks first and asks Redis only about the others:
// host-held keys are not asked; the chain ends at the first key no tier has.
TEST_P(CacheRemoteTest, MatchMixesLocalAndRemote) {
  const std::vector<BlockKey> keys = Keys(200, 8);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  std::unique_ptr<TieredCache> a = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(a, nullptr);
  // Remote: keys 2..5 (A stores them).
  ASSERT_TRUE(a->Store(std::span(keys).subspan(2, 4), std::span(blocks).subspan(2, 4)).ok());
  ASSERT_TRUE(a->Flush().ok());

  CacheOptions ob = HostWithRemote("", url_, prefix_);
  ob.remote_write = RemoteWritePolicy::kReadOnly;
  std::unique_ptr<TieredCache> b = OpenCache(ob);
  ASSERT_NE(b, nullptr);
  // Local to B: keys 0, 1 and 4 (key 4 is also remote).
  std::vector<BlockKey> local = {keys[0], keys[1], keys[4]};
  std::vector<SharedBlock> local_blocks = {blocks[0], blocks[1], blocks[4]};
  ASSERT_TRUE(b->Store(local, local_blocks).ok());
  MatchResult m = b->Match(keys);
  EXPECT_EQ(m.blocks, 6u);
  EXPECT_THAT(m.tiers,
              ::testing::ElementsAre(CacheTier::kHost, CacheTier::kHost, CacheTier::kRemote,
                                     CacheTier::kRemote, CacheTier::kHost, CacheTier::kRemote));
  EXPECT_EQ(m.host_blocks, 3u);
  EXPECT_EQ(m.remote_blocks, 3u);
  CacheStats s = b->Stats();
  // Keys 2, 3, 5, 6, 7 were asked; 0, 1, 4 were not.
  EXPECT_EQ(s.match_remote_probes, 5u);
  EXPECT_EQ(s.match_remote_found, 3u);
  ASSERT_TRUE(s.remote.has_value());
  EXPECT_EQ(s.remote->exists_calls, 1u);
  // Read-only: B's store sent nothing.
  EXPECT_EQ(s.remote_puts_queued, 0u);
  EXPECT_EQ(s.remote->puts, 0u);

  CacheOptions off = HostWithRemote("", url_, prefix_);
  off.match_asks_remote = false;
  std::unique_ptr<TieredCache> c = OpenCache(off);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Match(keys).blocks, 0u);
  EXPECT_EQ(c->Stats().match_remote_probes, 0u);
}

// Two hosts write different bytes for the same keys at once (their clocks
// differ, so created_at does); the blocks span several parts. A third host
// must read, for every key, exactly one of the two blocks (or a counted
// miss, should the server have lost one): never a mix of parts.
TEST_P(CacheRemoteTest, ConcurrentWritersOfDifferentBytesNeverMix) {
  const ModelLayout layout = MultiPartLayout();
  constexpr size_t kBlocks = 24;
  const std::vector<BlockKey> keys = Keys(300, kBlocks);
  ClockEnv env_a(Env::Default(), 0);
  ClockEnv env_b(Env::Default(), 3'600'000'000);  // an hour ahead
  auto options = [&](Env* env) {
    CacheOptions o;
    o.host.capacity_bytes = 64 << 20;
    o.layout_signature = layout.Signature();
    o.remote = RemoteOptions(url_, layout, prefix_);
    o.remote->part_bytes = 4096;
    o.remote->skip_existing = false;  // both hosts really send every block
    o.remote->writer_threads = 2;
    (void)env;
    return o;
  };
  auto encode = [&](Env* env) {
    std::vector<SharedBlock> out;
    for (const BlockKey& k : keys) {
      Result<BlockBuffer> b =
          MakeBlockFile(layout, k, k, k, static_cast<int64_t>(env->NowMicros()));
      EXPECT_TRUE(b.ok());
      out.push_back(std::make_shared<const BlockBuffer>(std::move(b).value()));
    }
    return out;
  };
  const std::vector<SharedBlock> blocks_a = encode(&env_a);
  const std::vector<SharedBlock> blocks_b = encode(&env_b);
  ASSERT_GT(blocks_a[0]->size(), 3 * 4096u);  // several parts per block
  ASSERT_FALSE(SameBytes(blocks_a[0], blocks_b[0]));

  std::unique_ptr<TieredCache> a = OpenCache(options(&env_a), &env_a);
  std::unique_ptr<TieredCache> b = OpenCache(options(&env_b), &env_b);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  for (int round = 0; round < 3; ++round) {
    std::thread ta([&] { EXPECT_TRUE(a->Store(keys, blocks_a).ok()); });
    std::thread tb([&] { EXPECT_TRUE(b->Store(keys, blocks_b).ok()); });
    ta.join();
    tb.join();
    ASSERT_TRUE(a->Flush().ok());
    ASSERT_TRUE(b->Flush().ok());

    CacheOptions oc = options(Env::Default());
    std::unique_ptr<TieredCache> c = OpenCache(oc);
    ASSERT_NE(c, nullptr);
    std::vector<LoadedBlock> got = LoadAll(*c, keys);
    ASSERT_EQ(got.size(), kBlocks);
    size_t hits = 0;
    for (size_t i = 0; i < kBlocks; ++i) {
      if (got[i].tier == CacheTier::kNone) continue;
      ++hits;
      EXPECT_EQ(got[i].tier, CacheTier::kRemote);
      EXPECT_TRUE(SameBytes(got[i].block, blocks_a[i]) || SameBytes(got[i].block, blocks_b[i]))
          << "key " << i << " round " << round << ": neither host's block";
    }
    CacheStats s = c->Stats();
    EXPECT_EQ(s.hits_remote, hits);
    EXPECT_EQ(s.remote_misses, kBlocks - hits);
    // A miss here can only be a value that failed verification.
    EXPECT_EQ(s.remote->bad_values, kBlocks - hits);
    EXPECT_EQ(s.remote->misses_unavailable, 0u);
  }
  EXPECT_EQ(a->Stats().remote_puts_dropped, 0u);
  EXPECT_EQ(b->Stats().remote_puts_dropped, 0u);
}

// A value that is not the block (another key's block, or flipped data) is
// a miss, counted and deleted; the engine recomputes and stores the block
// again, and the next host gets the right bytes.
TEST_P(CacheRemoteTest, CorruptValueIsACountedMissAndIsDeleted) {
  const std::vector<BlockKey> keys = Keys(400, 2);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  RemoteTierOptions ro = RemoteOptions(url_, TinyLayout(), prefix_);
  Result<std::unique_ptr<RemoteTier>> tool = RemoteTier::Open(ro, Env::Default());
  ASSERT_TRUE(tool.ok()) << tool.status().ToString();

  // Key 0 holds key 1's block; key 1 holds its block with one data byte
  // changed (right size and header, wrong checksum).
  testing::RawRedis raw(url_);
  auto name = [&](const BlockKey& k) { return prefix_ + "{" + k.Hex() + "}"; };
  std::string other(reinterpret_cast<const char*>(blocks[1]->data()), blocks[1]->size());
  ASSERT_EQ(raw.Run({"SET", name(keys[0]), other}), "status:OK");
  std::string flipped(reinterpret_cast<const char*>(blocks[1]->data()), blocks[1]->size());
  flipped[flipped.size() - 1] = static_cast<char>(flipped.back() ^ 0x5a);
  ASSERT_EQ(raw.Run({"SET", name(keys[1]), flipped}), "status:OK");

  std::unique_ptr<TieredCache> b = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->Match(keys).remote_blocks, 2u);  // Exists cannot tell
  std::vector<LoadedBlock> got = LoadAll(*b, keys);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tier, CacheTier::kNone);
  EXPECT_EQ(got[1].tier, CacheTier::kNone);
  CacheStats s = b->Stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.remote_misses, 2u);
  EXPECT_EQ(s.hits_remote, 0u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.remote->bad_values, 2u);
  EXPECT_EQ(s.remote->bad_values_deleted, 2u);
  EXPECT_EQ(raw.Run({"EXISTS", name(keys[0])}), "int:0");
  EXPECT_EQ(raw.Run({"EXISTS", name(keys[1])}), "int:0");
  EXPECT_EQ(b->Match(keys).blocks, 0u);

  // The engine recomputes the blocks and stores them: the next host reads
  // the right bytes.
  ASSERT_TRUE(b->Store(keys, blocks).ok());
  ASSERT_TRUE(b->Flush().ok());
  std::unique_ptr<TieredCache> c = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(c, nullptr);
  got = LoadAll(*c, keys);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].tier, CacheTier::kRemote);
    EXPECT_TRUE(SameBytes(got[i].block, blocks[i])) << i;
  }
}

// An empty value under a block's name (or any value too short to hold a
// block) is a bad value like a damaged one: the load counts it and deletes
// it, and the key can be stored again. Before, the cache's buffer pool
// refused a 0-byte buffer, the value was skipped as an allocation failure,
// never counted nor deleted, and every writer's EXISTS skipped it: a
// permanent phantom.
TEST_P(CacheRemoteTest, EmptyOrShortValueIsACountedMissAndIsDeleted) {
  const std::vector<BlockKey> keys = Keys(420, 2);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  testing::RawRedis raw(url_);
  auto name = [&](const BlockKey& k) { return prefix_ + "{" + k.Hex() + "}"; };
  ASSERT_EQ(raw.Run({"SET", name(keys[0]), ""}), "status:OK");
  ASSERT_EQ(raw.Run({"SET", name(keys[1]), "abc"}), "status:OK");

  std::unique_ptr<TieredCache> b = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(b, nullptr);
  // Neither can start a block file: absent before any load (next test).
  EXPECT_EQ(b->Contains(keys[0]), CacheTier::kNone);
  EXPECT_EQ(b->Match(keys).remote_blocks, 0u);
  std::vector<LoadedBlock> got = LoadAll(*b, keys);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].tier, CacheTier::kNone);
  EXPECT_EQ(got[1].tier, CacheTier::kNone);
  CacheStats s = b->Stats();
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.remote_misses, 2u);
  EXPECT_EQ(s.remote->bad_values, 2u);
  EXPECT_EQ(s.remote->bad_values_deleted, 2u);
  EXPECT_EQ(s.remote->alloc_failures, 0u);
  EXPECT_EQ(raw.Run({"EXISTS", name(keys[0])}), "int:0");
  EXPECT_EQ(raw.Run({"EXISTS", name(keys[1])}), "int:0");
  EXPECT_EQ(b->Contains(keys[0]), CacheTier::kNone);
  EXPECT_EQ(b->Match(keys).blocks, 0u);

  // Stored again, the blocks land (no writer skips them) and are served.
  ASSERT_TRUE(b->Store(keys, blocks).ok());
  ASSERT_TRUE(b->Flush().ok());
  EXPECT_EQ(b->Stats().remote->skipped_existing, 0u);
  std::unique_ptr<TieredCache> c = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Match(keys).remote_blocks, 2u);
  got = LoadAll(*c, keys);
  ASSERT_EQ(got.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(got[i].tier, CacheTier::kRemote);
    EXPECT_TRUE(SameBytes(got[i].block, blocks[i])) << i;
  }
  EXPECT_EQ(c->Stats().remote->bad_values, 0u);
}

// Before any load, a value that cannot start a block file is absent to
// contains, match and the writers' probe: Exists() reads each value's
// first 8 bytes (GETRANGE, in the ACL every deployment uses) instead of
// EXISTS, which cannot see a length. On 1229907 contains said "remote",
// match counted all four, and the writers skipped them (skipped_existing
// 4, nothing stored): phantoms until a load deleted them.
TEST_P(CacheRemoteTest, AValueThatCannotBeABlockIsAbsentBeforeAnyLoad) {
  const std::vector<BlockKey> keys = Keys(440, 4);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  testing::RawRedis raw(url_);
  auto name = [&](const BlockKey& k) { return prefix_ + "{" + k.Hex() + "}"; };
  // Empty; 7 bytes; a header length of 0; a header length past 1 MiB.
  const std::string zero_header(8, '\0');
  std::string huge_header(8, '\0');
  huge_header[3] = '\x01';  // 16 MiB, with a data section after it
  ASSERT_EQ(raw.Run({"SET", name(keys[0]), ""}), "status:OK");
  ASSERT_EQ(raw.Run({"SET", name(keys[1]), "1234567"}), "status:OK");
  ASSERT_EQ(raw.Run({"SET", name(keys[2]), zero_header + "{}"}), "status:OK");
  ASSERT_EQ(raw.Run({"SET", name(keys[3]), huge_header + std::string(64, ' ')}), "status:OK");

  std::unique_ptr<TieredCache> b = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(b, nullptr);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(b->Contains(keys[i]), CacheTier::kNone) << i;
    EXPECT_EQ(b->Match(std::span(&keys[i], 1)).blocks, 0u) << i;
  }
  EXPECT_EQ(b->Stats().remote->exists_found, 0u);

  // Stored, every block lands over its phantom (no writer skips it) and
  // the next host is served the right bytes.
  ASSERT_TRUE(b->Store(keys, blocks).ok());
  ASSERT_TRUE(b->Flush().ok());
  EXPECT_EQ(b->Stats().remote->skipped_existing, 0u);
  EXPECT_EQ(b->Stats().remote->stored, keys.size());
  EXPECT_EQ(b->Stats().remote->bad_values, 0u);
  std::unique_ptr<TieredCache> c = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->Contains(keys[0]), CacheTier::kRemote);
  EXPECT_EQ(c->Match(keys).remote_blocks, keys.size());
  std::vector<LoadedBlock> got = LoadAll(*c, keys);
  ASSERT_EQ(got.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(got[i].tier, CacheTier::kRemote) << i;
    EXPECT_TRUE(SameBytes(got[i].block, blocks[i])) << i;
  }
  EXPECT_EQ(c->Stats().remote->bad_values, 0u);
}

// One host's engine: a BlockPool restoring through a TieredCache.
struct EngineHost {
  std::unique_ptr<TieredCache> cache;
  std::unique_ptr<TieredBackingStore> store;
  std::unique_ptr<BlockPool> pool;
};

EngineHost OpenEngineHost(const std::string& url, const std::string& prefix) {
  EngineHost h;
  h.cache = OpenCache(HostWithRemote("", url, prefix, 64));
  if (h.cache == nullptr) return h;
  h.store = std::move(TieredBackingStore::Create(h.cache.get())).value();
  PoolOptions po;
  po.layout = TinyLayout();
  po.key_namespace.model_id = "cache-remote-engine";
  po.total_blocks = 16;
  po.store = h.store.get();
  Result<std::unique_ptr<BlockPool>> pool = BlockPool::Create(po);
  EXPECT_TRUE(pool.ok()) << pool.status().ToString();
  if (pool.ok()) h.pool = std::move(pool).value();
  return h;
}

// Computes tokens [from, to) of `seq` (every layer, content a function of
// the layer and state only, so a recomputed block equals the first one)
// and commits them.
Status Compute(BlockPool& pool, uint64_t seq, std::span<const uint32_t> tokens, size_t from,
               size_t to) {
  const ModelLayout& layout = TinyLayout();
  const size_t bt = layout.block_tokens;
  for (uint32_t l = 0; l < layout.layers.size(); ++l) {
    std::vector<std::vector<std::byte>> states;
    std::vector<std::span<const std::byte>> views;
    for (size_t k = 0; k < layout.layers[l].states.size(); ++k) {
      const TensorSpec& t = layout.layers[l].states[k];
      states.emplace_back(t.ByteSize() / bt * (to - from),
                          static_cast<std::byte>((l * 31 + k * 7 + 1) & 0xff));
      views.emplace_back(states.back());
    }
    KVTIER_RETURN_IF_ERROR(pool.AppendLayer(seq, l, from, to - from, views));
  }
  return pool.Advance(seq, tokens.subspan(from, to - from));
}

// The engine path: host A computes a prefix; one of its blocks is damaged
// in Redis; host B's pool restores up to the damaged block (a counted miss,
// the value deleted), recomputes the rest and stores it; host C then
// restores the whole prefix from Redis.
TEST_P(CacheRemoteTest, EngineRecomputesPastADamagedRemoteBlock) {
  const size_t bt = TinyLayout().block_tokens;
  const size_t n = 3 * bt;
  std::vector<uint32_t> tokens(n + 1);
  std::iota(tokens.begin(), tokens.end(), 5000);

  EngineHost a = OpenEngineHost(url_, prefix_);
  ASSERT_NE(a.pool, nullptr);
  ASSERT_EQ(*a.pool->Allocate(1, tokens), 0u);
  ASSERT_TRUE(Compute(*a.pool, 1, tokens, 0, n).ok());
  ASSERT_TRUE(a.cache->Flush().ok());
  EXPECT_EQ(a.cache->Stats().remote_puts_queued, 3u);
  NamespaceOptions ns;
  ns.model_id = "cache-remote-engine";
  ns.layout_signature = TinyLayout().Signature();
  ns.block_tokens = static_cast<uint32_t>(bt);
  Result<KeyChain> chain = KeyChain::Create(ns);
  ASSERT_TRUE(chain.ok());
  const std::vector<BlockKey> keys = chain->KeysFor(std::span(tokens).first(n));
  ASSERT_EQ(keys.size(), 3u);
  ASSERT_EQ(a.cache->Match(keys).blocks, 3u);

  // Block 1's value: one data byte changed (its checksum no longer holds).
  testing::RawRedis raw(url_);
  const std::string name = prefix_ + "{" + keys[1].Hex() + "}";
  std::string value = raw.Run({"GET", name});
  ASSERT_TRUE(value.starts_with("str:"));
  value.erase(0, 4);
  value.back() = static_cast<char>(value.back() ^ 0x01);
  ASSERT_EQ(raw.Run({"SET", name, value}), "status:OK");

  EngineHost b = OpenEngineHost(url_, prefix_);
  ASSERT_NE(b.pool, nullptr);
  Result<size_t> restored = b.pool->Allocate(7, tokens);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, bt);  // block 0 only: the sequence ends at the bad block
  CacheStats sb = b.cache->Stats();
  EXPECT_EQ(sb.hits_remote, 2u);  // blocks 0 and 2 (the pool drops block 2)
  EXPECT_EQ(sb.remote_misses, 1u);
  // The pool's store counts Redis as its own source, not as the disk.
  EXPECT_EQ(b.store->counters().loaded_remote, 2u);
  EXPECT_EQ(b.store->counters().loaded_disk, 0u);
  // The miss reached the pool only after the bad value was deleted, so the
  // recomputed block's Put cannot race with that delete.
  EXPECT_EQ(sb.remote->bad_values, 1u);
  EXPECT_EQ(sb.remote->bad_values_deleted, 1u);
  EXPECT_EQ(raw.Run({"EXISTS", name}), "int:0");
  ASSERT_TRUE(Compute(*b.pool, 7, tokens, bt, n).ok());  // recompute blocks 1 and 2
  ASSERT_TRUE(b.cache->Flush().ok());
  EXPECT_EQ(raw.Run({"EXISTS", name}), "int:1");

  EngineHost c = OpenEngineHost(url_, prefix_);
  ASSERT_NE(c.pool, nullptr);
  restored = c.pool->Allocate(9, tokens);
  ASSERT_TRUE(restored.ok()) << restored.status().ToString();
  EXPECT_EQ(*restored, n);
  CacheStats sc = c.cache->Stats();
  EXPECT_EQ(sc.hits_remote, 3u);
  EXPECT_EQ(sc.remote->bad_values, 0u);
  for (uint32_t l = 0; l < TinyLayout().layers.size(); ++l) {
    auto want = a.pool->PackedLayer(1, l);
    auto got = c.pool->PackedLayer(9, l);
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ((*got)->states.size(), (*want)->states.size());
    for (size_t k = 0; k < (*want)->states.size(); ++k) {
      const auto& x = (*want)->states[k].data;
      const auto& y = (*got)->states[k].data;
      ASSERT_EQ(x.size(), y.size());
      EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size()), 0) << "layer " << l << " state " << k;
    }
  }
}

// Stats render the remote tier's counters in JSON and Prometheus text.
TEST_P(CacheRemoteTest, StatsRenderTheRemoteTier) {
  std::unique_ptr<TieredCache> a = OpenCache(HostWithRemote("", url_, prefix_));
  ASSERT_NE(a, nullptr);
  const std::vector<BlockKey> keys = Keys(500, 3);
  ASSERT_TRUE(a->Store(keys, Blocks(keys)).ok());
  ASSERT_TRUE(a->Flush().ok());
  CacheStats s = a->Stats();
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["remote_puts_queued"], 3);
  EXPECT_EQ(j["hits_remote"], 0);
  ASSERT_TRUE(j["remote"].is_object());
  EXPECT_EQ(j["remote"]["stored"], 3);
  const std::string prom = s.ToPrometheus();
  EXPECT_THAT(prom, HasSubstr("kvtier_cache_remote_puts_queued_total 3\n"));
  EXPECT_THAT(prom, HasSubstr("kvtier_remote_stored_total 3\n"));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(prom));
  ASSERT_TRUE(a->Close().ok());
  // After Close: the final snapshot still has the remote tier.
  s = a->Stats();
  ASSERT_TRUE(s.remote.has_value());
  EXPECT_EQ(s.remote->stored, 3u);
  EXPECT_EQ(nlohmann::json::parse(CacheStats{}.ToJson())["remote"], nullptr);
}

// A server that is not there: the cache opens (an engine must start while
// Redis is down), stores stay local, lookups are counted misses, and no
// call hangs.
TEST(CacheRemoteDeadServerTest, OpensAndMissesWhenTheServerIsDown) {
  Result<uint16_t> port = testing::PickFreePort(false);
  ASSERT_TRUE(port.ok());
  TempDir dir("cache_remote_dead");
  CacheOptions o = HostWithRemote(dir.path(), "redis://127.0.0.1:" + std::to_string(*port),
                                  testing::UniqueKeyPrefix(RemoteTestName()));
  o.remote->connect_timeout_ms = 200;
  o.remote->command_timeout_ms = 200;
  std::unique_ptr<TieredCache> c = OpenCache(o);
  ASSERT_NE(c, nullptr);
  const std::vector<BlockKey> keys = Keys(600, 4);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  ASSERT_TRUE(c->Store(keys, blocks).ok());  // the local tiers take them
  const std::vector<BlockKey> absent = Keys(700, 3);
  EXPECT_EQ(c->Match(absent).blocks, 0u);
  std::vector<LoadedBlock> got = LoadAll(*c, absent);
  ASSERT_EQ(got.size(), 3u);
  for (const LoadedBlock& lb : got) EXPECT_EQ(lb.tier, CacheTier::kNone);
  // The local blocks still load.
  got = LoadAll(*c, keys);
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(SameBytes(got[i].block, blocks[i]));
  EXPECT_TRUE(c->Flush().ok());
  CacheStats s = c->Stats();
  EXPECT_EQ(s.misses, 3u);
  EXPECT_EQ(s.remote_lookups, 3u);
  EXPECT_EQ(s.remote_misses, 3u);
  EXPECT_EQ(s.hits_host, keys.size());
  ASSERT_TRUE(s.remote.has_value());
  EXPECT_EQ(s.remote->misses_unavailable, 3u);
  EXPECT_EQ(s.remote->hits, 0u);
  EXPECT_EQ(s.remote->stored, 0u);
  // Every copy for Redis was dropped, at Put or by the writer, and counted
  // (the remote tier counts both).
  EXPECT_EQ(s.remote_puts_queued + s.remote_puts_dropped, keys.size());
  EXPECT_EQ(s.remote->drops_unavailable + s.remote->drops_closed, keys.size());
  EXPECT_TRUE(c->Close().ok());
}

// A paused server (SIGSTOP) on the request path: a match of a chain the
// local tiers hold and a load of their blocks ask Redis nothing; a match
// that must ask gets its answer within remote_lookup_budget or a miss
// (every other timeout is 30 s here, so a miss can only be the budget's).
TEST(CacheRemotePausedServerTest, RequestPathNeverWaitsForAPausedServer) {
  Result<std::unique_ptr<testing::RedisServer>> started =
      testing::RedisServer::Start(testing::RedisServerOptions{});
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  std::unique_ptr<testing::RedisServer> redis = std::move(started).value();
  TempDir dir("cache_remote_paused");
  CacheOptions o = HostWithRemote(dir.path(), redis->url(), testing::UniqueKeyPrefix(RemoteTestName()));
  o.remote->connect_timeout_ms = 30'000;
  o.remote->command_timeout_ms = 30'000;
  o.remote->lookup_budget_ms = 20;
  std::unique_ptr<TieredCache> c = OpenCache(o);
  ASSERT_NE(c, nullptr);
  const std::vector<BlockKey> keys = Keys(800, 4);
  const std::vector<SharedBlock> blocks = Blocks(keys);
  ASSERT_TRUE(c->Store(keys, blocks).ok());
  ASSERT_TRUE(c->Flush().ok());
  const RemoteTierStats before = *c->Stats().remote;
  ASSERT_TRUE(redis->Pause().ok());

  EXPECT_EQ(c->Match(keys).blocks, keys.size());
  std::vector<LoadedBlock> got = LoadAll(*c, keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(got[i].tier, CacheTier::kHost);
    EXPECT_TRUE(SameBytes(got[i].block, blocks[i]));
  }
  RemoteTierStats s = *c->Stats().remote;
  EXPECT_EQ(s.exists_calls, before.exists_calls);
  EXPECT_EQ(s.lookups, before.lookups);

  std::vector<BlockKey> longer = keys;
  for (const BlockKey& k : Keys(900, 3)) longer.push_back(k);
  MatchResult m = c->Match(longer);
  EXPECT_EQ(m.blocks, keys.size());
  EXPECT_EQ(m.remote_blocks, 0u);
  s = *c->Stats().remote;
  EXPECT_EQ(s.exists_calls, before.exists_calls + 1);
  EXPECT_EQ(s.exists_keys, before.exists_keys + 3);
  EXPECT_EQ(s.exists_late, before.exists_late + 3);
  ASSERT_TRUE(redis->Resume().ok());
  EXPECT_TRUE(c->Close().ok());
}

TEST(CacheRemoteOptionsTest, ValidateNamesRemoteFields) {
  CacheOptions o = HostOnlyOptions(4);
  o.remote = RemoteOptions("redis://127.0.0.1:1", TinyLayout(), "p:");
  EXPECT_TRUE(o.Validate().ok()) << o.Validate().ToString();
  o.remote->key_prefix = "a{b";
  EXPECT_THAT(o.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CacheOptions.remote.key_prefix")));
  o.remote->key_prefix = "p:";
  o.remote->url = "http://x";
  EXPECT_THAT(o.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CacheOptions.remote.url")));
  o.remote->url = "redis://127.0.0.1:1";
  o.remote->layout = MultiPartLayout();
  EXPECT_THAT(o.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CacheOptions.remote.layout")));
  o.remote->layout = TinyLayout();
  o.remote_write = static_cast<RemoteWritePolicy>(7);
  EXPECT_THAT(o.Validate(),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("CacheOptions.remote_write")));
  EXPECT_EQ(CacheTierName(CacheTier::kRemote), "remote");
}

}  // namespace
}  // namespace kvtier::cache_test
