// The remote tier against real redis-server processes: one server and a
// 3-master cluster (testing/redis_server.h: the URLs scripts/test exports,
// or servers this process starts).
#include "kvtier/remote_tier.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "remote/remote_test_util.h"
#include "testing/prometheus_text.h"
#include "testing/status_matchers.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::StatusIs;
using ::testing::HasSubstr;

class RemoteTierTest : public ::testing::TestWithParam<Where> {
 protected:
  RemoteTierOptions Options(const ModelLayout& layout) {
    RemoteTierOptions o =
        TestOptions(url_, layout, ::testing::UnitTest::GetInstance()->current_test_info()->name());
    o.require_server_at_open = true;
    return o;
  }
  std::string url_ = UrlFor(GetParam());
};

TEST_P(RemoteTierTest, RoundTrip) {
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = Options(layout);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  constexpr int kBlocks = 40;
  std::vector<BlockKey> keys;
  for (int i = 0; i < kBlocks; ++i) {
    keys.push_back(TestBlockKey(i));
    ASSERT_TRUE(tier->Put(keys.back(), TestBlock(layout, i)).ok());
  }
  ASSERT_TRUE(tier->Flush().ok());
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.puts, uint64_t{kBlocks});
  EXPECT_EQ(s.stored, uint64_t{kBlocks});
  EXPECT_EQ(s.queue_blocks, 0u);
  EXPECT_EQ(s.nodes, GetParam() == Where::kSingle ? 1u : 3u);

  std::vector<BlockKey> asked = keys;
  asked.push_back(TestBlockKey(1000));  // never stored
  std::vector<bool> found = tier->Exists(asked);
  ASSERT_EQ(found.size(), asked.size());
  for (int i = 0; i < kBlocks; ++i) EXPECT_TRUE(found[i]) << i;
  EXPECT_FALSE(found.back());

  std::vector<SharedBlock> got = tier->GetMany(asked);
  ASSERT_EQ(got.size(), asked.size());
  for (int i = 0; i < kBlocks; ++i) {
    ASSERT_NE(got[i], nullptr) << i;
    EXPECT_TRUE(CheckBlockFile(got[i]->span(), layout, keys[i]).ok()) << i;
    EXPECT_EQ(got[i]->size(), TestBlock(layout, i)->size());
  }
  EXPECT_EQ(got.back(), nullptr);

  std::vector<std::byte> buf(layout.BlockBytes() + 8192);
  Result<std::optional<size_t>> n = tier->GetInto(keys[3], buf);
  ASSERT_TRUE(n.ok());
  ASSERT_TRUE(n->has_value());
  EXPECT_TRUE(CheckBlockFile(std::span(buf).first(**n), layout, keys[3]).ok());

  Result<bool> erased = tier->Erase(keys[0]);
  ASSERT_TRUE(erased.ok());
  EXPECT_TRUE(*erased);
  EXPECT_FALSE(tier->Exists(std::span(&keys[0], 1))[0]);
  EXPECT_EQ(tier->Get(keys[0]), nullptr);

  s = tier->Stats();
  EXPECT_EQ(s.hits, uint64_t{kBlocks} + 1);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.bad_values, 0u);
  EXPECT_EQ(s.protocol_errors + s.timeouts + s.io_errors, 0u);
  EXPECT_EQ(s.erases, 1u);
  EXPECT_TRUE(tier->Close().ok());
  // After Close: misses, refused puts, Stats still works.
  EXPECT_EQ(tier->Get(keys[1]), nullptr);
  EXPECT_THAT(tier->Put(keys[1], TestBlock(layout, 1)), StatusIs(StatusCode::kFailedPrecondition));
}

