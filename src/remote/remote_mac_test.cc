// Signed values (DESIGN.md §7) against a real redis-server: the `:mac`
// stored next to each value, a reader with keys serving only values signed
// by one of them (rotation included), and every way an unsigned or forged
// value is refused: a miss, counted in mac_failures, logged, and deleted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <regex>

#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "remote/value_mac.h"
#include "testing/recording_logger.h"
#include "testing/status_matchers.h"
#include "testing/temp_dir.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::RecordingLogger;
using ::kvtier::testing::StatusIs;
using ::kvtier::testing::TempDir;
using ::testing::HasSubstr;

// Key i: 32 bytes that differ per i.
std::string KeyBytes(int i) {
  std::string k(32, '\0');
  for (size_t j = 0; j < k.size(); ++j) k[j] = static_cast<char>(i * 31 + j * 7 + 1);
  return k;
}

class RemoteMacTest : public ::testing::TestWithParam<Where> {
 protected:
  // A key file holding `bytes`.
  std::string KeyFile(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.Sub(name);
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }
  RemoteTierOptions Options(const ModelLayout& layout, std::vector<std::string> keys) {
    RemoteTierOptions o = TestOptions(url_, layout, prefix_name_);
    o.key_prefix = prefix_;  // every tier of a test shares the keyspace
    o.require_server_at_open = true;
    o.mac_keys = std::move(keys);
    o.info_log = &log_;
    return o;
  }
  // The value stored under `name` ("" when none).
  std::string Raw(const std::string& name) {
    std::string r = raw_.Run({"GET", name});
    return r.rfind("str:", 0) == 0 ? r.substr(4) : "";
  }
  bool Present(const std::string& name) { return raw_.Run({"EXISTS", name}) == "int:1"; }

  const std::string url_ = UrlFor(GetParam());
  const std::string prefix_name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string prefix_ = testing::UniqueKeyPrefix(prefix_name_);
  TempDir dir_{"kvtier_mac"};
  RecordingLogger log_;
  RawRedis raw_{url_};
};

TEST_P(RemoteMacTest, SignedRoundTripOnePartAndMany) {
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  uint64_t base = 0;  // each layout its own keys
  for (const ModelLayout& layout : {TinyLayout(), MultiPartLayout()}) {
    base += 50;
    RemoteTierOptions o = Options(layout, {k1});
    o.part_bytes = 4096;
    std::unique_ptr<RemoteTier> writer = OpenTier(o);
    ASSERT_NE(writer, nullptr);
    const ValueLayout names(prefix_, o.part_bytes, layout.BlockBytes());
    constexpr int kBlocks = 6;
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_TRUE(writer->Put(TestBlockKey(base + i), TestBlock(layout, base + i)).ok());
    }
    ASSERT_TRUE(writer->Flush().ok());
    EXPECT_EQ(writer->Stats().stored, uint64_t{kBlocks});
    const std::string id = ValueMac::KeyId(KeyBytes(1));
    std::unique_ptr<ValueMac> check = ValueMac::FromKeys({KeyBytes(1)}).value();
    for (int i = 0; i < kBlocks; ++i) {
      const std::string mac = Raw(names.MacName(TestBlockKey(base + i)));
      EXPECT_TRUE(std::regex_match(mac, std::regex("v1 hmac-sha256 " + id + " [0-9a-f]{64}")))
          << mac;
      EXPECT_EQ(mac, check->Sign(TestBlockKey(base + i), TestBlock(layout, base + i)->span()));
    }
    // Another host holding the key serves every block, every read path.
    std::unique_ptr<RemoteTier> reader = OpenTier(o);
    ASSERT_NE(reader, nullptr);
    std::vector<BlockKey> keys;
    for (int i = 0; i < kBlocks; ++i) keys.push_back(TestBlockKey(base + i));
    std::vector<SharedBlock> got = reader->GetMany(keys);
    for (int i = 0; i < kBlocks; ++i) {
      ASSERT_NE(got[i], nullptr) << i;
      const SharedBlock want = TestBlock(layout, base + i);
      EXPECT_TRUE(std::equal(got[i]->span().begin(), got[i]->span().end(), want->span().begin(),
                             want->span().end()));
    }
    std::vector<std::byte> buf(layout.BlockBytes() + (64 << 10));
    Result<std::optional<size_t>> into = reader->GetInto(keys[0], buf);
    ASSERT_TRUE(into.ok());
    EXPECT_EQ(into->value_or(0), TestBlock(layout, base)->size());
    RemoteTierStats s = reader->Stats();
    EXPECT_EQ(s.hits, uint64_t{kBlocks} + 1);
    EXPECT_EQ(s.mac_failures, 0u);
    EXPECT_EQ(s.bad_values, 0u);
    // A host without keys ignores :mac and reads the same values.
    RemoteTierOptions plain_options = o;
    plain_options.mac_keys.clear();
    std::unique_ptr<RemoteTier> plain = OpenTier(plain_options);
    EXPECT_NE(plain->Get(keys[1]), nullptr);
    EXPECT_EQ(plain->Stats().mac_failures, 0u);
    // Erase removes the signature too.
    ASSERT_TRUE(reader->Erase(keys[2]).value());
    EXPECT_FALSE(Present(names.PartName(keys[2], 0)));
    EXPECT_FALSE(Present(names.MacName(keys[2])));
  }
  EXPECT_TRUE(log_.Matching("remote_mac_keys").empty());
}

