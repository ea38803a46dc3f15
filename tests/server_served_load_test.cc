// A client's Load out of the arena (kvtier::Server in this process, its
// loop on a thread): one round trip per call (the lease's release is not
// answered, and the daemon has taken it by the client's next request), and
// a block larger than a copy chunk, summed as it is copied, is a counted
// miss when any one byte of the arena's copy is flipped: in its header, at
// the first data byte, across a chunk boundary, at its end; so is a block
// whose slot sum changed.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/server.h"
#include "kvtier/server_client.h"
#include "kvtier/tiered_cache.h"
#include "server_client/arena.h"
#include "server_client/connection.h"
#include "server_client/wire.h"
#include "server_raw_frames.h"
#include "synth/block_generator.h"
#include "testing/temp_dir.h"

namespace kvtier {
namespace {

// CopyWithSum's chunk (server_client/arena.cc): the bytes a served Load
// copies and hashes at a time.
constexpr uint64_t kCopyChunkBytes = 128 * 1024;

// Bounds that end a hung test on a busy machine; not what is measured.
constexpr uint64_t kServedLoadHangMs = 60'000;

// tiny with 2048 tokens a block: 512 KiB of data, four copy chunks.
ModelLayout WideTiny() { return *ModelLayout::Preset("tiny", 2048); }

// Whether the daemon keeps a disk folder below its arena.
enum class Below { kNothing, kDisk };

class ServedLoadDaemon {
 public:
  explicit ServedLoadDaemon(Below below = Below::kNothing) {
    ServerOptions o;
    o.server = "unix:" + socket_path();
    o.layout = WideTiny();
    o.cache.host.capacity_bytes = 4 * o.SlotBytes();
    if (below == Below::kDisk) {
      DiskTierOptions disk;
      disk.dir = dir_.path() + "/disk";
      o.cache.disk = disk;
    }
    Result<std::unique_ptr<Server>> s = Server::Open(o, Env::Default());
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(*s);
    thread_ = std::thread([this] { EXPECT_TRUE(server_->Run().ok()); });
  }
  ~ServedLoadDaemon() {
    server_->Stop();
    thread_.join();
    (void)server_->Shutdown();
  }
  std::string socket_path() const { return dir_.path() + "/s.sock"; }
  ServerClientOptions ClientOptions() const {
    ServerClientOptions o;
    o.server = "unix:" + socket_path();
    o.layout_signature = WideTiny().Signature();
    o.timeout_ms = kServedLoadHangMs;
    return o;
  }

