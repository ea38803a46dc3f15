// DiskTier::LoadTensorBuffers: a partial read preads the header and the
// selected tensors only (bytes_read counts them exactly), verifies each
// against tensor_checksums, quarantines a file whose selected tensor is
// damaged, and never reads (so never fails on) an unselected one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "disk/disk_test_util.h"
#include "kvtier/block_file.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/fault_env.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::BlockFilePath;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using testing::IsOk;

// Four layers of K/V [2, 16, 16] F16: 8 tensors of 1024 bytes.
const ModelLayout& Layout() {
  static const ModelLayout* l =
      new ModelLayout(ModelLayout::Attention("four", 4, 2, 16, DType::kF16, 16));
  return *l;
}

struct Got {
  int calls = 0;
  bool hit = false;
  std::vector<std::byte> bytes;
};

class PartialReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DiskTierOptions o = TestOptions(dir_.path(), Layout());
    auto t = DiskTier::Open(o, Env::Default());
    ASSERT_THAT(t, IsOk());
    tier_ = std::move(t).value();
    for (uint64_t i = 1; i <= 2; ++i) {
      blocks_.push_back(MakeTestBlock(Layout(), TestBlockKey(i)));
      ASSERT_THAT(tier_->Store(TestBlockKey(i), blocks_.back()), IsOk());
    }
    ASSERT_THAT(tier_->Flush(), IsOk());
    Result<DecodedBlock> d = DecodeBlock(blocks_[0]->span(), {});
    ASSERT_TRUE(d.ok());
    header_bytes_ = 8 + d->header_bytes;
    tensors_ = d->tensors;
  }

  std::vector<Got> Load(std::vector<BlockKey> keys, std::vector<TensorMask> masks) {
    std::vector<Got> got(keys.size());
    std::mutex mu;
    tier_->LoadTensorBuffers(
        keys, masks, [](size_t n) { return BlockBuffer::Allocate(n); },
        [&](size_t i, Result<std::optional<BlockBuffer>> r) {
          std::lock_guard<std::mutex> lock(mu);
          ++got[i].calls;
          if (r.ok() && r->has_value()) {
            got[i].hit = true;
            got[i].bytes.assign((*r)->data(), (*r)->data() + (*r)->size());
          }
        });
    return got;
  }

  void FlipByte(uint64_t block, uint64_t offset) {
    const std::string path = BlockFilePath(dir_.path(), TestBlockKey(block));
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(static_cast<std::streamoff>(offset));
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x01);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(&c, 1);
  }

  // Expects the selected tensors of `got` to equal block `b`'s.
  void ExpectSelected(const Got& got, size_t b, const TensorMask& mask) {
    ASSERT_TRUE(got.hit);
    ASSERT_EQ(got.bytes.size(), blocks_[b]->size());
    EXPECT_EQ(std::memcmp(got.bytes.data(), blocks_[b]->data(), header_bytes_), 0);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      if (!mask[t]) continue;
      const uint64_t at = header_bytes_ + tensors_[t].begin;
      EXPECT_EQ(std::memcmp(got.bytes.data() + at, blocks_[b]->data() + at, 1024), 0) << t;
    }
  }

  TempDir dir_;
  std::unique_ptr<DiskTier> tier_;
  std::vector<SharedBlock> blocks_;
  uint64_t header_bytes_ = 0;
  std::vector<TensorView> tensors_;
};

TEST_F(PartialReadTest, ReadsTheHeaderAndTheSelectedTensorsOnly) {
  const TensorMask mask = {false, false, true, true, false, false, false, true};
  const uint64_t before = tier_->Stats().bytes_read;
  std::vector<Got> got = Load({TestBlockKey(1), TestBlockKey(2)}, {mask, mask});
  for (size_t b = 0; b < 2; ++b) {
    EXPECT_EQ(got[b].calls, 1);
    ExpectSelected(got[b], b, mask);
  }
  // Exactly the header and three 1024-byte tensors per block.
  EXPECT_EQ(tier_->Stats().bytes_read - before, 2 * (header_bytes_ + 3 * 1024));
  EXPECT_EQ(tier_->Stats().hits, 2u);
  // An empty mask (or none) reads whole files.
  const uint64_t mid = tier_->Stats().bytes_read;
  got = Load({TestBlockKey(1)}, {});
  ASSERT_TRUE(got[0].hit);
  EXPECT_EQ(got[0].bytes,
            std::vector<std::byte>(blocks_[0]->data(), blocks_[0]->data() + blocks_[0]->size()));
  EXPECT_EQ(tier_->Stats().bytes_read - mid, blocks_[0]->size());
}

