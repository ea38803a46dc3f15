// Partial reads from the remote tier (RemoteTier::LoadTensorBuffers)
// against a real redis-server, one server and a Cluster: only the header
// and the selected tensors' ranges cross the wire (bytes_read exact), a
// range straddling two parts is read from both, what is served is verified
// (a flipped selected byte is a miss, counted and deleted; a flipped
// unselected byte is not looked at, but fails a whole read), and a tier
// with mac_keys reads whole values.
#include <gtest/gtest.h>

#include <fstream>

#include "kvtier/block_file.h"
#include "kvtier/remote_tier.h"
#include "remote/remote_test_util.h"
#include "testing/temp_dir.h"

namespace kvtier::remote {
namespace {

using ::kvtier::testing::TempDir;

// What one LoadTensorBuffers call gave for its single key.
struct Loaded {
  bool called = false;
  Status status;
  std::optional<BlockBuffer> block;
};

class RemotePartialTest : public ::testing::TestWithParam<Where> {
 protected:
  RemoteTierOptions Options(const ModelLayout& layout, uint64_t part_bytes) {
    RemoteTierOptions o = TestOptions(url_, layout, prefix_name_);
    o.key_prefix = prefix_;
    o.part_bytes = part_bytes;
    o.require_server_at_open = true;
    return o;
  }
  Loaded Load(RemoteTier& tier, const BlockKey& key, const TensorMask& mask) {
    Loaded out;
    const TensorMask masks[1] = {mask};
    tier.LoadTensorBuffers(std::span(&key, 1), masks, {},
                           [&](size_t i, Result<std::optional<BlockBuffer>> r) {
                             EXPECT_EQ(i, 0u);
                             out.called = true;
                             if (!r.ok()) {
                               out.status = r.status();
                             } else {
                               out.block = std::move(*r);
                             }
                           });
    return out;
  }
  // Flips one bit of file byte `at` of `key`'s value in place on the server.
  void FlipByte(const ValueLayout& names, const BlockKey& key, const BlockBuffer& file,
                uint64_t at) {
    const uint32_t part = static_cast<uint32_t>(at / names.part_bytes());
    const uint64_t offset = at - uint64_t{part} * names.part_bytes();
    const char flipped = static_cast<char>(static_cast<uint8_t>(file.span()[at]) ^ 0x01);
    EXPECT_EQ(raw_.Run({"SETRANGE", names.PartName(key, part), std::to_string(offset),
                        std::string(1, flipped)}),
              "int:" + std::to_string(names.PartSize(file.size(), part)));
  }
  bool Present(const std::string& name) { return raw_.Run({"EXISTS", name}) == "int:1"; }