 private:
  testing::TempDir dir_;
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

uint64_t ArenaFigure(ServerClient* c, const char* name) {
  Result<std::string> json = c->DaemonStatsJson();
  EXPECT_TRUE(json.ok()) << json.status().ToString();
  if (!json.ok()) return ~uint64_t{0};
  return nlohmann::json::parse(*json)["arena"][name].get<uint64_t>();
}

// Stores `keys` (one WideTiny block each) through `c`.
void StoreAll(ServerClient* c, std::vector<BlockKey> keys) {
  for (const BlockKey& k : keys) {
    Result<BlockBuffer> b = MakeBlockFile(WideTiny(), k, BlockKey{}, BlockKey{}, 5);
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const std::span<const std::byte> in[] = {{b->data(), b->size()}};
    ASSERT_TRUE(c->Store(std::span<const BlockKey>(&k, 1), in).ok());
  }
}

// Stores six blocks (keys TestBlockKey(first) on) into a daemon whose arena
// holds four: the first two are written down to the tier below.
std::vector<BlockKey> StoreSixPastTheArena(ServerClient* c, uint8_t first) {
  std::vector<BlockKey> keys;
  for (uint8_t i = 0; i < 6; ++i) keys.push_back(TestBlockKey(first + i));
  StoreAll(c, keys);
  return keys;
}

std::vector<ServerTier> ArenaTiers(size_t n) { return std::vector<ServerTier>(n, ServerTier::kArena); }

// A block in the arena is copied out without asking the daemon (its key
// table, the slot's generation checked around the copy); the daemon learns
// of the hits from an unanswered frame, taken before the next request.
TEST(ServedLoadTest, ALoadFromTheArenaIsNoRoundTripAndTheDaemonCountsItsHits) {
  ServedLoadDaemon d;
  const BlockKey key = TestBlockKey(7);
  Result<BlockBuffer> block = MakeBlockFile(WideTiny(), key, BlockKey{}, BlockKey{}, 5);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  ASSERT_GT(block->size(), 3 * kCopyChunkBytes);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::span<const std::byte> in[] = {{block->data(), block->size()}};
  ASSERT_TRUE((*c)->Store(std::span<const BlockKey>(&key, 1), in).ok());
  EXPECT_EQ((*c)->Stats().requests, 2u);  // reserve, publish

  std::vector<std::byte> out(block->size() + 100, std::byte{0x5A});
  const std::span<std::byte> dsts[] = {out};
  for (uint64_t round = 1; round <= 3; ++round) {
    Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
    ASSERT_TRUE(lens.ok());
    EXPECT_EQ((*lens)[0], block->size());
    EXPECT_EQ(std::vector<std::byte>(out.begin(), out.begin() + block->size()),
              std::vector<std::byte>(block->data(), block->data() + block->size()));
    EXPECT_EQ((*c)->Stats().requests, 2u);
  }
  EXPECT_EQ(ArenaFigure(c->get(), "hits"), 3u);
  EXPECT_EQ(ArenaFigure(c->get(), "lookups"), 3u);
  EXPECT_EQ(ArenaFigure(c->get(), "leases_open"), 0u);
  EXPECT_EQ((*c)->Stats().hits, 3u);
  EXPECT_EQ((*c)->Stats().verify_failures, 0u);
  EXPECT_EQ((*c)->Stats().unavailable, 0u);
}

// A block the arena lacks but a tier below holds goes through the daemon:
// one round trip that promotes it and leases it, the lease released by the
// next request; from then on it is the arena's.
TEST(ServedLoadTest, ABlockOnlyBelowTheArenaIsPromotedAndLeasedForOneRoundTrip) {
  ServedLoadDaemon d(Below::kDisk);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::vector<BlockKey> keys = StoreSixPastTheArena(c->get(), 40);
  ASSERT_EQ((*c)->Match(std::vector<BlockKey>{keys[0]}).size(), 1u);  // asked: below
  Result<BlockBuffer> want = MakeBlockFile(WideTiny(), keys[0], BlockKey{}, BlockKey{}, 5);
  ASSERT_TRUE(want.ok());
  std::vector<std::byte> out(want->size());
  const std::span<std::byte> dsts[] = {out};
  const uint64_t before = (*c)->Stats().requests;
  Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&keys[0], 1), dsts);
  ASSERT_TRUE(lens.ok());
  EXPECT_EQ((*lens)[0], want->size());
  EXPECT_EQ(out, std::vector<std::byte>(want->data(), want->data() + want->size()));
  EXPECT_EQ((*c)->Stats().requests, before + 1);
  EXPECT_EQ(ArenaFigure(c->get(), "promoted"), 1u);
  EXPECT_EQ(ArenaFigure(c->get(), "leases_open"), 0u);
  const uint64_t after = (*c)->Stats().requests;
  lens = (*c)->Load(std::span<const BlockKey>(&keys[0], 1), dsts);
  ASSERT_TRUE(lens.ok());
  EXPECT_EQ((*lens)[0], want->size());
  EXPECT_EQ((*c)->Stats().requests, after);  // in the arena now
}

// `got` holds exactly the block StoreSixPastTheArena stored under `key`.
void ExpectStoredBytes(const BlockKey& key, const std::optional<BlockBuffer>& got) {
  Result<BlockBuffer> want = MakeBlockFile(WideTiny(), key, BlockKey{}, BlockKey{}, 5);
  ASSERT_TRUE(want.ok());
  ASSERT_TRUE(got.has_value()) << key.Hex();
  EXPECT_EQ(std::vector<std::byte>(got->data(), got->data() + got->size()),
            std::vector<std::byte>(want->data(), want->data() + want->size()))
      << key.Hex();
}

// LoadBlocks (what TieredCache::LoadShared is with the server option)
// asks the daemon once for the keys of a batch the arena does not serve,
// as Load does, and hands each block over in its own buffer, in key order.
TEST(ServedLoadTest, LoadBlocksAsksTheDaemonOnceForTheBlocksBelowTheArena) {
  ServedLoadDaemon d(Below::kDisk);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::vector<BlockKey> keys = StoreSixPastTheArena(c->get(), 60);
  const std::vector<BlockKey> ask = {keys[0], keys[1], TestBlockKey(99), keys[4]};
  const uint64_t requests = (*c)->Stats().requests;
  const ServerClientStats before = (*c)->Stats();
  std::vector<size_t> order;
  std::vector<std::optional<BlockBuffer>> got(ask.size());
  (*c)->LoadBlocks(ask, [&](size_t i, std::optional<BlockBuffer> b) {
    order.push_back(i);
    got[i] = std::move(b);
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ((*c)->Stats().requests, requests + 1);  // one lookup for keys 0, 1 and 2
  for (size_t i : {size_t{0}, size_t{1}, size_t{3}}) ExpectStoredBytes(ask[i], got[i]);
  EXPECT_FALSE(got[2].has_value());
  EXPECT_EQ((*c)->Stats().lookups - before.lookups, 4u);
  EXPECT_EQ((*c)->Stats().hits - before.hits, 3u);
  EXPECT_EQ((*c)->Stats().misses - before.misses, 1u);
}

// A buffer the allocator refuses (out of memory) or gives too small is a
// miss of that key alone: the others of the round still load (they were
// all misses when one destination failed the round's Load).
TEST(ServedLoadTest, LoadBlocksMissesOnlyTheKeyWhoseBufferFailed) {
  ServedLoadDaemon d(Below::kDisk);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::vector<BlockKey> keys = StoreSixPastTheArena(c->get(), 60);
  const std::vector<BlockKey> ask = {keys[0], keys[1], keys[4], keys[5]};
  const ServerClientStats before = (*c)->Stats();
  size_t calls = 0;
  auto allocate = [&](size_t size) -> Result<BlockBuffer> {
    switch (calls++) {
      case 1:
        return Status::ResourceExhausted("test: no memory for this one");
      case 2:
        return BlockBuffer::Allocate(size / 2);  // smaller than asked
      default:
        return BlockBuffer::Allocate(size);
    }
  };
  std::vector<std::optional<BlockBuffer>> got(ask.size());
  (*c)->LoadBlocks(
      ask, [&](size_t i, std::optional<BlockBuffer> b) { got[i] = std::move(b); }, allocate);
  EXPECT_EQ(calls, 4u);
  for (size_t i : {size_t{0}, size_t{3}}) ExpectStoredBytes(ask[i], got[i]);
  EXPECT_FALSE(got[1].has_value());
  EXPECT_FALSE(got[2].has_value());
  EXPECT_EQ((*c)->Stats().lookups - before.lookups, 4u);
  EXPECT_EQ((*c)->Stats().hits - before.hits, 2u);
  EXPECT_EQ((*c)->Stats().misses - before.misses, 2u);
}

// With no daemon to ask, every key is a counted lookup and miss.
TEST(ServedLoadTest, LoadBlocksWithNoDaemonCountsEachKeyAMiss) {
  testing::TempDir dir;
  ServerClientOptions o;
  o.server = "unix:" + dir.path() + "/nobody.sock";
  o.layout_signature = WideTiny().Signature();
  o.timeout_ms = 1000;
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(o);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  const std::vector<BlockKey> ask = {TestBlockKey(1), TestBlockKey(2), TestBlockKey(3)};
  size_t calls = 0;
  (*c)->LoadBlocks(ask, [&](size_t i, std::optional<BlockBuffer> b) {
    EXPECT_EQ(i, calls++);
    EXPECT_FALSE(b.has_value());
  });
  EXPECT_EQ(calls, 3u);
  EXPECT_EQ((*c)->Stats().lookups, 3u);
  EXPECT_EQ((*c)->Stats().misses, 3u);
}

// A TieredCache with the server option copies LoadShared's blocks into
// buffers of its read-buffer pool: dropped by the caller, they serve the
// next load (each fresh one cost a page fault per 4 KiB page).
TEST(ServedLoadTest, LoadSharedOfAServedCacheReusesTheBuffersTheCallerDropped) {
  ServedLoadDaemon d(Below::kDisk);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::vector<BlockKey> keys = StoreSixPastTheArena(c->get(), 70);
  CacheOptions o;
  o.server = d.ClientOptions().server;
  o.layout_signature = WideTiny().Signature();
  o.server_timeout_ms = kServedLoadHangMs;
  Result<std::unique_ptr<TieredCache>> cache = TieredCache::Open(o, Env::Default());
  ASSERT_TRUE(cache.ok()) << cache.status().ToString();
  std::vector<CacheStats> after;
  for (int round = 0; round < 2; ++round) {
    SharedLoadOptions lo;
    std::vector<std::optional<BlockBuffer>> got(keys.size());
    lo.on_block = [&](size_t i, const LoadedBlock& b) {
      ASSERT_NE(b.block, nullptr) << i;
      got[i] = *BlockBuffer::CopyOf(b.block->span());
    };  // the block is dropped when this returns
    Result<LoadFuture> f = (*cache)->LoadShared(keys, std::move(lo));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Get().ok());
    for (size_t i = 0; i < keys.size(); ++i) ExpectStoredBytes(keys[i], got[i]);
    after.push_back((*cache)->Stats());
  }
  // The first load's six buffers (one round) are new, the second's reused.
  EXPECT_EQ(after[0].hits_host, 6u);
  EXPECT_EQ(after[0].read_buffers, 6u);
  EXPECT_EQ(after[0].read_buffers_reused, 0u);
  EXPECT_GT(after[0].read_buffer_fresh_bytes, 0u);
  EXPECT_EQ(after[1].hits_host, 12u);
  EXPECT_EQ(after[1].read_buffers, 12u);
  EXPECT_EQ(after[1].read_buffers_reused, 6u);
  EXPECT_EQ(after[1].read_buffer_fresh_bytes, after[0].read_buffer_fresh_bytes);
}

// Hits the daemon did not hand out keep their blocks recent all the same:
// the block read last is not the one evicted.
TEST(ServedLoadTest, LoadsFromTheArenaKeepTheirBlocksRecent) {
  ServedLoadDaemon d;  // 4 slots
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  std::vector<BlockKey> keys;
  for (uint8_t i = 0; i < 5; ++i) keys.push_back(TestBlockKey(60 + i));
  StoreAll(c->get(), std::vector<BlockKey>(keys.begin(), keys.begin() + 4));
  std::vector<std::byte> out(MakeBlockFile(WideTiny(), keys[0], BlockKey{}, BlockKey{}, 5)->size());
  const std::span<std::byte> dsts[] = {out};
  Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&keys[0], 1), dsts);
  ASSERT_TRUE(lens.ok());
  ASSERT_NE((*lens)[0], 0u);
  StoreAll(c->get(), {keys[4]});  // evicts the least recent: keys[1]
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{keys[0]}), ArenaTiers(1));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{keys[1]}), ArenaTiers(0));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{keys[2], keys[3], keys[4]}), ArenaTiers(3));
}

