// TieredCache basics: options, store/load/match in each tier and state,
// store checks, stats rendering, closing.
#include "kvtier/tiered_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cache/cache_test_util.h"
#include "testing/prometheus_text.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using cache_test::BlockBytes;
using cache_test::Blocks;
using cache_test::Buffers;
using cache_test::CheckLoaded;
using cache_test::DiskOptions;
using cache_test::GateEnv;
using cache_test::HostOnlyOptions;
using cache_test::Keys;
using cache_test::MakeBlock;
using cache_test::OpenCache;
using cache_test::TempDir;
using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// Loads `keys` and returns the outcome; checks each hit's bytes.
std::vector<LoadedBlock> LoadAndCheck(TieredCache& cache, const std::vector<BlockKey>& keys) {
  Buffers buf(keys.size());
  auto f = cache.Load(keys, buf.spans);
  EXPECT_THAT(f, IsOk());
  if (!f.ok()) return {};
  auto got = f->Get();
  EXPECT_THAT(got, IsOk());
  if (!got.ok()) return {};
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*got)[i].tier != CacheTier::kNone) {
      EXPECT_THAT(CheckLoaded(keys[i], buf.spans[i], (*got)[i].bytes), IsOk()) << "key " << i;
    }
  }
  return *got;
}

std::vector<CacheTier> Tiers(const std::vector<LoadedBlock>& got) {
  std::vector<CacheTier> t;
  for (const LoadedBlock& b : got) t.push_back(b.tier);
  return t;
}

constexpr CacheTier kHost = CacheTier::kHost;
constexpr CacheTier kDisk = CacheTier::kDisk;
constexpr CacheTier kNone = CacheTier::kNone;