  const std::string url_ = UrlFor(GetParam());
  const std::string prefix_name_ = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  const std::string prefix_ = testing::UniqueKeyPrefix(prefix_name_);
  RawRedis raw_{url_};
};

// Selects tensor `t` alone of `layout`'s.
TensorMask Only(const ModelLayout& layout, size_t t) {
  TensorMask m(layout.TensorCount(), false);
  m[t] = true;
  return m;
}

// The decoded header of `file` (with the tensors' file ranges).
DecodedBlock Decode(const BlockBuffer& file) {
  DecodeOptions o;
  Result<DecodedBlock> d = DecodeBlock(file.span(), o);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  return d.ok() ? *d : DecodedBlock{};
}

uint64_t FileBegin(const DecodedBlock& d, size_t t) {
  return 8 + d.header_bytes + d.tensors[t].begin;
}
uint64_t FileEnd(const DecodedBlock& d, size_t t) { return 8 + d.header_bytes + d.tensors[t].end; }

bool SameBytes(const BlockBuffer& got, const BlockBuffer& want, uint64_t begin, uint64_t end) {
  return std::equal(got.span().begin() + begin, got.span().begin() + end,
                    want.span().begin() + begin);
}

TEST_P(RemotePartialTest, ReadsOnlyHeaderAndSelectedRangesAcrossParts) {
  // 4 KiB parts. MultiPartLayout: the header is in part 0 and every tensor
  // (10 KiB) straddles parts; "manylayers": 48 small tensors, so the
  // header (over 4 KiB) spans parts 0 and 1.
  uint64_t base = 100;
  for (const ModelLayout& layout :
       {MultiPartLayout(), ModelLayout::Attention("manylayers", 24, 1, 8, DType::kF16, 32)}) {
    base += 10;
    const RemoteTierOptions o = Options(layout, 4096);
    std::unique_ptr<RemoteTier> tier = OpenTier(o);
    ASSERT_NE(tier, nullptr);
    for (uint64_t i = 0; i < 2; ++i) {
      ASSERT_TRUE(tier->PutSync(TestBlockKey(base + i), TestBlock(layout, base + i)->span()).ok());
    }
    for (uint64_t i = 0; i < 2; ++i) {
      const SharedBlock want = TestBlock(layout, base + i);
      const DecodedBlock d = Decode(*want);
      const uint64_t header_end = 8 + d.header_bytes;
      // The last tensor that straddles two parts.
      size_t t = d.tensors.size();
      for (size_t k = 0; k < d.tensors.size(); ++k) {
        if (FileBegin(d, k) / o.part_bytes != (FileEnd(d, k) - 1) / o.part_bytes) t = k;
      }
      ASSERT_LT(t, d.tensors.size());
      const RemoteTierStats before = tier->Stats();
      const Loaded got = Load(*tier, TestBlockKey(base + i), Only(layout, t));
      ASSERT_TRUE(got.called);
      ASSERT_TRUE(got.status.ok()) << got.status.ToString();
      ASSERT_TRUE(got.block.has_value()) << layout.name << " " << i;
      EXPECT_EQ(got.block->size(), want->size());
      EXPECT_TRUE(SameBytes(*got.block, *want, 0, header_end));
      EXPECT_TRUE(SameBytes(*got.block, *want, FileBegin(d, t), FileEnd(d, t)));
      const RemoteTierStats after = tier->Stats();
      // The first read asks for 512 bytes of part 0, then the rest of the
      // header; the second for the header length it learnt: both read
      // exactly the header and the tensor.
      EXPECT_EQ(after.bytes_read - before.bytes_read,
                header_end + (FileEnd(d, t) - FileBegin(d, t)))
          << layout.name << " " << i;
      EXPECT_EQ(after.hits - before.hits, 1u);
      EXPECT_EQ(after.lookups - before.lookups, 1u);
      EXPECT_EQ(after.bad_values, 0u);
    }
    if (layout.name == "manylayers") {
      EXPECT_GT(8 + Decode(*TestBlock(layout, base)).header_bytes, o.part_bytes);
    }
  }
}

TEST_P(RemotePartialTest, OnePartValueReadsHeaderAndSelectedOnly) {
  const ModelLayout layout = TinyLayout();
  const RemoteTierOptions o = Options(layout, uint64_t{4} << 20);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const BlockKey key = TestBlockKey(200);
  const SharedBlock want = TestBlock(layout, 200);
  ASSERT_TRUE(tier->PutSync(key, want->span()).ok());
  const DecodedBlock d = Decode(*want);
  // Tensors 1 and 3: two ranges.
  TensorMask mask(layout.TensorCount(), false);
  mask[1] = mask[3] = true;
  const Loaded got = Load(*tier, key, mask);
  ASSERT_TRUE(got.block.has_value());
  EXPECT_TRUE(SameBytes(*got.block, *want, 0, 8 + d.header_bytes));
  EXPECT_TRUE(SameBytes(*got.block, *want, FileBegin(d, 1), FileEnd(d, 1)));
  EXPECT_TRUE(SameBytes(*got.block, *want, FileBegin(d, 3), FileEnd(d, 3)));
  EXPECT_EQ(tier->Stats().bytes_read, 8 + d.header_bytes + (FileEnd(d, 1) - FileBegin(d, 1)) +
                                          (FileEnd(d, 3) - FileBegin(d, 3)));
  // A whole mask (and no mask) reads the whole value.
  const RemoteTierStats before = tier->Stats();
  const Loaded whole = Load(*tier, key, TensorMask(layout.TensorCount(), true));
  ASSERT_TRUE(whole.block.has_value());
  EXPECT_TRUE(SameBytes(*whole.block, *want, 0, want->size()));
  EXPECT_EQ(tier->Stats().bytes_read - before.bytes_read, want->size());
  // An absent key is a plain miss; a mask of the wrong size an error.
  const Loaded absent = Load(*tier, TestBlockKey(201), mask);
  EXPECT_TRUE(absent.called);
  EXPECT_TRUE(absent.status.ok());
  EXPECT_FALSE(absent.block.has_value());
  const Loaded wrong = Load(*tier, key, TensorMask{true, false});
  EXPECT_EQ(wrong.status.code(), StatusCode::kInvalidArgument) << wrong.status.ToString();
  const RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.bad_values, 0u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.hits, 2u);
  EXPECT_TRUE(Present(ValueLayout(prefix_, o.part_bytes, layout.BlockBytes()).PartName(key, 0)));
}

TEST_P(RemotePartialTest, FlippedSelectedByteIsMissCountedDeleted) {
  const ModelLayout layout = MultiPartLayout();
  const RemoteTierOptions o = Options(layout, 4096);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const ValueLayout names(prefix_, o.part_bytes, layout.BlockBytes());
  const BlockKey key = TestBlockKey(300);
  const SharedBlock want = TestBlock(layout, 300);
  ASSERT_TRUE(tier->PutSync(key, want->span()).ok());
  const DecodedBlock d = Decode(*want);
  const size_t t = 1;
  // A byte in the tensor's second part.
  FlipByte(names, key, *want, FileEnd(d, t) - 3);
  const Loaded got = Load(*tier, key, Only(layout, t));
  ASSERT_TRUE(got.called);
  EXPECT_TRUE(got.status.ok());
  EXPECT_FALSE(got.block.has_value());
  const RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.bad_values, 1u);
  EXPECT_EQ(s.bad_values_deleted, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 0u);
  for (uint32_t p = 0; p < names.PartsFor(want->size()); ++p) {
    EXPECT_FALSE(Present(names.PartName(key, p))) << p;
  }
}

