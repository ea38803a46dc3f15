// BlockReader::ReadTensors, counted through the fault Env: the header in
// one pread once a header length is known, the ranges and (from the last
// read of the mask) the header asked of the device at once, small gaps read
// through within the budget, and what a prefetch asked for in vain counted
// as read. Prefetch is advice: when it fails the read is the same.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "disk/block_reader.h"
#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "disk/header_hash.h"
#include "synth/block_generator.h"
#include "testing/fault_env.h"
#include "testing/status_matchers.h"

namespace kvtier::disk {
namespace {

using disk_test::TempDir;
using testing::IsOk;

// 17 layers of K/V [2, 16, 16] F16: 34 tensors of 1024 bytes.
constexpr uint64_t kTensor = 1024;
constexpr size_t kTensors = 34;

class ReadTensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    layout_ = ModelLayout::Attention("seventeen", 17, 2, 16, DType::kF16, 16);
    ASSERT_THAT(layout_.Validate(), IsOk());
    signature_ = layout_.Signature();
    for (uint64_t i = 1; i <= 3; ++i) {
      const BlockKey key = TestBlockKey(i);
      auto b = MakeBlockFile(layout_, key, BlockKey{}, BlockKey{}, 1'700'000'000);
      ASSERT_THAT(b, IsOk());
      blocks_.emplace_back(b->data(), b->data() + b->size());
      std::filesystem::create_directories(folder_.Subdir(key.bytes[0]));
      std::ofstream f(folder_.BlockPath(key), std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(blocks_.back().data()),
              static_cast<std::streamsize>(blocks_.back().size()));
      IndexRow row;
      row.key = key;
      row.size = blocks_.back().size();
      row.header_hash = HeaderHash(blocks_.back());
      rows_.push_back(row);
    }
    auto d = DecodeBlock(blocks_[0], {});
    ASSERT_THAT(d, IsOk());
    ASSERT_EQ(d->tensors.size(), kTensors);
    header_ = 8 + d->header_bytes;
    tensors_ = d->tensors;
  }

  struct Got {
    ReadOutcome outcome = ReadOutcome::kError;
    uint64_t bytes_read = 0;
    int64_t preads = 0;
    int64_t prefetches = 0;
    int64_t opens = 0;
  };

  // Reads block `b` through `reader` and checks the selected tensors.
  Got Read(const BlockReader& reader, size_t b, const TensorMask& mask,
           PrefetchedRead* prefetched = nullptr) {
    env_.ResetCounters();
    std::vector<std::byte> dst(rows_[b].size);
    Got g;
    Status error;
    g.outcome = reader.ReadTensors(rows_[b], mask, dst, &g.bytes_read, &error, prefetched);
    g.preads = env_.Calls(OpKind::kRead);
    g.prefetches = env_.Calls(OpKind::kPrefetch);
    g.opens = env_.Calls(OpKind::kOpenRead);
    if (g.outcome != ReadOutcome::kOk) return g;
    EXPECT_EQ(std::memcmp(dst.data(), blocks_[b].data(), header_), 0);
    for (size_t t = 0; t < kTensors; ++t) {
      if (!mask[t]) continue;
      const uint64_t at = header_ + tensors_[t].begin;
      EXPECT_EQ(std::memcmp(dst.data() + at, blocks_[b].data() + at, kTensor), 0) << t;
    }
    return g;
  }

  static TensorMask Select(std::initializer_list<size_t> which) {
    TensorMask m(kTensors, false);
    for (size_t t : which) m[t] = true;
    return m;
  }

  TempDir dir_;
  FolderLayout folder_{dir_.path()};
  FaultInjectionEnv env_{Env::Default()};
  ModelLayout layout_;
  std::string signature_;
  std::vector<std::vector<std::byte>> blocks_;
  std::vector<IndexRow> rows_;
  uint64_t header_ = 0;
  std::vector<TensorView> tensors_;
};

TEST_F(ReadTensorsTest, OnePreadForTheHeaderOnceItsLengthIsKnown) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  const TensorMask mask = Select({2, 7});  // two ranges, 4 tensors apart
  // The first read knows no header length: 8 bytes, then the rest.
  Got g = Read(reader, 0, mask);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.bytes_read, header_ + 2 * kTensor);
  EXPECT_EQ(g.preads, 2 + 2);
  EXPECT_EQ(g.prefetches, 2);  // both ranges asked at once
  // The next: the header in one pread, asked of the device with the ranges.
  g = Read(reader, 1, mask);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.bytes_read, header_ + 2 * kTensor);
  EXPECT_EQ(g.preads, 1 + 2);
  EXPECT_EQ(g.prefetches, 1 + 2);
  EXPECT_EQ(env_.Calls(OpKind::kOpenRead), 1);
}