TEST_P(RemoteTierTest, PartsRoundTripAndLayout) {
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout);
  o.part_bytes = 8192;
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  SharedBlock block = TestBlock(layout, 5);
  const uint32_t parts = static_cast<uint32_t>((block->size() + 8191) / 8192);
  ASSERT_GE(parts, 5u);
  ASSERT_TRUE(tier->PutSync(TestBlockKey(5), block->span()).ok());

  // On the server: part 0 under the plain name holds the first part_bytes
  // bytes, part i under ":i", the last one the rest (DESIGN.md §7).
  RawRedis raw(url_);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  EXPECT_EQ(raw.Run({"STRLEN", names.PartName(TestBlockKey(5), 0)}), "int:8192");
  for (uint32_t i = 1; i + 1 < parts; ++i) {
    EXPECT_EQ(raw.Run({"STRLEN", names.PartName(TestBlockKey(5), i)}), "int:8192") << i;
  }
  EXPECT_EQ(raw.Run({"STRLEN", names.PartName(TestBlockKey(5), parts - 1)}),
            "int:" + std::to_string(block->size() - (parts - 1) * 8192));
  EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(5), parts)}), "int:0");
  const std::string part0 = raw.Run({"GET", names.PartName(TestBlockKey(5), 0)});
  EXPECT_EQ(part0.substr(4), std::string(reinterpret_cast<const char*>(block->data()), 8192));

  EXPECT_TRUE(tier->Exists(std::vector<BlockKey>{TestBlockKey(5)})[0]);
  SharedBlock got = tier->Get(TestBlockKey(5));
  ASSERT_NE(got, nullptr);
  ASSERT_EQ(got->size(), block->size());
  EXPECT_EQ(std::memcmp(got->data(), block->data(), block->size()), 0);
  std::vector<std::byte> buf(block->size());
  Result<std::optional<size_t>> n = tier->GetInto(TestBlockKey(5), buf);
  ASSERT_TRUE(n.ok() && n->has_value());
  EXPECT_EQ(std::memcmp(buf.data(), block->data(), block->size()), 0);

  // Through the queue too, several at once.
  std::vector<BlockKey> keys;
  for (int i = 10; i < 20; ++i) {
    keys.push_back(TestBlockKey(i));
    ASSERT_TRUE(tier->Put(keys.back(), TestBlock(layout, i)).ok());
  }
  ASSERT_TRUE(tier->Flush().ok());
  std::vector<SharedBlock> many = tier->GetMany(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_NE(many[i], nullptr) << i;
    EXPECT_TRUE(CheckBlockFile(many[i]->span(), layout, keys[i]).ok());
  }
  EXPECT_EQ(tier->Stats().bad_values, 0u);
  Result<bool> erased = tier->Erase(TestBlockKey(5));
  ASSERT_TRUE(erased.ok() && *erased);
  for (uint32_t i = 0; i < parts; ++i) {
    EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(5), i)}), "int:0") << i;
  }
}

TEST_P(RemoteTierTest, AnotherKeysBlockIsAMissAndDeleted) {
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = Options(layout);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  RawRedis raw(url_);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  SharedBlock other = TestBlock(layout, 2);
  const std::string name = names.PartName(TestBlockKey(1), 0);
  ASSERT_EQ(raw.Run({"SET", name,
                     std::string(reinterpret_cast<const char*>(other->data()), other->size())}),
            "status:OK");
  EXPECT_TRUE(tier->Exists(std::vector<BlockKey>{TestBlockKey(1)})[0]);  // existence only
  EXPECT_EQ(tier->Get(TestBlockKey(1)), nullptr);
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.bad_values, 1u);
  EXPECT_EQ(s.bad_values_deleted, 1u);
  EXPECT_EQ(raw.Run({"EXISTS", name}), "int:0");
}

TEST_P(RemoteTierTest, TruncatedValueIsAMissAndDeleted) {
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = Options(layout);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  RawRedis raw(url_);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  SharedBlock b = TestBlock(layout, 4);
  const std::string name = names.PartName(TestBlockKey(4), 0);
  ASSERT_EQ(
      raw.Run({"SET", name, std::string(reinterpret_cast<const char*>(b->data()), b->size() - 10)}),
      "status:OK");
  std::vector<std::byte> buf(b->size());
  Result<std::optional<size_t>> n = tier->GetInto(TestBlockKey(4), buf);
  ASSERT_TRUE(n.ok());
  EXPECT_FALSE(n->has_value());
  EXPECT_EQ(tier->Stats().bad_values, 1u);
  EXPECT_EQ(raw.Run({"EXISTS", name}), "int:0");
  // A value of another type under the name is bad too.
  ASSERT_EQ(raw.Run({"LPUSH", name, "x"}), "int:1");
  EXPECT_EQ(tier->Get(TestBlockKey(4)), nullptr);
  EXPECT_EQ(tier->Stats().bad_values, 2u);
  EXPECT_EQ(raw.Run({"EXISTS", name}), "int:0");
  EXPECT_EQ(tier->Stats().protocol_errors, 0u);
}