TEST_P(RemotePartialTest, FlippedUnselectedByteServedPartlyFailsWhole) {
  const ModelLayout layout = MultiPartLayout();
  const RemoteTierOptions o = Options(layout, 4096);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const ValueLayout names(prefix_, o.part_bytes, layout.BlockBytes());
  const BlockKey key = TestBlockKey(400);
  const SharedBlock want = TestBlock(layout, 400);
  ASSERT_TRUE(tier->PutSync(key, want->span()).ok());
  const DecodedBlock d = Decode(*want);
  FlipByte(names, key, *want, FileBegin(d, 0) + 5);  // tensor 0
  const Loaded got = Load(*tier, key, Only(layout, 3));
  ASSERT_TRUE(got.block.has_value());
  EXPECT_TRUE(SameBytes(*got.block, *want, FileBegin(d, 3), FileEnd(d, 3)));
  EXPECT_EQ(tier->Stats().bad_values, 0u);
  // The whole value fails its data checksum: a miss, counted, deleted.
  EXPECT_EQ(tier->Get(key), nullptr);
  const RemoteTierStats s = tier->Stats();
  EXPECT_EQ(s.bad_values, 1u);
  EXPECT_EQ(s.bad_values_deleted, 1u);
  EXPECT_FALSE(Present(names.PartName(key, 0)));
}

TEST_P(RemotePartialTest, TruncatedValueIsBad) {
  const ModelLayout layout = MultiPartLayout();
  const RemoteTierOptions o = Options(layout, 4096);
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const ValueLayout names(prefix_, o.part_bytes, layout.BlockBytes());
  const BlockKey key = TestBlockKey(500);
  const SharedBlock want = TestBlock(layout, 500);
  ASSERT_TRUE(tier->PutSync(key, want->span()).ok());
  const uint32_t last = names.PartsFor(want->size()) - 1;
  ASSERT_EQ(raw_.Run({"DEL", names.PartName(key, last)}), "int:1");
  const Loaded got = Load(*tier, key, Only(layout, layout.TensorCount() - 1));
  EXPECT_FALSE(got.block.has_value());
  EXPECT_EQ(tier->Stats().bad_values, 1u);
  EXPECT_FALSE(Present(names.PartName(key, 0)));
}

TEST_P(RemotePartialTest, SignedTierReadsWhole) {
  TempDir dir("kvtier_partial_mac");
  const std::string key_file = dir.Sub("k1");
  std::ofstream(key_file, std::ios::binary) << std::string(32, '\x5a');
  const ModelLayout layout = MultiPartLayout();
  RemoteTierOptions o = Options(layout, 4096);
  o.mac_keys = {key_file};
  std::unique_ptr<RemoteTier> tier = OpenTier(o);
  ASSERT_NE(tier, nullptr);
  const BlockKey key = TestBlockKey(600);
  const SharedBlock want = TestBlock(layout, 600);
  ASSERT_TRUE(tier->PutSync(key, want->span()).ok());
  const Loaded got = Load(*tier, key, Only(layout, 1));
  ASSERT_TRUE(got.block.has_value());
  EXPECT_TRUE(SameBytes(*got.block, *want, 0, want->size()));
  EXPECT_EQ(tier->Stats().bytes_read, want->size());
  EXPECT_EQ(tier->Stats().mac_failures, 0u);
}

INSTANTIATE_TEST_SUITE_P(Servers, RemotePartialTest,
                         ::testing::Values(Where::kSingle, Where::kCluster), WhereName);

}  // namespace
}  // namespace kvtier::remote