TEST(CacheOptions, ValidateNamesTheBadField) {
  auto bad = [](auto mutate) {
    TempDir dir;
    CacheOptions o = DiskOptions(dir.path(), 4);
    mutate(o);
    return o.Validate();
  };
  EXPECT_THAT(bad([](CacheOptions&) {}), IsOk());
  EXPECT_THAT(
      bad([](CacheOptions& o) { o.host.capacity_bytes = 0; }),
      StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.host.capacity_bytes")));
  EXPECT_THAT(
      bad([](CacheOptions& o) {
        o.host.eviction_sink = [](const BlockKey&, SharedBlock) { return Status::Ok(); };
      }),
      StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.host.eviction_sink")));
  EXPECT_THAT(
      bad([](CacheOptions& o) { o.host.key_listener = [](const BlockKey&, KeyPresence) {}; }),
      StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.host.key_listener")));
  EXPECT_THAT(bad([](CacheOptions& o) { o.layout_signature.clear(); }),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.layout_signature")));
  EXPECT_THAT(bad([](CacheOptions& o) { o.load_threads = 65; }),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.load_threads")));
  EXPECT_THAT(
      bad([](CacheOptions& o) { o.index_expected_blocks = (uint64_t{1} << 32) + 1; }),
      StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.index_expected_blocks")));
  EXPECT_THAT(
      bad([](CacheOptions& o) { o.disk->layout_signature = "other"; }),
      StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.disk.layout_signature")));
  EXPECT_THAT(bad([](CacheOptions& o) { o.disk->dir.clear(); }),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.disk.dir")));
  EXPECT_THAT(bad([](CacheOptions& o) { o.disk->read_threads = 1000; }),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.disk.read_threads")));
  EXPECT_THAT(bad([](CacheOptions& o) {
                o.disk.reset();
                o.write_policy = WritePolicy::kWriteThrough;
              }),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.write_policy")));
  // A host-only cache with a shared budget needs no capacity of its own.
  CacheOptions shared = HostOnlyOptions(4);
  shared.host.capacity_bytes = 0;
  shared.host.shared_budget = SharedHostBudget::Create(100).value();
  EXPECT_THAT(shared.Validate(), IsOk());
}

TEST(TieredCache, OpenRefusesBadOptionsAndNullEnv) {
  CacheOptions o = HostOnlyOptions(4);
  o.layout_signature.clear();
  EXPECT_THAT(TieredCache::Open(o, Env::Default()),
              StatusIs(StatusCode::kInvalidArgument, StartsWith("CacheOptions.layout_signature")));
  EXPECT_THAT(TieredCache::Open(HostOnlyOptions(4), nullptr),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("env")));
}

// index_expected_blocks at the largest value Validate() accepts: the Match
// index reserves room for at most 2^20 keys up front, not for 2^32 (which
// took hundreds of GB and ended in std::bad_alloc or the OOM killer).
TEST(TieredCache, AHugeIndexHintReservesBoundedMemory) {
  CacheOptions o = HostOnlyOptions(4);
  o.index_expected_blocks = uint64_t{1} << 32;
  auto cache = OpenCache(o);
  ASSERT_NE(cache, nullptr);
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  EXPECT_EQ(cache->Match(keys).blocks, 2u);
  const CacheStats s = cache->Stats();
  EXPECT_EQ(s.index_keys, 2u);
  EXPECT_LE(s.index_bytes, uint64_t{128} << 20);
}

TEST(TieredCache, HostOnlyStoreMatchLoad) {
  auto cache = OpenCache(HostOnlyOptions(8));
  const auto keys = Keys(0, 3);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());

  std::vector<BlockKey> chain = keys;
  chain.push_back(cache_test::Keys(100, 1)[0]);  // never stored
  chain.push_back(keys[0]);                      // after the gap: not counted
  MatchResult m = cache->Match(chain);
  EXPECT_EQ(m.blocks, 3u);
  EXPECT_THAT(m.tiers, ElementsAre(kHost, kHost, kHost));
  EXPECT_EQ(m.host_blocks, 3u);
  EXPECT_EQ(m.disk_blocks, 0u);

  EXPECT_THAT(Tiers(LoadAndCheck(*cache, chain)), ElementsAre(kHost, kHost, kHost, kNone, kHost));
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.lookups, 5u);
  EXPECT_EQ(s.hits_host, 4u);
  EXPECT_EQ(s.hits_disk, 0u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_DOUBLE_EQ(s.hit_ratio, 0.8);
  EXPECT_EQ(s.stores, 3u);
  EXPECT_EQ(s.bytes_stored, 3 * BlockBytes());
  EXPECT_EQ(s.bytes_loaded_host, 4 * BlockBytes());
  EXPECT_EQ(s.matches, 1u);
  EXPECT_EQ(s.match_blocks, 3u);
  EXPECT_EQ(s.host.entries, 3u);
  EXPECT_EQ(s.host.dirty_entries, 3u);
  EXPECT_EQ(s.index_keys, 3u);
  EXPECT_EQ(s.index_host_keys, 3u);
  EXPECT_FALSE(s.disk.has_value());
}

TEST(TieredCache, HostOnlyEvictionDropsDirtyBlocksAndCountsThem) {
  auto cache = OpenCache(HostOnlyOptions(2));
  const auto keys = Keys(0, 3);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kNone, kHost, kHost));
  EXPECT_EQ(cache->Match(keys).blocks, 0u);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.host.dirty_dropped, 1u);
  EXPECT_EQ(s.index_keys, 2u);
  EXPECT_THAT(cache->Flush(), IsOk());  // nothing to write to
}

TEST(TieredCache, StoreRefusesBadInputNamingTheBlock) {
  TempDir dir;
  auto cache = OpenCache(DiskOptions(dir.path(), 8));
  const auto keys = Keys(0, 3);
  auto blocks = Blocks(keys);

  EXPECT_THAT(cache->Store(keys, std::span(blocks).first(2)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("3 keys but 2 blocks")));
  // Block 1 stored under block 2's key: refused, block 0 already stored.
  std::vector<SharedBlock> swapped = {blocks[0], blocks[2], blocks[1]};
  EXPECT_THAT(cache->Store(keys, swapped),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("block 1 (")));
  EXPECT_EQ(cache->Stats().stores, 1u);
  EXPECT_EQ(cache->Stats().store_errors, 1u);

  std::vector<SharedBlock> nulls = {nullptr};
  EXPECT_THAT(cache->Store(std::span(keys).first(1), nulls),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("empty")));
  auto garbage = std::make_shared<const BlockBuffer>(
      BlockBuffer::CopyOf(std::vector<std::byte>(100, std::byte{7})).value());
  std::vector<SharedBlock> bad = {garbage};
  EXPECT_THAT(cache->Store(std::span(keys).subspan(1, 1), bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("block 0 (")));
  // Another layout's block.
  ModelLayout other = ModelLayout::Preset("tiny", 8).value();
  BlockKey zero{};
  auto foreign =
      std::make_shared<const BlockBuffer>(MakeBlockFile(other, keys[1], zero, zero).value());
  std::vector<SharedBlock> foreigns = {foreign};
  EXPECT_THAT(cache->Store(std::span(keys).subspan(1, 1), foreigns),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("signature")));
  EXPECT_EQ(cache->Stats().host.entries, 1u);

  auto host_only = OpenCache(HostOnlyOptions(4));
  StoreOptions wt;
  wt.write_policy = WritePolicy::kWriteThrough;
  EXPECT_THAT(host_only->Store(std::span(keys).first(1), std::span(blocks).first(1), wt),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("host-only")));
}

// Issue 33 item 7: a block whose data does not match its own checksum was
// accepted and served from RAM as it was (after a reopen the disk read
// quarantined it). Store refuses it, so no tier ever hands it out.
TEST(TieredCache, StoreRefusesABlockThatFailsItsOwnChecksum) {
  TempDir dir;
  const auto keys = Keys(0, 1);
  const SharedBlock good = MakeBlock(keys[0]);
  BlockBuffer copy = BlockBuffer::CopyOf(good->span()).value();
  copy.mutable_span()[copy.size() - 1] ^= std::byte{1};  // the last data byte
  const std::vector<SharedBlock> bad = {std::make_shared<const BlockBuffer>(std::move(copy))};

  auto cache = OpenCache(DiskOptions(dir.path(), 8));
  EXPECT_THAT(cache->Store(keys, bad),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("checksum")));
  EXPECT_EQ(cache->Contains(keys[0]), CacheTier::kNone);
  EXPECT_EQ(cache->Stats().stores, 0u);
  EXPECT_EQ(cache->Stats().store_errors, 1u);
  ASSERT_THAT(cache->Store(keys, std::vector<SharedBlock>{good}), IsOk());
  EXPECT_EQ(cache->Contains(keys[0]), CacheTier::kHost);

  // verify_store_checksums off: the header check alone (the caller vouches
  // for the data), as before the option.
  CacheOptions o = HostOnlyOptions(8);
  o.verify_store_checksums = false;
  auto unchecked = OpenCache(o);
  EXPECT_THAT(unchecked->Store(keys, bad), IsOk());
  EXPECT_EQ(unchecked->Contains(keys[0]), CacheTier::kHost);
}