TEST_F(ReadTensorsTest, ASmallGapWithinTheBudgetIsReadThrough) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  // All but tensor 16: a gap of 1024 bytes, within 33 × 1024 / 32.
  TensorMask mask(kTensors, true);
  mask[16] = false;
  ASSERT_EQ(Read(reader, 0, mask).outcome, ReadOutcome::kOk);
  Got g = Read(reader, 1, mask);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.preads, 1 + 1);
  EXPECT_EQ(g.bytes_read, header_ + kTensors * kTensor);
}

TEST_F(ReadTensorsTest, AGapPastTheBudgetIsNot) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  // Tensors 0-19 but 10: 19 KiB selected, a budget of 608 bytes < 1024.
  TensorMask mask(kTensors, false);
  for (size_t t = 0; t < 20; ++t) mask[t] = t != 10;
  ASSERT_EQ(Read(reader, 0, mask).outcome, ReadOutcome::kOk);
  Got g = Read(reader, 1, mask);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.preads, 1 + 2);
  EXPECT_EQ(g.bytes_read, header_ + 19 * kTensor);
}

TEST_F(ReadTensorsTest, WhatAPrefetchAskedForInVainCountsAsRead) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  const TensorMask mask = Select({3});
  ASSERT_EQ(Read(reader, 0, mask).outcome, ReadOutcome::kOk);
  // PrefetchTensors asks for what the last read of the mask read.
  env_.ResetCounters();
  std::optional<PrefetchedRead> ahead = reader.PrefetchTensors(rows_[1], mask);
  ASSERT_TRUE(ahead.has_value());
  EXPECT_EQ(ahead->plan.header_bytes, header_);
  const uint64_t t3 = header_ + tensors_[3].begin;
  EXPECT_THAT(ahead->plan.ranges, ::testing::ElementsAre(BlockFileRange{t3, t3 + kTensor}));
  EXPECT_EQ(env_.Calls(OpKind::kPrefetch), 2);
  EXPECT_EQ(env_.Calls(OpKind::kRead), 0);
  EXPECT_EQ(env_.Calls(OpKind::kOpenRead), 1);
  ASSERT_NE(ahead->file, nullptr);
  // A plan with a range this read does not need (tensor 9), for below.
  PrefetchedRead wider{ahead->plan, nullptr};
  const uint64_t t9 = header_ + tensors_[9].begin;
  wider.plan.ranges.push_back({t9, t9 + kTensor});
  // Read with it: through the file the prefetch opened (no second open),
  // nothing more is prefetched, nothing was in vain.
  Got g = Read(reader, 1, mask, &*ahead);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.opens, 0);
  EXPECT_EQ(g.prefetches, 0);
  EXPECT_EQ(g.bytes_read, header_ + kTensor);
  // The wider plan (no file: this read opens one): the unneeded range counted.
  g = Read(reader, 2, mask, &wider);
  EXPECT_EQ(g.opens, 1);
  ASSERT_EQ(g.outcome, ReadOutcome::kOk);
  EXPECT_EQ(g.bytes_read, header_ + kTensor + kTensor);
  EXPECT_EQ(g.preads, 1 + 1);
}

TEST_F(ReadTensorsTest, AFailedPrefetchLeavesTheReadAsItIs) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  const TensorMask mask = Select({0, 5, 33});
  env_.FailAll(OpKind::kPrefetch, EIO);
  for (size_t b = 0; b < 3; ++b) {
    Got g = Read(reader, b, mask);
    ASSERT_EQ(g.outcome, ReadOutcome::kOk) << b;
    EXPECT_EQ(g.bytes_read, header_ + 3 * kTensor) << b;
    EXPECT_GT(g.prefetches, 0) << b;
  }
  EXPECT_GT(env_.Injected(OpKind::kPrefetch), 0);
}

TEST_F(ReadTensorsTest, PrefetchOfAMissingFileAsksForNothing) {
  BlockReader reader(&env_, &folder_, &signature_, {});
  IndexRow gone = rows_[0];
  gone.key = TestBlockKey(99);
  EXPECT_FALSE(reader.PrefetchTensors(gone, Select({1})).has_value());
  IndexRow wrong_size = rows_[0];
  wrong_size.size += 1;
  EXPECT_FALSE(reader.PrefetchTensors(wrong_size, Select({1})).has_value());
}

}  // namespace
}  // namespace kvtier::disk