TEST_F(PartialReadTest, FlipInAnUnselectedTensorIsNotReadAndAWholeReadFails) {
  const TensorMask mask = {true, true, false, false, false, false, false, false};
  FlipByte(1, header_bytes_ + tensors_[5].begin + 17);  // layer 2's values
  std::vector<Got> got = Load({TestBlockKey(1)}, {mask});
  ExpectSelected(got[0], 0, mask);
  EXPECT_EQ(tier_->Stats().quarantined, 0u);
  EXPECT_TRUE(tier_->Contains(TestBlockKey(1)));
  // The whole read verifies the data checksum: a miss, quarantined.
  got = Load({TestBlockKey(1)}, {TensorMask(8, true)});
  EXPECT_EQ(got[0].calls, 1);
  EXPECT_FALSE(got[0].hit);
  EXPECT_EQ(tier_->Stats().quarantined, 1u);
  EXPECT_FALSE(tier_->Contains(TestBlockKey(1)));
}

TEST_F(PartialReadTest, FlipInASelectedTensorIsAMissAndAQuarantine) {
  const TensorMask mask = {false, false, false, false, false, false, true, false};
  FlipByte(2, header_bytes_ + tensors_[6].begin + 1000);
  const uint64_t misses = tier_->Stats().misses;
  std::vector<Got> got = Load({TestBlockKey(1), TestBlockKey(2)}, {mask, mask});
  ExpectSelected(got[0], 0, mask);
  EXPECT_EQ(got[1].calls, 1);
  EXPECT_FALSE(got[1].hit);
  EXPECT_EQ(tier_->Stats().misses - misses, 1u);
  EXPECT_EQ(tier_->Stats().quarantined, 1u);
  EXPECT_FALSE(std::filesystem::exists(BlockFilePath(dir_.path(), TestBlockKey(2))));
  EXPECT_FALSE(tier_->Contains(TestBlockKey(2)));
}

TEST_F(PartialReadTest, FlipInTheHeaderIsCaughtByAPartialRead) {
  const TensorMask mask = {true, false, false, false, false, false, false, false};
  FlipByte(1, 40);  // inside the JSON: the row's header hash or the decoder catches it
  std::vector<Got> got = Load({TestBlockKey(1)}, {mask});
  EXPECT_FALSE(got[0].hit);
  EXPECT_EQ(tier_->Stats().quarantined, 1u);
}

// A batch of partial reads runs in lanes that ask the device for their next
// blocks ahead: every block still arrives once, verified, with exactly the
// header and its selected tensors counted, prefetches failing or not.
TEST(PartialReadLanesTest, ABatchReadsEachBlockOnceAndCountsExactly) {
  for (bool fail_prefetch : {false, true}) {
    SCOPED_TRACE(fail_prefetch ? "prefetch fails" : "prefetch works");
    TempDir dir;
    FaultInjectionEnv env(Env::Default());
    if (fail_prefetch) env.FailAll(OpKind::kPrefetch, EIO);
    auto t = DiskTier::Open(TestOptions(dir.path(), Layout()), &env);
    ASSERT_THAT(t, IsOk());
    std::unique_ptr<DiskTier> tier = std::move(t).value();
    constexpr uint64_t kBlocks = 24;
    std::vector<BlockKey> keys;
    std::vector<SharedBlock> blocks;
    for (uint64_t i = 1; i <= kBlocks; ++i) {
      keys.push_back(TestBlockKey(i));
      blocks.push_back(MakeTestBlock(Layout(), keys.back()));
      ASSERT_THAT(tier->Store(keys.back(), blocks.back()), IsOk());
    }
    ASSERT_THAT(tier->Flush(), IsOk());
    Result<DecodedBlock> d = DecodeBlock(blocks[0]->span(), {});
    ASSERT_TRUE(d.ok());
    const uint64_t header = 8 + d->header_bytes;
    const TensorMask mask = {true, false, false, false, false, true, false, false};
    const std::vector<TensorMask> masks(kBlocks, mask);
    std::mutex mu;
    std::vector<int> calls(kBlocks, 0);
    std::vector<bool> right(kBlocks, false);
    const uint64_t before = tier->Stats().bytes_read;
    tier->LoadTensorBuffers(
        keys, masks, [](size_t n) { return BlockBuffer::Allocate(n); },
        [&](size_t i, Result<std::optional<BlockBuffer>> r) {
          std::lock_guard<std::mutex> lock(mu);
          ++calls[i];
          if (!r.ok() || !r->has_value()) return;
          const std::byte* got = (*r)->data();
          const std::byte* want = blocks[i]->data();
          bool same = std::memcmp(got, want, header) == 0;
          for (size_t k : {size_t{0}, size_t{5}}) {
            const uint64_t at = header + d->tensors[k].begin;
            same = same && std::memcmp(got + at, want + at, 1024) == 0;
          }
          right[i] = same;
        });
    for (uint64_t i = 0; i < kBlocks; ++i) {
      EXPECT_EQ(calls[i], 1) << i;
      EXPECT_TRUE(right[i]) << i;
    }
    EXPECT_EQ(tier->Stats().hits, kBlocks);
    EXPECT_EQ(tier->Stats().bytes_read - before, kBlocks * (header + 2 * 1024));
    EXPECT_GT(env.Calls(OpKind::kPrefetch), 0);
    ASSERT_THAT(tier->Close(), IsOk());
  }
}

}  // namespace
}  // namespace kvtier