TEST(TieredCache, LoadIntoTooSmallBufferNamesItAndLoadsTheRest) {
  TempDir dir;
  CacheOptions o = DiskOptions(dir.path(), 8);
  auto cache = OpenCache(o);
  const auto keys = Keys(0, 4);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(cache->Flush(), IsOk());
  cache->ShrinkHost(2 * BlockBytes());  // keys 0, 1 only on disk now

  Buffers buf(4);
  buf.storage[0].resize(10);  // disk block, small buffer
  buf.storage[3].resize(10);  // host block, small buffer
  buf.spans[0] = buf.storage[0];
  buf.spans[3] = buf.storage[3];
  EXPECT_THAT(cache->Load(std::span(keys).first(3), buf.spans),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("3 keys but 4 buffers")));
  auto f = cache->Load(keys, buf.spans);
  ASSERT_THAT(f, IsOk());
  EXPECT_THAT(f->Get(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("buffer 3")));
  EXPECT_THAT(CheckLoaded(keys[1], buf.spans[1], BlockBytes()), IsOk());
  EXPECT_THAT(CheckLoaded(keys[2], buf.spans[2], BlockBytes()), IsOk());
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.load_errors, 2u);
  EXPECT_EQ(s.hits_host, 1u);
  EXPECT_EQ(s.hits_disk, 1u);
  EXPECT_EQ(s.misses, 0u);
}

// A block is loadable only in RAM, while its disk write is pending, and once
// it is only on disk.
TEST(TieredCache, EveryStateIsReadable) {
  TempDir dir;
  GateEnv env(Env::Default());
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.promote_disk_hits = false;
  auto cache = OpenCache(o, &env);
  const auto keys = Keys(0, 1);

  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kHost));  // only in RAM
  EXPECT_EQ(cache->Stats().host.dirty_entries, 1u);

  env.writes.Close();
  EXPECT_EQ(cache->ShrinkHost(0), BlockBytes());  // write-back: queued, writer held
  env.writes.AwaitWaiters(1);
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kDisk));  // pending write
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.disk->hits_pending, 1u);
  EXPECT_EQ(s.disk->saves_persisted, 0u);
  EXPECT_EQ(s.write_backs, 1u);
  EXPECT_EQ(s.host.entries, 0u);

  env.writes.Open();
  ASSERT_THAT(cache->Flush(), IsOk());
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kDisk));  // only on disk
  s = cache->Stats();
  EXPECT_EQ(s.disk->hits, 2u);
  EXPECT_EQ(s.disk->hits_pending, 1u);
  EXPECT_EQ(s.disk->saves_persisted, 1u);
  EXPECT_EQ(s.hits_disk, 2u);
  EXPECT_EQ(s.promotions, 0u);
  EXPECT_EQ(s.bytes_written_back, BlockBytes());
  EXPECT_EQ(s.bytes_loaded_disk, 2 * BlockBytes());
}