// A slot the key table names but whose header says it is being handed to
// a new block (length 0: the daemon clears it before bumping the
// generation) is never copied: the daemon is asked, and it says miss.
TEST(ServedLoadTest, ASlotBeingHandedOverIsAskedOfTheDaemonNeverCopied) {
  ServedLoadDaemon d;
  const BlockKey key = TestBlockKey(80);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  StoreAll(c->get(), {TestBlockKey(81)});  // connected
  server::Connection conn(d.ClientOptions(), d.socket_path());
  MutexLock lock(conn.mu());
  server::FrameWriter reserve(server::Op::kReserve);
  reserve.U32(1);
  reserve.U64(4096);
  Result<std::vector<uint8_t>> body = conn.Call(&reserve);
  ASSERT_TRUE(body.ok());
  server::FrameReader r(*body);
  ASSERT_TRUE(server::ReadReplyHead(&r, server::Op::kReserve).ok());
  ASSERT_EQ(r.U32(), 1u);
  const uint32_t slot = r.U32();
  server::Arena* arena = conn.arena();
  EXPECT_EQ(arena->Length(slot), 0u);  // handed over: the header cleared
  EXPECT_EQ(arena->Key(slot), BlockKey{});
  // The slot holds `key`'s whole block, and a table entry names it under
  // `key` with the header's key, as a table read racing the hand-over could.
  Result<BlockBuffer> block = MakeBlockFile(WideTiny(), key, BlockKey{}, BlockKey{}, 5);
  ASSERT_TRUE(block.ok());
  std::memcpy(arena->Bytes(slot).data(), block->data(), block->size());
  // The right sum, but a length of 0: a slot being handed over.
  arena->SetPublished(slot, 0, key, server::SumOf({block->data(), block->size()}));
  arena->table().Insert(key, slot);
  std::vector<std::byte> out(block->size(), std::byte{0x5A});
  const std::span<std::byte> dsts[] = {out};
  const uint64_t before = (*c)->Stats().requests;
  Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
  ASSERT_TRUE(lens.ok());
  EXPECT_EQ((*lens)[0], 0u);
  EXPECT_EQ((*c)->Stats().requests, before + 1);  // asked
  EXPECT_EQ(out, std::vector<std::byte>(block->size(), std::byte{0x5A}));
  EXPECT_EQ((*c)->Stats().verify_failures, 0u);
  EXPECT_EQ((*c)->Stats().misses, 1u);
}