TEST_P(RemoteMacTest, RotationNewKeySignsOldStillVerifies) {
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  const std::string k2 = KeyFile("k2", KeyBytes(2));
  const ModelLayout layout = TinyLayout();
  const ValueLayout names(prefix_, uint64_t{4} << 20, layout.BlockBytes());
  // Before the rotation: k1 signs block 1.
  std::unique_ptr<RemoteTier> old_writer = OpenTier(Options(layout, {k1}));
  ASSERT_TRUE(old_writer->PutSync(TestBlockKey(1), TestBlock(layout, 1)->span()).ok());
  // During it: k2 first (signs), k1 second (verifies).
  std::unique_ptr<RemoteTier> new_writer = OpenTier(Options(layout, {k2, k1}));
  ASSERT_TRUE(new_writer->PutSync(TestBlockKey(2), TestBlock(layout, 2)->span()).ok());
  EXPECT_THAT(Raw(names.MacName(TestBlockKey(2))), HasSubstr(ValueMac::KeyId(KeyBytes(2))));
  EXPECT_NE(new_writer->Get(TestBlockKey(1)), nullptr);  // the old key's value
  EXPECT_NE(new_writer->Get(TestBlockKey(2)), nullptr);
  // A host not updated yet (k1 first, k2 second) reads both too.
  std::unique_ptr<RemoteTier> lagging = OpenTier(Options(layout, {k1, k2}));
  EXPECT_NE(lagging->Get(TestBlockKey(1)), nullptr);
  EXPECT_NE(lagging->Get(TestBlockKey(2)), nullptr);
  EXPECT_EQ(new_writer->Stats().mac_failures + lagging->Stats().mac_failures, 0u);
  // After k1 is retired, its values are refused (and deleted).
  std::unique_ptr<RemoteTier> retired = OpenTier(Options(layout, {k2}));
  EXPECT_EQ(retired->Get(TestBlockKey(1)), nullptr);
  EXPECT_NE(retired->Get(TestBlockKey(2)), nullptr);
  RemoteTierStats s = retired->Stats();
  EXPECT_EQ(s.mac_failures, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_FALSE(Present(names.PartName(TestBlockKey(1), 0)));
  EXPECT_FALSE(Present(names.MacName(TestBlockKey(1))));
  EXPECT_EQ(log_.Matching("naming a key this host does not hold").size(), 1u);
}

// Each way a :mac can be wrong: a miss, counted, logged, value and :mac
// deleted; the breaker stays closed (a writer without keys is not a
// failing node).
TEST_P(RemoteMacTest, ForgedOrMissingMacIsAMissCountedAndDeleted) {
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout, {k1});
  o.part_bytes = 4096;
  o.breaker_failure_threshold = 1;
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const ValueLayout names(prefix_, o.part_bytes, layout.BlockBytes());
  std::unique_ptr<ValueMac> other = ValueMac::FromKeys({KeyBytes(9)}).value();
  struct Case {
    const char* what;
    std::function<std::string(const BlockKey&, const std::string& good)> mac;  // "" = delete it
    const char* logged;  // what the first case's line says
  };
  const std::vector<Case> cases = {
      {"wrong tag",
       [](const BlockKey&, const std::string& good) {
         std::string m = good;
         m.back() = m.back() == '0' ? '1' : '0';
         return m;
       },
       "tag does not match"},
      {"missing", [](const BlockKey&, const std::string&) { return std::string(); }, "no :mac"},
      {"unknown key id",
       [&](const BlockKey& key, const std::string&) {
         return other->Sign(key, TestBlock(MultiPartLayout(), 0)->span());
       },
       "naming a key this host does not hold"},
      {"truncated", [](const BlockKey&, const std::string& good) { return good.substr(0, 40); },
       "malformed"},
      {"tag of another value",
       [&](const BlockKey& key, const std::string&) {
         std::unique_ptr<ValueMac> same = ValueMac::FromKeys({KeyBytes(1)}).value();
         return same->Sign(key, TestBlock(MultiPartLayout(), 77)->span());
       },
       "tag does not match"},
  };
  uint64_t n = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const BlockKey key = TestBlockKey(100 + n);
    ASSERT_TRUE(tier->PutSync(key, TestBlock(layout, 100 + n)->span()).ok());
    const std::string mac_name = names.MacName(key);
    const std::string forged = c.mac(key, Raw(mac_name));
    if (forged.empty()) {
      ASSERT_EQ(raw_.Run({"DEL", mac_name}), "int:1");
    } else {
      ASSERT_EQ(raw_.Run({"SET", mac_name, forged}), "status:OK");
    }
    ++n;
    // Every read path refuses it; the first deletes it.
    EXPECT_EQ(tier->Get(key), nullptr);
    RemoteTierStats s = tier->Stats();
    EXPECT_EQ(s.mac_failures, n);
    EXPECT_EQ(s.bad_values, 0u);
    EXPECT_EQ(s.bad_values_deleted, n);
    EXPECT_EQ(s.breaker_opens, 0u);
    EXPECT_FALSE(Present(names.PartName(key, 0)));
    EXPECT_FALSE(Present(names.PartName(key, 1)));
    EXPECT_FALSE(Present(mac_name));
    if (n == 1) {
      EXPECT_EQ(log_.Matching(c.logged).size(), 1u) << c.logged;
    }
  }
  // One line for the burst (rate-limited; the next would count the rest).
  EXPECT_EQ(log_.Matching("remote_mac_keys").size(), 1u);
  // Into a caller's buffer, the same.
  const BlockKey key = TestBlockKey(200);
  ASSERT_TRUE(tier->PutSync(key, TestBlock(layout, 200)->span()).ok());
  ASSERT_EQ(raw_.Run({"DEL", names.MacName(key)}), "int:1");
  std::vector<std::byte> buf(layout.BlockBytes() + (64 << 10));
  Result<std::optional<size_t>> into = tier->GetInto(key, buf);
  ASSERT_TRUE(into.ok());
  EXPECT_FALSE(into->has_value());
  EXPECT_EQ(tier->Stats().mac_failures, n + 1);
  EXPECT_FALSE(Present(names.PartName(key, 0)));
}

