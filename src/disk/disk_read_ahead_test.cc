// DiskTier::LoadBuffers of whole blocks: each lane asks the device for its
// next block's file (BlockReader::PrefetchWhole) before it reads and
// verifies the one it has, so the device holds more requests than there are
// lanes. Exact counts with one lane; none for blocks O_DIRECT reads (they
// would be read twice); the same exact bytes when every prefetch fails.
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/fault_env.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using testing::IsOk;

constexpr uint64_t kBlocks = 6;

class WholeReadAheadTest : public ::testing::Test {
 protected:
  // A tier on `env_` holding blocks 0..kBlocks-1, with one lane (no read
  // threads: the caller reads) and `direct` reads of every size or none.
  std::unique_ptr<DiskTier> Open(bool direct) {
    DiskTierOptions o = TestOptions(dir_.path());
    o.read_threads = 0;
    o.direct_io_reads = direct;
    o.direct_io_min_bytes = 0;
    auto t = DiskTier::Open(o, &env_);
    EXPECT_THAT(t, IsOk());
    if (!t.ok()) return nullptr;
    for (uint64_t i = 0; i < kBlocks; ++i) {
      EXPECT_THAT((*t)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
    }
    EXPECT_THAT((*t)->Flush(), IsOk());
    env_.ResetCounters();
    return std::move(t).value();
  }

  // Loads blocks 0..kBlocks-1 and checks each arrived once with its exact
  // bytes.
  void LoadAndCheck(DiskTier* tier) {
    std::vector<BlockKey> keys;
    for (uint64_t i = 0; i < kBlocks; ++i) keys.push_back(TestBlockKey(i));
    std::mutex mu;
    std::vector<int> calls(kBlocks, 0);
    std::vector<std::vector<std::byte>> got(kBlocks);
    tier->LoadBuffers(
        keys, [](size_t bytes) { return BlockBuffer::Allocate(bytes); },
        [&](size_t i, Result<std::optional<BlockBuffer>> r) {
          std::lock_guard<std::mutex> lock(mu);
          ++calls.at(i);
          if (r.ok() && r->has_value()) got[i].assign((*r)->data(), (*r)->data() + (*r)->size());
        });
    for (uint64_t i = 0; i < kBlocks; ++i) {
      SharedBlock want = MakeTestBlock(i);
      EXPECT_EQ(calls[i], 1) << i;
      EXPECT_EQ(got[i], std::vector<std::byte>(want->data(), want->data() + want->size())) << i;
    }
    EXPECT_EQ(tier->Stats().hits, kBlocks);
  }

  TempDir dir_;
  FaultInjectionEnv env_{Env::Default()};
};

TEST_F(WholeReadAheadTest, ALaneAsksForEachNextBlockOnceBeforeItReadsTheOneItHas) {
  auto tier = Open(/*direct=*/false);
  ASSERT_NE(tier, nullptr);
  LoadAndCheck(tier.get());
  // The lane's first block is read at once; each of the others was asked
  // for while the lane read the one before it.
  EXPECT_EQ(env_.Calls(OpKind::kPrefetch), static_cast<int64_t>(kBlocks - 1));
  // And read each through the file it opened to ask: one open per block.
  EXPECT_EQ(env_.Calls(OpKind::kOpenRead), static_cast<int64_t>(kBlocks));
}

TEST_F(WholeReadAheadTest, BlocksReadWithDirectIoAreNotAskedForThroughThePageCache) {
  auto tier = Open(/*direct=*/true);
  ASSERT_NE(tier, nullptr);
  LoadAndCheck(tier.get());
  EXPECT_EQ(env_.Calls(OpKind::kPrefetch), 0);
}

TEST_F(WholeReadAheadTest, FailedPrefetchesLeaveTheReadsToDoItAll) {
  auto tier = Open(/*direct=*/false);
  ASSERT_NE(tier, nullptr);
  env_.FailAll(OpKind::kPrefetch, EIO);
  LoadAndCheck(tier.get());
  EXPECT_EQ(env_.Injected(OpKind::kPrefetch), static_cast<int64_t>(kBlocks - 1));
}

}  // namespace
}  // namespace kvtier