// A client of `d` that has stored `block` under `key`.
Result<std::unique_ptr<ServerClient>> ClientThatStored(const ServedLoadDaemon& d,
                                                       const BlockKey& key,
                                                       const BlockBuffer& block) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<ServerClient> c, ServerClient::Open(d.ClientOptions()));
  const std::span<const std::byte> in[] = {{block.data(), block.size()}};
  KVTIER_RETURN_IF_ERROR(c->Store(std::span<const BlockKey>(&key, 1), in));
  return c;
}

TEST(ServedLoadTest, ASlotWhoseSumChangedIsACountedMissUntilItIsBack) {
  ServedLoadDaemon d;
  const BlockKey key = TestBlockKey(4);
  Result<BlockBuffer> block = MakeBlockFile(WideTiny(), key, BlockKey{}, BlockKey{}, 4);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  Result<std::unique_ptr<ServerClient>> c = ClientThatStored(d, key, *block);
  ASSERT_TRUE(c.ok()) << c.status().ToString();

  server::Connection conn(d.ClientOptions(), d.socket_path());
  MutexLock lock(conn.mu());
  Result<server_test::RawLookup> found = server_test::LookUpRaw(&conn, key);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  server::Arena* arena = conn.arena();
  const uint32_t slot = found->slot;
  // The daemon's sum is XXH3-128 of the block it verified.
  const server::SlotSum sum = arena->Sum(slot);
  EXPECT_EQ(sum, server::SumOf({block->data(), block->size()}));

  std::vector<std::byte> out(block->size());
  const std::span<std::byte> dsts[] = {out};
  for (int half = 0; half < 2; ++half) {
    server::SlotSum wrong = sum;
    (half == 0 ? wrong.low : wrong.high) ^= uint64_t{1} << 40;
    arena->SetPublished(slot, block->size(), key, wrong);
    Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
    ASSERT_TRUE(lens.ok());
    EXPECT_EQ((*lens)[0], 0u) << half;
    EXPECT_EQ((*c)->Stats().verify_failures, uint64_t(half) + 1);
  }
  arena->SetPublished(slot, block->size(), key, sum);
  Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
  ASSERT_TRUE(lens.ok());
  EXPECT_EQ((*lens)[0], block->size());
  EXPECT_EQ(out, std::vector<std::byte>(block->data(), block->data() + block->size()));
  EXPECT_EQ((*c)->Stats().hits, 1u);
  EXPECT_EQ((*c)->Stats().misses, 2u);
  server::FrameWriter rel(server::Op::kRelease);
  rel.U64(found->lease);
  conn.Post(&rel);
}