// One batch with good values, forged tags and damaged values signed by our
// key interleaved: each value's verdict is its own (the reader hashes and
// decodes values on its VerifyPool's workers while it reads the next; a
// verdict given to the wrong key would serve a bad value or drop a good one).
TEST_P(RemoteMacTest, OneBatchOfGoodForgedAndDamagedValuesGetsEachVerdictRight) {
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  for (const ModelLayout& layout : {TinyLayout(), MultiPartLayout()}) {
    SCOPED_TRACE(layout.BlockBytes());
    RemoteTierOptions o = Options(layout, {k1});
    o.part_bytes = 4096;
    o.key_prefix += std::to_string(layout.BlockBytes()) + ":";
    o.breaker_failure_threshold = 1000;  // the damaged values count toward it
    std::unique_ptr<RemoteTier> tier = OpenTier(o);
    ASSERT_NE(tier, nullptr);
    const ValueLayout names(o.key_prefix, o.part_bytes, layout.BlockBytes());
    constexpr int kBlocks = 24;
    std::vector<BlockKey> keys;
    for (int i = 0; i < kBlocks; ++i) {
      keys.push_back(TestBlockKey(500 + i));
      ASSERT_TRUE(tier->PutSync(keys[i], TestBlock(layout, 500 + i)->span()).ok());
    }
    auto forged = [](int i) { return i % 3 == 1; };
    auto damaged = [](int i) { return i % 3 == 2; };
    std::unique_ptr<ValueMac> signer = ValueMac::FromKeys({KeyBytes(1)}).value();
    for (int i = 0; i < kBlocks; ++i) {
      if (forged(i)) {
        std::string m = Raw(names.MacName(keys[i]));
        ASSERT_EQ(m.size(), kMacValueBytes);
        m.back() = m.back() == '0' ? '1' : '0';
        ASSERT_EQ(raw_.Run({"SET", names.MacName(keys[i]), m}), "status:OK");
      }
      if (damaged(i)) {
        // A byte of part 0 flipped, and the result signed with our key:
        // the tag verifies, the checksums do not.
        const SharedBlock b = TestBlock(layout, 500 + i);
        std::string file(reinterpret_cast<const char*>(b->span().data()), b->size());
        const size_t part0 = std::min<size_t>(file.size(), o.part_bytes);
        file[part0 - 1] = static_cast<char>(file[part0 - 1] ^ 0x5a);
        ASSERT_EQ(raw_.Run({"SET", names.PartName(keys[i], 0), file.substr(0, part0)}),
                  "status:OK");
        ASSERT_EQ(raw_.Run({"SET", names.MacName(keys[i]),
                            signer->Sign(keys[i], std::as_bytes(std::span(file)))}),
                  "status:OK");
      }
    }
    std::vector<SharedBlock> got = tier->GetMany(keys);
    uint64_t good = 0;
    for (int i = 0; i < kBlocks; ++i) {
      if (forged(i) || damaged(i)) {
        EXPECT_EQ(got[i], nullptr) << i;
        EXPECT_FALSE(Present(names.PartName(keys[i], 0))) << i;
        continue;
      }
      ++good;
      ASSERT_NE(got[i], nullptr) << i;
      const SharedBlock want = TestBlock(layout, 500 + i);
      EXPECT_TRUE(std::equal(got[i]->span().begin(), got[i]->span().end(), want->span().begin(),
                             want->span().end()))
          << i;
    }
    RemoteTierStats s = tier->Stats();
    EXPECT_EQ(s.hits, good);
    EXPECT_EQ(s.mac_failures, uint64_t{kBlocks / 3});
    EXPECT_EQ(s.bad_values, uint64_t{kBlocks / 3});
    EXPECT_EQ(s.bad_values_deleted, kBlocks - good);
    // The good ones again, through LoadBuffers: every one served.
    std::vector<BlockKey> again;
    std::vector<int> from;
    for (int i = 0; i < kBlocks; ++i) {
      if (forged(i) || damaged(i)) continue;
      again.push_back(keys[i]);
      from.push_back(i);
    }
    uint64_t served = 0;
    tier->LoadBuffers(again, nullptr, [&](size_t i, Result<std::optional<BlockBuffer>> r) {
      if (!r.ok() || !r->has_value()) return;
      const SharedBlock want = TestBlock(layout, 500 + from[i]);
      const BlockBuffer& b = **r;
      served += std::equal(b.span().begin(), b.span().end(), want->span().begin(),
                           want->span().end());
    });
    EXPECT_EQ(served, good);
    EXPECT_EQ(tier->Stats().mac_failures, uint64_t{kBlocks / 3});
    EXPECT_EQ(tier->Stats().bad_values, uint64_t{kBlocks / 3});
  }
}