TEST(TieredCache, DiskHitsArePromotedIntoCleanHostEntries) {
  TempDir dir;
  auto cache = OpenCache(DiskOptions(dir.path(), 4));
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  cache->ShrinkHost(0);
  ASSERT_THAT(cache->Flush(), IsOk());
  EXPECT_THAT(cache->Match(keys).tiers, ElementsAre(kDisk, kDisk));

  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kDisk, kDisk));
  EXPECT_THAT(cache->Match(keys).tiers, ElementsAre(kHost, kHost));
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kHost, kHost));
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.promotions, 2u);
  EXPECT_EQ(s.bytes_promoted, 2 * BlockBytes());
  EXPECT_EQ(s.host.reservations, 2u);
  EXPECT_EQ(s.host.entries, 2u);
  EXPECT_EQ(s.host.dirty_entries, 0u);
  EXPECT_EQ(s.host.reserved_bytes, 0u);
  // Clean entries are dropped on eviction, not written again.
  cache->ShrinkHost(0);
  EXPECT_EQ(cache->Stats().write_backs, 2u);
  EXPECT_EQ(cache->Stats().host.dirty_evictions, 2u);
}

TEST(TieredCache, WriteThroughQueuesToDiskAndKeepsACleanCopy) {
  TempDir dir;
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.write_policy = WritePolicy::kWriteThrough;
  auto cache = OpenCache(o);
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.disk->saves, 2u);
  EXPECT_EQ(s.host.entries, 2u);
  EXPECT_EQ(s.host.dirty_entries, 0u);
  EXPECT_EQ(s.bytes_written_through, 2 * BlockBytes());
  EXPECT_THAT(cache->Match(keys).tiers, ElementsAre(kHost, kHost));

  cache->ShrinkHost(0);
  EXPECT_EQ(cache->Stats().write_backs, 0u);
  EXPECT_THAT(cache->Match(keys).tiers, ElementsAre(kDisk, kDisk));
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kDisk, kDisk));

  // Per call: write-back in a write-through cache.
  const auto more = Keys(10, 1);
  StoreOptions wb;
  wb.write_policy = WritePolicy::kWriteBack;
  ASSERT_THAT(cache->Store(more, Blocks(more), wb), IsOk());
  EXPECT_EQ(cache->Stats().host.dirty_entries, 1u);
  EXPECT_EQ(cache->Stats().disk->saves, 2u);
}

TEST(TieredCache, MatchAsksTheDiskInBatchesAndKeepsWhatTheIndexKnows) {
  TempDir dir;
  const auto on_disk = Keys(0, 300);
  const auto host_key = Keys(400, 1)[0];
  {
    auto writer = OpenCache(DiskOptions(dir.path(), 302));
    ASSERT_THAT(writer->Store(on_disk, Blocks(on_disk)), IsOk());
    ASSERT_THAT(writer->Close(), IsOk());
  }
  auto cache = OpenCache(DiskOptions(dir.path(), 302));
  // Only in this cache's host tier (write-back: not on disk).
  StoreOptions host_only;
  host_only.write_policy = WritePolicy::kWriteBack;
  const std::vector<BlockKey> one = {host_key};
  ASSERT_THAT(cache->Store(one, Blocks(one), host_only), IsOk());

  // A chain the disk holds whole: asked 8, 32, 256, then the last 4.
  MatchResult m = cache->Match(on_disk);
  EXPECT_EQ(m.blocks, 300u);
  EXPECT_EQ(m.disk_blocks, 300u);
  EXPECT_EQ(cache->Stats().match_disk_probes, 300u);
  EXPECT_EQ(cache->Match(on_disk).blocks, 300u);
  EXPECT_EQ(cache->Stats().match_disk_probes, 300u);  // all learned

  // Unknown, host, unknown: the host entry in the middle of a disk batch
  // counts as the index says, not as the disk's "no".
  ASSERT_THAT(cache->Close(), IsOk());
  cache = OpenCache(DiskOptions(dir.path(), 302));
  ASSERT_THAT(cache->Store(one, Blocks(one), host_only), IsOk());
  const std::vector<BlockKey> mixed = {on_disk[0], host_key, on_disk[1]};
  m = cache->Match(mixed);
  EXPECT_THAT(m.tiers, ElementsAre(kDisk, kHost, kDisk));
  EXPECT_EQ(cache->Stats().match_disk_probes, 3u);

  // A chain whose first block is nowhere: one batch of 8 asked, 0 matched.
  std::vector<BlockKey> missing = Keys(1000, 1);
  missing.insert(missing.end(), on_disk.begin() + 2, on_disk.end());
  EXPECT_EQ(cache->Match(missing).blocks, 0u);
  EXPECT_EQ(cache->Stats().match_disk_probes, 3u + 8u);
}