TEST_P(RemoteTierTest, MissingPartIsAMissAndEveryPartDeleted) {
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout);
  o.part_bytes = 8192;
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  SharedBlock b = TestBlock(layout, 6);
  ASSERT_TRUE(tier->PutSync(TestBlockKey(6), b->span()).ok());
  RawRedis raw(url_);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  ASSERT_EQ(raw.Run({"DEL", names.PartName(TestBlockKey(6), 2)}), "int:1");
  EXPECT_FALSE(tier->Exists(std::vector<BlockKey>{TestBlockKey(6)})[0]);
  EXPECT_EQ(tier->Get(TestBlockKey(6)), nullptr);
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.bad_values, 1u);
  EXPECT_EQ(s.bad_values_deleted, 1u);
  EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(6), 0)}), "int:0");
  EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(6), 1)}), "int:0");
  // A part of the wrong length is bad as well.
  ASSERT_TRUE(tier->PutSync(TestBlockKey(6), b->span()).ok());
  ASSERT_EQ(raw.Run({"APPEND", names.PartName(TestBlockKey(6), 1), "junk"}), "int:8196");
  EXPECT_EQ(tier->Get(TestBlockKey(6)), nullptr);
  EXPECT_EQ(tier->Stats().bad_values, 2u);
}

TEST_P(RemoteTierTest, DifferentBytesForTheSameKeyFromTwoWriters) {
  // Two tiers (two hosts) store the same key with different created_at:
  // a reader gets exactly one of the two versions, never a mix.
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout);
  o.part_bytes = 8192;
  o.skip_existing = false;
  std::unique_ptr<RemoteTier> a = OpenTier(o), b = OpenTier(o);
  ASSERT_TRUE(a && b);
  constexpr int kRounds = 30;
  std::thread writer_a([&] {
    for (int r = 0; r < kRounds; ++r)
      (void)a->PutSync(TestBlockKey(7), TestBlock(layout, 7, 1000 + r)->span());
  });
  std::thread writer_b([&] {
    for (int r = 0; r < kRounds; ++r)
      (void)b->PutSync(TestBlockKey(7), TestBlock(layout, 7, 5000000 + r)->span());
  });
  int seen = 0;
  for (int r = 0; r < kRounds; ++r) {
    SharedBlock got = a->Get(TestBlockKey(7));
    if (got == nullptr) continue;
    ++seen;
    EXPECT_TRUE(CheckBlockFile(got->span(), layout, TestBlockKey(7)).ok());
  }
  writer_a.join();
  writer_b.join();
  EXPECT_GT(seen, 0);
  SharedBlock last = b->Get(TestBlockKey(7));
  ASSERT_NE(last, nullptr);
  EXPECT_TRUE(CheckBlockFile(last->span(), layout, TestBlockKey(7)).ok());
  EXPECT_EQ(a->Stats().bad_values + b->Stats().bad_values, 0u);
}

TEST_P(RemoteTierTest, SkipsBlocksTheServerHas) {
  const ModelLayout layout = TinyLayout();
  RemoteTierOptions o = Options(layout);
  std::unique_ptr<RemoteTier> a = OpenTier(o), b = OpenTier(o);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Put(TestBlockKey(1), TestBlock(layout, 1)).ok());
  ASSERT_TRUE(a->Flush().ok());
  ASSERT_TRUE(b->Put(TestBlockKey(1), TestBlock(layout, 1, 2000)).ok());
  ASSERT_TRUE(b->Put(TestBlockKey(2), TestBlock(layout, 2)).ok());
  ASSERT_TRUE(b->Flush().ok());
  EXPECT_EQ(b->Stats().skipped_existing, 1u);
  EXPECT_EQ(b->Stats().stored, 1u);
}

TEST_P(RemoteTierTest, TtlSetsAnExpiry) {
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout);
  o.part_bytes = 8192;
  o.ttl_seconds = 300;
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->PutSync(TestBlockKey(1), TestBlock(layout, 1)->span()).ok());
  RawRedis raw(url_);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  for (uint32_t i = 0; i < 3; ++i) {
    const std::string ttl = raw.Run({"TTL", names.PartName(TestBlockKey(1), i)});
    ASSERT_EQ(ttl.substr(0, 4), "int:");
    const int v = std::stoi(ttl.substr(4));
    EXPECT_GT(v, 0) << i;
    EXPECT_LE(v, 300) << i;
  }
}