// A host without keys stores blocks; a host with keys is not fooled by
// them: every one is a miss, counted and deleted, and once it stores its
// own (signed) copy, a hit. Its writer's probe sees the unsigned copy as
// absent, so it replaces it rather than skipping it.
TEST_P(RemoteMacTest, UnsignedWriterCannotFeedASigningReader) {
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  const ModelLayout layout = TinyLayout();
  constexpr int kBlocks = 20;
  std::vector<BlockKey> keys;
  for (int i = 0; i < kBlocks; ++i) keys.push_back(TestBlockKey(300 + i));
  std::unique_ptr<RemoteTier> plain = OpenTier(Options(layout, {}));
  for (int i = 0; i < kBlocks; ++i) ASSERT_TRUE(plain->Put(keys[i], TestBlock(layout, 300 + i)).ok());
  ASSERT_TRUE(plain->Flush().ok());
  ASSERT_EQ(plain->Stats().stored, uint64_t{kBlocks});

  std::unique_ptr<RemoteTier> signing = OpenTier(Options(layout, {k1}));
  // Before any read, its writer replaces half of them (skip_existing does
  // not skip an unsigned copy).
  for (int i = 0; i < kBlocks / 2; ++i) {
    ASSERT_TRUE(signing->Put(keys[i], TestBlock(layout, 300 + i)).ok());
  }
  ASSERT_TRUE(signing->Flush().ok());
  RemoteTierStats w = signing->Stats();
  EXPECT_EQ(w.stored, uint64_t{kBlocks / 2});
  EXPECT_EQ(w.skipped_existing, 0u);
  std::vector<SharedBlock> got = signing->GetMany(keys);
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(got[i] != nullptr, i < kBlocks / 2) << i;
  RemoteTierStats s = signing->Stats();
  EXPECT_EQ(s.hits, uint64_t{kBlocks / 2});
  EXPECT_EQ(s.mac_failures, uint64_t{kBlocks / 2});
  EXPECT_EQ(s.bad_values_deleted, uint64_t{kBlocks / 2});
  EXPECT_EQ(s.bad_values, 0u);
  EXPECT_EQ(s.breaker_opens, 0u);
  const std::vector<bool> there = plain->Exists(keys);
  for (int i = 0; i < kBlocks; ++i) EXPECT_EQ(there[i], i < kBlocks / 2) << i;
  // Rate-limited: one line for the burst.
  EXPECT_EQ(log_.Matching("no :mac").size(), 1u);
}