TEST(ServedLoadTest, AFlippedByteOfALargeBlockInTheArenaIsACountedMiss) {
  ServedLoadDaemon d;
  const BlockKey key = TestBlockKey(3);
  Result<BlockBuffer> block = MakeBlockFile(WideTiny(), key, BlockKey{}, BlockKey{}, 9);
  ASSERT_TRUE(block.ok()) << block.status().ToString();
  Result<std::unique_ptr<ServerClient>> c = ClientThatStored(d, key, *block);
  ASSERT_TRUE(c.ok()) << c.status().ToString();

  // A second connection that looks the block up and writes into its slot.
  server::Connection conn(d.ClientOptions(), d.socket_path());
  MutexLock lock(conn.mu());
  Result<server_test::RawLookup> found = server_test::LookUpRaw(&conn, key);
  ASSERT_TRUE(found.ok()) << found.status().ToString();
  const uint64_t lease = found->lease;
  const uint32_t slot = found->slot;
  ASSERT_EQ(found->length, block->size());
  ASSERT_NE(slot, server::kNoSlot);
  std::byte* arena_block = conn.arena()->Bytes(slot).data();

  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = header << 8 | std::to_integer<uint64_t>(block->data()[i]);
  const uint64_t data = 8 + header;
  const uint64_t chunk = kCopyChunkBytes;
  const std::vector<uint64_t> at = {20,       data,      data + 1,   chunk - 1,
                                    chunk,    2 * chunk + 5,         block->size() - 1};
  std::vector<std::byte> out(block->size());
  const std::span<std::byte> dsts[] = {out};
  uint64_t failures = 0, hits = 0;
  for (uint64_t offset : at) {
    arena_block[offset] ^= std::byte{0x10};
    Result<std::vector<uint64_t>> lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
    ASSERT_TRUE(lens.ok());
    EXPECT_EQ((*lens)[0], 0u) << "byte " << offset;
    EXPECT_EQ((*c)->Stats().verify_failures, ++failures) << "byte " << offset;
    // The same byte put back: a hit, byte for byte.
    arena_block[offset] ^= std::byte{0x10};
    lens = (*c)->Load(std::span<const BlockKey>(&key, 1), dsts);
    ASSERT_TRUE(lens.ok());
    EXPECT_EQ((*lens)[0], block->size()) << "byte " << offset;
    EXPECT_EQ(out, std::vector<std::byte>(block->data(), block->data() + block->size()));
    EXPECT_EQ((*c)->Stats().hits, ++hits);
  }
  EXPECT_EQ((*c)->Stats().misses, at.size());
  server::FrameWriter rel(server::Op::kRelease);
  rel.U64(lease);
  conn.Post(&rel);
  // In order on that connection: the next request finds it released.
  server::FrameWriter st(server::Op::kStats);
  Result<std::vector<uint8_t>> stats = conn.Call(&st);
  ASSERT_TRUE(stats.ok());
  server::FrameReader sr(*stats);
  ASSERT_TRUE(server::ReadReplyHead(&sr, server::Op::kStats).ok());
  EXPECT_EQ(nlohmann::json::parse(sr.Str32())["arena"]["leases_open"].get<uint64_t>(), 0u);
}