TEST_P(RemoteTierTest, RefusesBadBlocks) {
  const ModelLayout layout = TinyLayout();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(layout));
  ASSERT_NE(tier, nullptr);
  SharedBlock b = TestBlock(layout, 1);
  EXPECT_THAT(tier->Put(TestBlockKey(2), b), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(tier->PutSync(TestBlockKey(2), b->span()), StatusIs(StatusCode::kInvalidArgument));
  SharedBlock foreign = TestBlock(MultiPartLayout(), 1);
  EXPECT_THAT(tier->Put(TestBlockKey(1), foreign), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(tier->Put(TestBlockKey(1), nullptr), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(tier->Stats().puts, 0u);
}

TEST_P(RemoteTierTest, LoadBuffersUsesTheAllocator) {
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout);
  o.part_bytes = 8192;
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(tier->PutSync(TestBlockKey(i), TestBlock(layout, i)->span()).ok());
  }
  // Keys 0..3 stored, 4 absent; the allocator refuses key 2's buffer.
  std::vector<BlockKey> keys = {TestBlockKey(0), TestBlockKey(1), TestBlockKey(2), TestBlockKey(3),
                                TestBlockKey(4)};
  std::vector<size_t> sizes;
  auto alloc = [&](size_t bytes) -> Result<BlockBuffer> {
    sizes.push_back(bytes);
    if (sizes.size() == 3) return Status::ResourceExhausted("no buffer for you");
    return BlockBuffer::Allocate(bytes);
  };
  std::vector<int> outcome(keys.size(), -1);  // 0 miss, 1 hit, 2 error
  std::vector<size_t> order;
  tier->LoadBuffers(keys, alloc, [&](size_t i, Result<std::optional<BlockBuffer>> r) {
    order.push_back(i);
    if (!r.ok()) {
      EXPECT_THAT(r, StatusIs(StatusCode::kResourceExhausted));
      outcome[i] = 2;
    } else if (!r->has_value()) {
      outcome[i] = 0;
    } else {
      outcome[i] = 1;
      EXPECT_TRUE(CheckBlockFile((*r)->span(), layout, keys[i]).ok()) << i;
    }
  });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(outcome, (std::vector<int>{1, 1, 2, 1, 0}));
  ASSERT_EQ(sizes.size(), 4u);  // exact sizes, asked before any byte was read
  EXPECT_EQ(sizes[0], TestBlock(layout, 0)->size());
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.alloc_failures, 1u);
  EXPECT_EQ(s.hits, 3u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.protocol_errors, 0u);
  // The connection stayed in sync: the refused value was skipped, not left behind.
  EXPECT_NE(tier->Get(TestBlockKey(2)), nullptr);
}

TEST_P(RemoteTierTest, StatsRender) {
  const ModelLayout layout = TinyLayout();
  std::unique_ptr<RemoteTier> tier = OpenTier(Options(layout));
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(tier->PutSync(TestBlockKey(1), TestBlock(layout, 1)->span()).ok());
  ASSERT_NE(tier->Get(TestBlockKey(1)), nullptr);
  RemoteTierStats s = tier->Stats();
  nlohmann::json j = nlohmann::json::parse(s.ToJson());
  EXPECT_EQ(j["hits"], 1);
  EXPECT_EQ(j["stored"], 1);
  EXPECT_EQ(j["nodes"], GetParam() == Where::kSingle ? 1 : 3);
  EXPECT_EQ(j["get_latency"]["count"], 1);
  const std::string prom = s.ToPrometheus();
  EXPECT_THAT(prom, HasSubstr("kvtier_remote_hits_total 1\n"));
  EXPECT_THAT(prom, HasSubstr("# HELP kvtier_remote_nodes nodes known (1 for one server)\n"
                              "# TYPE kvtier_remote_nodes gauge\n"));
  EXPECT_TRUE(::kvtier::testing::WellFormedPrometheus(prom));
  EXPECT_THAT(prom, HasSubstr("kvtier_remote_get_latency_seconds_count 1"));
}

INSTANTIATE_TEST_SUITE_P(Servers, RemoteTierTest,
                         ::testing::Values(Where::kSingle, Where::kCluster), WhereName);