TEST(TieredCache, MatchAsksTheDiskForUnknownKeysAndRemembers) {
  TempDir dir;
  const auto keys = Keys(0, 3);
  {
    auto writer = OpenCache(DiskOptions(dir.path(), 4));
    ASSERT_THAT(writer->Store(keys, Blocks(keys)), IsOk());
    ASSERT_THAT(writer->Close(), IsOk());
  }
  auto cache = OpenCache(DiskOptions(dir.path(), 4));
  std::vector<BlockKey> chain = keys;
  chain.push_back(Keys(50, 1)[0]);
  MatchResult m = cache->Match(chain);
  EXPECT_EQ(m.blocks, 3u);
  EXPECT_THAT(m.tiers, ElementsAre(kDisk, kDisk, kDisk));
  EXPECT_EQ(cache->Stats().match_disk_probes, 4u);  // 3 learned + the miss
  EXPECT_EQ(cache->Match(chain).blocks, 3u);
  EXPECT_EQ(cache->Stats().match_disk_probes, 5u);  // only the miss again
  EXPECT_EQ(cache->Stats().index_disk_keys, 3u);

  CacheOptions quiet = DiskOptions(dir.path(), 4);
  quiet.match_asks_disk = false;
  ASSERT_THAT(cache->Close(), IsOk());
  auto blind = OpenCache(quiet);
  EXPECT_EQ(blind->Match(chain).blocks, 0u);
  EXPECT_EQ(blind->Stats().match_disk_probes, 0u);
  // A load finds them anyway, and from then on Match knows.
  EXPECT_THAT(Tiers(LoadAndCheck(*blind, keys)), ElementsAre(kDisk, kDisk, kDisk));
  EXPECT_EQ(blind->Match(chain).blocks, 3u);
}

TEST(TieredCache, AStaleDiskHintIsClearedByTheLoadThatMissesIt) {
  TempDir dir;
  CacheOptions o = DiskOptions(dir.path(), 4);
  o.promote_disk_hits = false;
  auto cache = OpenCache(o);
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(cache->Flush(), IsOk());
  cache->ShrinkHost(0);
  // Another process evicts block 1 behind this cache's back.
  const std::string hex = keys[1].Hex();
  std::filesystem::remove(dir.path() + "/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors");
  EXPECT_EQ(cache->Match(keys).blocks, 2u);  // the hint is stale

  EXPECT_THAT(Tiers(LoadAndCheck(*cache, keys)), ElementsAre(kDisk, kNone));
  EXPECT_EQ(cache->Stats().stale_disk_hints, 1u);
  EXPECT_EQ(cache->Match(keys).blocks, 1u);
  EXPECT_EQ(cache->Stats().index_disk_keys, 1u);
}