// A release of a lease that is not the client's is a bad frame: that
// client's connection is closed (it gets no answer to wait for).
TEST(ServedLoadTest, ReleasingAnotherClientsLeaseClosesThatClient) {
  ServedLoadDaemon d;
  server::Connection conn(d.ClientOptions(), d.socket_path());
  MutexLock lock(conn.mu());
  server::FrameWriter st(server::Op::kStats);
  ASSERT_TRUE(conn.Call(&st).ok());  // connected
  server::FrameWriter rel(server::Op::kRelease);
  rel.U64(12345);
  conn.Post(&rel);
  server::FrameWriter again(server::Op::kStats);
  Result<std::vector<uint8_t>> body = conn.Call(&again);
  EXPECT_EQ(body.status().code(), StatusCode::kUnavailable);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(ArenaFigure(c->get(), "bad_frames"), 1u);
}

// A client answers a Match from the arena's key table (no round trip) as
// the daemon would: through stores, erases and evictions, and for a client
// that connected after the blocks were published.
TEST(ServedMatchTest, MatchIsAnsweredFromTheArenasKeyTableWithoutARoundTrip) {
  ServedLoadDaemon d;  // 4 slots, nothing below
  const BlockKey k0 = TestBlockKey(10), k1 = TestBlockKey(11), k2 = TestBlockKey(12);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  StoreAll(c->get(), {k0, k1, k2});
  const uint64_t stored = (*c)->Stats().requests;
  EXPECT_EQ(stored, 6u);  // reserve and publish, three times
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k0, k1, k2}), ArenaTiers(3));
  // Nothing below the arena: the first key it lacks ends the match.
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k0, TestBlockKey(99), k1}), ArenaTiers(1));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{TestBlockKey(99)}), ArenaTiers(0));
  EXPECT_EQ((*c)->Stats().requests, stored);
  Result<bool> erased = (*c)->Erase(k1);
  ASSERT_TRUE(erased.ok() && *erased);
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k0, k1, k2}), ArenaTiers(1));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k2, k0}), ArenaTiers(2));
  // Four more blocks in four slots: k0 and k2, the least recent, go.
  const BlockKey k3 = TestBlockKey(13), k4 = TestBlockKey(14), k5 = TestBlockKey(15),
                 k6 = TestBlockKey(16);
  StoreAll(c->get(), {k3, k4, k5, k6});
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k0}), ArenaTiers(0));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k2}), ArenaTiers(0));
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{k3, k4, k5, k6}), ArenaTiers(4));
  EXPECT_EQ((*c)->Stats().requests, stored + 1 + 8);  // the erase, four stores
  EXPECT_EQ(ArenaFigure(c->get(), "evictions"), 2u);

  // A second client's first call connects (hello is not counted, its
  // match is); from then on its matches are the table's.
  Result<std::unique_ptr<ServerClient>> other = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ((*other)->Match(std::vector<BlockKey>{k5, k6}), ArenaTiers(2));
  EXPECT_EQ((*other)->Stats().requests, 1u);
  EXPECT_EQ((*other)->Match(std::vector<BlockKey>{k6, k3, k4, k0}), ArenaTiers(3));
  EXPECT_EQ((*other)->Stats().requests, 1u);
}