TEST(RemoteTierOptions, ValidateNamesTheField) {
  RemoteTierOptions o;
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("url")));
  o.url = "redis://127.0.0.1:1";
  EXPECT_THAT(o.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr("layout")));
  o.layout = TinyLayout();
  EXPECT_TRUE(o.Validate().ok());
  auto bad = [&](auto mutate, const char* field) {
    RemoteTierOptions c = o;
    mutate(c);
    EXPECT_THAT(c.Validate(), StatusIs(StatusCode::kInvalidArgument, HasSubstr(field))) << field;
  };
  bad([](auto& c) { c.url = "redis://h:0"; }, "url");
  bad([](auto& c) { c.key_prefix = "a{b"; }, "key_prefix");
  bad([](auto& c) { c.key_prefix = std::string(300, 'a'); }, "key_prefix");
  bad([](auto& c) { c.part_bytes = 100; }, "part_bytes");
  bad([](auto& c) { c.part_bytes = uint64_t{1} << 40; }, "part_bytes");
  bad([](auto& c) { c.connect_timeout_ms = 0; }, "connect_timeout_ms");
  bad([](auto& c) { c.command_timeout_ms = 0; }, "command_timeout_ms");
  bad([](auto& c) { c.breaker_failure_threshold = 0; }, "breaker_failure_threshold");
  bad([](auto& c) { c.breaker_open_ms = 0; }, "breaker_open_ms");
  bad([](auto& c) { c.breaker_max_open_ms = 1; }, "breaker_max_open_ms");
  bad([](auto& c) { c.connections_per_node = 0; }, "connections_per_node");
  bad([](auto& c) { c.connections_per_node = 65; }, "connections_per_node");
  bad([](auto& c) { c.pipeline_max_bytes = 0; }, "pipeline_max_bytes");
  bad([](auto& c) { c.writer_threads = 0; }, "writer_threads");
  bad([](auto& c) { c.queue_max_bytes = 0; }, "queue_max_bytes");
}

TEST(RemoteTierAuth, WrongPasswordIsAClearErrorAtOpen) {
  testing::RedisServerOptions so;
  so.password = "right-pass";
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const std::string hostport = "127.0.0.1:" + std::to_string((*server)->port());
  const ModelLayout layout = TinyLayout();

  RemoteTierOptions o = TestOptions("redis://:wrong-pass@" + hostport, layout, "auth");
  Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(o, Env::Default());
  EXPECT_THAT(t, StatusIs(StatusCode::kInvalidArgument, HasSubstr("refused AUTH")));
  EXPECT_THAT(t.status().message(), ::testing::Not(HasSubstr("wrong-pass")));

  o.url = "redis://" + hostport;
  EXPECT_THAT(RemoteTier::Open(o, Env::Default()),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("requires a password")));

  o.url = "redis://default:right-pass@" + hostport + "/2";
  t = RemoteTier::Open(o, Env::Default());
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_TRUE((*t)->PutSync(TestBlockKey(1), TestBlock(layout, 1)->span()).ok());
  EXPECT_NE((*t)->Get(TestBlockKey(1)), nullptr);
  // The block went to database 2.
  RawRedis raw("redis://:right-pass@" + hostport);
  ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
  EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(1), 0)}), "int:0");
  EXPECT_EQ(raw.Run({"SELECT", "2"}), "status:OK");
  EXPECT_EQ(raw.Run({"EXISTS", names.PartName(TestBlockKey(1), 0)}), "int:1");
}

TEST(RemoteTierOom, FullServerDropsCopies) {
  testing::RedisServerOptions so;
  so.maxmemory = 2 << 20;  // noeviction: Debian's default policy
  Result<std::unique_ptr<testing::RedisServer>> server = testing::RedisServer::Start(so);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const ModelLayout layout = ModelLayout::Preset("qwen2.5-0.5b").value();  // 3 MiB blocks
  RemoteTierOptions o = TestOptions((*server)->url(), layout, "oom");
  std::unique_ptr<RemoteTier> tier = std::move(RemoteTier::Open(o, Env::Default())).value();
  SharedBlock b = TestBlock(layout, 1);
  EXPECT_THAT(tier->PutSync(TestBlockKey(1), b->span()),
              StatusIs(StatusCode::kResourceExhausted, HasSubstr("OOM")));
  ASSERT_TRUE(tier->Put(TestBlockKey(2), TestBlock(layout, 2)).ok());
  ASSERT_TRUE(tier->Flush().ok());
  RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.drops_oom, 2u);
  EXPECT_EQ(s.stored, 0u);
  EXPECT_EQ(s.breaker_opens, 0u);  // a full server is up
}

TEST(RemoteTierCluster, SlotsMatchTheServers) {
  Result<std::string> url = testing::TestRedisClusterUrl();
  ASSERT_TRUE(url.ok()) << url.status().ToString();
  RawRedis raw(*url);
  for (uint64_t i = 0; i < 20; ++i) {
    const std::string hex = TestBlockKey(i).Hex();
    EXPECT_EQ(raw.Run({"CLUSTER", "KEYSLOT", "kvtier:v1:{" + hex + "}:3"}),
              "int:" + std::to_string(ValueLayout::SlotOf(TestBlockKey(i))));
  }
}

}  // namespace
}  // namespace kvtier::remote