TEST(TieredCache, PreloadFillsOnlyTheFreeBudget) {
  TempDir dir;
  const auto keys = Keys(0, 6);
  {
    auto writer = OpenCache(DiskOptions(dir.path(), 8));
    ASSERT_THAT(writer->Store(keys, Blocks(keys)), IsOk());
    ASSERT_THAT(writer->Close(), IsOk());
  }
  auto cache = OpenCache(DiskOptions(dir.path(), 4));
  const auto resident = Keys(100, 1);
  ASSERT_THAT(cache->Store(resident, Blocks(resident)), IsOk());  // 3 blocks free

  std::vector<BlockKey> want = {keys[0], Keys(200, 1)[0], keys[1], keys[2], keys[3], keys[4]};
  auto n = cache->Preload(want);
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 3u);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.preloads, 3u);
  EXPECT_EQ(s.host.entries, 4u);
  EXPECT_EQ(s.host.evictions, 0u);
  EXPECT_EQ(s.host.reserved_bytes, 0u);
  EXPECT_THAT(cache->Match(keys).tiers, ElementsAre(kHost, kHost, kHost, kDisk, kDisk, kDisk));
  EXPECT_THAT(Tiers(LoadAndCheck(*cache, std::vector<BlockKey>(keys.begin(), keys.begin() + 3))),
              ElementsAre(kHost, kHost, kHost));
  // Nothing free: nothing preloaded.
  EXPECT_EQ(cache->Preload(keys).value(), 0u);
  // Host-only: nothing to preload from.
  auto host_only = OpenCache(HostOnlyOptions(4));
  EXPECT_EQ(host_only->Preload(keys).value(), 0u);
}

TEST(TieredCache, StatsRenderAsJsonAndPrometheus) {
  TempDir dir;
  auto cache = OpenCache(DiskOptions(dir.path(), 4));
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  LoadAndCheck(*cache, Keys(0, 3));
  ASSERT_THAT(cache->Flush(), IsOk());
  CacheStats s = cache->Stats();
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["lookups"], 3);
  EXPECT_EQ(j["hits_host"], 2);
  EXPECT_EQ(j["misses"], 1);
  EXPECT_EQ(j["stores"], 2);
  EXPECT_DOUBLE_EQ(j["hit_ratio"].get<double>(), 2.0 / 3.0);
  EXPECT_EQ(j["host"]["entries"], 2);
  EXPECT_EQ(j["host_budget"]["capacity_bytes"], 4 * BlockBytes());
  EXPECT_EQ(j["load_latency"]["count"], 1);
  EXPECT_EQ(j["store_latency"]["count"], 1);
  EXPECT_TRUE(j["disk"].is_object());
  EXPECT_EQ(j["disk"]["saves_persisted"], 2);
  EXPECT_EQ(j["write_backs"], 2);

  const std::string p = s.ToPrometheus();
  EXPECT_THAT(p, HasSubstr("\nkvtier_cache_hits_host_total 2\n"));
  EXPECT_THAT(p, HasSubstr("\nkvtier_cache_misses_total 1\n"));
  EXPECT_THAT(p, HasSubstr("\nkvtier_host_entries 2\n"));
  EXPECT_THAT(p, HasSubstr("\nkvtier_cache_load_latency_seconds_count 1\n"));
  EXPECT_THAT(p, HasSubstr("\nkvtier_disk_saves_persisted_total 2\n"));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(p));
  EXPECT_EQ(cache->Prometheus(), p);

  auto host_only = OpenCache(HostOnlyOptions(4));
  nlohmann::json h = nlohmann::json::parse(host_only->Stats().ToJson());
  EXPECT_TRUE(h["disk"].is_null());
  EXPECT_THAT(host_only->Stats().ToPrometheus(), ::testing::Not(HasSubstr("kvtier_disk_")));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(host_only->Prometheus()));
}

TEST(TieredCache, ClosedCacheRefusesCallsAndKeepsItsStats) {
  TempDir dir;
  auto cache = OpenCache(DiskOptions(dir.path(), 4));
  const auto keys = Keys(0, 2);
  ASSERT_THAT(cache->Store(keys, Blocks(keys)), IsOk());
  ASSERT_THAT(cache->Close(), IsOk());
  ASSERT_THAT(cache->Close(), IsOk());

  EXPECT_THAT(cache->Store(keys, Blocks(keys)), StatusIs(StatusCode::kFailedPrecondition));
  Buffers buf(2);
  EXPECT_THAT(cache->Load(keys, buf.spans), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(cache->Preload(keys), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(cache->Flush(), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_EQ(cache->Match(keys).blocks, 0u);
  EXPECT_EQ(cache->ShrinkHost(0), 0u);
  CacheStats s = cache->Stats();
  EXPECT_EQ(s.stores, 2u);
  EXPECT_EQ(s.write_backs, 2u);  // Close wrote both dirty entries
  EXPECT_EQ(s.host_budget.tiers, 0u);
  EXPECT_EQ(s.host_budget.used_bytes, 0u);
  ASSERT_TRUE(s.disk.has_value());
  EXPECT_EQ(s.disk->saves_persisted, 2u);
}

}  // namespace
}  // namespace kvtier