// Connect() at start-up: connects (no request counted), reads one byte of
// each 2 MiB page of the published blocks, and nothing more when called
// again; a daemon that is not there is Unavailable.
TEST(ServedConnectTest, ConnectReadsThePublishedBlocksPagesOnce) {
  ServedLoadDaemon d;
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  const std::vector<BlockKey> keys = {TestBlockKey(31), TestBlockKey(32), TestBlockKey(33),
                                      TestBlockKey(34)};
  StoreAll(c->get(), keys);
  Result<BlockBuffer> one = MakeBlockFile(WideTiny(), keys[0], BlockKey{}, BlockKey{}, 5);
  ASSERT_TRUE(one.ok());
  ServerOptions so;
  so.layout = WideTiny();
  // The daemon's arena: 4 slots, all published; the slot headers and key
  // table take a page each after the 4 KiB header. The 2 MiB pages (by file
  // offset) that hold the four blocks' bytes:
  std::set<uint64_t> pages;
  for (uint64_t slot = 0; slot < 4; ++slot) {
    const uint64_t start = 3 * 4096 + slot * so.SlotBytes();
    for (uint64_t at = start; at < start + one->size(); at += 4096) pages.insert(at >> 21);
    pages.insert((start + one->size() - 1) >> 21);
  }
  ASSERT_GE(pages.size(), 2u);

  Result<std::unique_ptr<ServerClient>> other = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(other.ok());
  ASSERT_TRUE((*other)->Connect().ok());
  EXPECT_EQ((*other)->Stats().connects, 1u);
  EXPECT_EQ((*other)->Stats().requests, 0u);
  EXPECT_EQ((*other)->Stats().warmed_pages, pages.size());
  ASSERT_TRUE((*other)->Connect().ok());  // connected: nothing again
  EXPECT_EQ((*other)->Stats().connects, 1u);
  EXPECT_EQ((*other)->Stats().warmed_pages, pages.size());
  std::vector<std::byte> out(one->size());
  const std::span<std::byte> dsts[] = {out};
  Result<std::vector<uint64_t>> lens =
      (*other)->Load(std::span<const BlockKey>(keys.data(), 1), dsts);
  ASSERT_TRUE(lens.ok());
  EXPECT_EQ((*lens)[0], one->size());
  EXPECT_EQ(out, std::vector<std::byte>(one->data(), one->data() + one->size()));

  ServerClientOptions nowhere = d.ClientOptions();
  nowhere.server += ".absent";
  Result<std::unique_ptr<ServerClient>> lost = ServerClient::Open(nowhere);
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ((*lost)->Connect().code(), StatusCode::kUnavailable);
  EXPECT_EQ((*lost)->Stats().warmed_pages, 0u);
  EXPECT_EQ((*lost)->Stats().unavailable, 1u);
}