TEST_P(RemoteMacTest, BadKeyFilesFailOpen) {
  const ModelLayout layout = TinyLayout();
  const std::string short_key = KeyFile("short", std::string(31, 'x'));
  const std::string k1 = KeyFile("k1", KeyBytes(1));
  const std::string k1_again = KeyFile("k1b", KeyBytes(1));
  struct Case {
    std::vector<std::string> files;
    const char* message;
  };
  for (const Case& c : std::vector<Case>{
           {{short_key}, "short: has 31 bytes, fewer than 32"},
           {{k1, dir_.Sub("absent")}, "absent"},
           {{k1, k1_again}, "repeats key id"},
           {{""}, "mac_keys: a key file path is empty"},
       }) {
    Result<std::unique_ptr<RemoteTier>> t = RemoteTier::Open(Options(layout, c.files), Env::Default());
    EXPECT_THAT(t.status(), StatusIs(StatusCode::kInvalidArgument)) << c.message;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message));
    EXPECT_THAT(t.status().message(), HasSubstr("mac_keys"));
  }
}

// The checker a reader hashes with while it reads (pieces of any size)
// agrees with the one-shot check, and with every refusal.
TEST(ValueMacChecker, PiecewiseEqualsWhole) {
  std::unique_ptr<ValueMac> mac = ValueMac::FromKeys({KeyBytes(3), KeyBytes(4)}).value();
  std::string block(1'500'000, '\0');
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 131 + (i >> 9));
  const std::span<const std::byte> bytes = std::as_bytes(std::span(block));
  const BlockKey key = TestBlockKey(42);
  const std::string good = mac->Sign(key, bytes);
  auto piecewise = [&](std::span<const std::byte> b, const std::optional<std::string>& m) {
    std::unique_ptr<ValueMac::Checker> c = mac->Begin(key, m);
    for (size_t off = 0, step = 1; off < b.size(); off += step, step = step * 3 + 7) {
      c->Update(b.subspan(off, std::min(step, b.size() - off)));
    }
    return c->Finish();
  };
  EXPECT_EQ(piecewise(bytes, good), ValueMac::Verdict::kOk);
  EXPECT_EQ(mac->Check(key, bytes, good), ValueMac::Verdict::kOk);
  std::string changed = block;
  changed[777'777] ^= 1;
  EXPECT_EQ(piecewise(std::as_bytes(std::span(changed)), good), ValueMac::Verdict::kBadTag);
  EXPECT_EQ(mac->Check(key, std::as_bytes(std::span(changed)), good), ValueMac::Verdict::kBadTag);
  EXPECT_EQ(piecewise(bytes, std::nullopt), ValueMac::Verdict::kMissing);
  EXPECT_EQ(piecewise(bytes, good.substr(1)), ValueMac::Verdict::kMalformed);
  std::unique_ptr<ValueMac> other = ValueMac::FromKeys({KeyBytes(5)}).value();
  EXPECT_EQ(piecewise(bytes, other->Sign(key, bytes)), ValueMac::Verdict::kUnknownKey);
  // Signed by the second key: still verified (rotation).
  std::unique_ptr<ValueMac> second = ValueMac::FromKeys({KeyBytes(4)}).value();
  EXPECT_EQ(piecewise(bytes, second->Sign(key, bytes)), ValueMac::Verdict::kOk);
  // Another block key, same bytes: refused (the key is signed too).
  EXPECT_EQ(mac->Check(TestBlockKey(43), bytes, good), ValueMac::Verdict::kBadTag);
}

INSTANTIATE_TEST_SUITE_P(Servers, RemoteMacTest, ::testing::Values(Where::kSingle, Where::kCluster),
                         WhereName);

}  // namespace
}  // namespace kvtier::remote