// With a disk folder below, the table answers only a chain the arena holds
// whole; the rest is the daemon's to say: the arena's runs and the runs of
// the tiers below, which may alternate.
TEST(ServedMatchTest, AChainPastTheArenaIsAskedOfADaemonWithTiersBelow) {
  ServedLoadDaemon d(Below::kDisk);
  Result<std::unique_ptr<ServerClient>> c = ServerClient::Open(d.ClientOptions());
  ASSERT_TRUE(c.ok());
  std::vector<BlockKey> keys;
  for (uint8_t i = 0; i < 6; ++i) keys.push_back(TestBlockKey(20 + i));
  // Six blocks, four slots: the first two are written down (the tiers
  // below keep one block in RAM, the last written, and both on disk).
  StoreAll(c->get(), keys);
  EXPECT_EQ(ArenaFigure(c->get(), "written_down"), 2u);
  const uint64_t stored = (*c)->Stats().requests;
  EXPECT_EQ((*c)->Match(std::span<const BlockKey>(keys).subspan(2)), ArenaTiers(4));
  EXPECT_EQ((*c)->Stats().requests, stored);
  EXPECT_EQ((*c)->Match(keys),
            (std::vector<ServerTier>{ServerTier::kDisk, ServerTier::kArena, ServerTier::kArena,
                                     ServerTier::kArena, ServerTier::kArena, ServerTier::kArena}));
  EXPECT_EQ((*c)->Stats().requests, stored + 1);
  EXPECT_EQ((*c)->Match(std::vector<BlockKey>{keys[2], TestBlockKey(99)}), ArenaTiers(1));
  EXPECT_EQ((*c)->Stats().requests, stored + 2);
}

}  // namespace
}  // namespace kvtier
