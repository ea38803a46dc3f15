// BufferPool: exact sizes, alignment, reuse of fitting buffers only, the
// cap on kept memory, and buffers that outlive every other owner.
#include "cache/buffer_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "testing/status_matchers.h"

namespace kvtier::cache_internal {
namespace {

using ::kvtier::testing::StatusIs;

uintptr_t Addr(const BlockBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); }

TEST(BufferPool, HandsOutExactSizesAlignedAndWritable) {
  auto pool = BufferPool::Create(64 << 20);
  for (size_t size : {size_t{1}, size_t{4096}, size_t{5000}, size_t{3 << 20} + 17}) {
    Result<BlockBuffer> b = pool->Take(size);
    ASSERT_TRUE(b.ok()) << size;
    EXPECT_EQ(b->size(), size);
    EXPECT_GE(b->capacity(), size);
    EXPECT_EQ(Addr(*b) % BlockBuffer::kAlignment, 0u);
    if (size >= BufferPool::kHugeFromBytes) {
      EXPECT_EQ(Addr(*b) % (2 << 20), 0u);  // starts on a huge page
    }
    std::memset(b->data(), 0xab, b->capacity());
  }
  EXPECT_THAT(pool->Take(0), StatusIs(StatusCode::kResourceExhausted));
  EXPECT_THAT(pool->Take(SIZE_MAX), StatusIs(StatusCode::kResourceExhausted));
}

TEST(BufferPool, ReusesAFreedBufferOfAFittingSizeOnly) {
  auto pool = BufferPool::Create(64 << 20);
  const size_t block = (3 << 20) + 5000;
  uintptr_t first = 0;
  {
    BlockBuffer b = pool->Take(block).value();
    first = Addr(b);
  }
  BufferPoolStats s = pool->Stats();
  EXPECT_EQ(s.free_buffers, 1u);
  // A block a few header bytes longer or shorter shares the buffer.
  {
    BlockBuffer b = pool->Take(block - 100).value();
    EXPECT_EQ(Addr(b), first);
  }
  {
    BlockBuffer b = pool->Take(block + 100).value();
    EXPECT_EQ(Addr(b), first);
  }
  // Much smaller requests do not pin a large buffer.
  {
    BlockBuffer small = pool->Take(block / 2).value();
    EXPECT_NE(Addr(small), first);
  }
  s = pool->Stats();
  EXPECT_EQ(s.takes, 4u);
  EXPECT_EQ(s.reused, 2u);
  EXPECT_EQ(s.free_buffers, 2u);
}

TEST(BufferPool, HandsOutTheBufferFreedLastAmongThoseOfItsSize) {
  auto pool = BufferPool::Create(64 << 20);
  const size_t block = (3 << 20) + 5000;
  ASSERT_EQ(pool->Prefault(block, 3).value(), 3u);
  std::vector<BlockBuffer> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool->Take(block).value());
  const uintptr_t a = Addr(held[0]), b = Addr(held[1]), c = Addr(held[2]);
  // Freed in the order b, c, a: a is handed out first, then c, then b.
  held[1] = BlockBuffer();
  held[2] = BlockBuffer();
  held[0] = BlockBuffer();
  BlockBuffer first = pool->Take(block).value();
  EXPECT_EQ(Addr(first), a);
  BlockBuffer second = pool->Take(block - 100).value();
  EXPECT_EQ(Addr(second), c);
  // Returned at once, as a restore that copies each block out does: the
  // same buffer again.
  second = BlockBuffer();
  BlockBuffer again = pool->Take(block).value();
  EXPECT_EQ(Addr(again), c);
  BlockBuffer last = pool->Take(block).value();
  EXPECT_EQ(Addr(last), b);
  EXPECT_EQ(pool->Stats().reused, 7u);
}

TEST(BufferPool, KeepsAtMostItsCapOfFreeMemory) {
  auto pool = BufferPool::Create(3 * 8192);
  std::vector<BlockBuffer> held;
  for (int i = 0; i < 5; ++i) held.push_back(pool->Take(8000).value());
  held.clear();
  BufferPoolStats s = pool->Stats();
  EXPECT_EQ(s.free_buffers, 3u);
  EXPECT_EQ(s.free_bytes, 3u * 8192);
  EXPECT_EQ(s.released, 2u);
  EXPECT_EQ(s.fresh_bytes, 5u * 8192);

  auto none = BufferPool::Create(0);
  { BlockBuffer b = none->Take(100).value(); }
  EXPECT_EQ(none->Stats().free_buffers, 0u);
  EXPECT_EQ(none->Stats().released, 1u);
}

TEST(BufferPool, PrefaultedBuffersServeTheNextTakesWithinTheCap) {
  auto pool = BufferPool::Create(3 * 8192);
  Result<uint64_t> added = pool->Prefault(8000, 5);
  ASSERT_TRUE(added.ok());
  EXPECT_EQ(*added, 3u);  // the cap holds three
  BufferPoolStats s = pool->Stats();
  EXPECT_EQ(s.prefaulted, 3u);
  EXPECT_EQ(s.free_bytes, 3u * 8192);
  std::vector<BlockBuffer> held;
  for (int i = 0; i < 3; ++i) held.push_back(pool->Take(7900 + i).value());
  s = pool->Stats();
  EXPECT_EQ(s.reused, 3u);
  EXPECT_EQ(s.fresh_bytes, 3u * 8192);  // nothing new since the prefault
  EXPECT_THAT(pool->Prefault(0, 1), StatusIs(StatusCode::kInvalidArgument));
}

TEST(BufferPool, PrefaultCarvesItsBuffersBackToBackOutOfOneHugePageSlab) {
  const size_t block = (3 << 20) + 5000;
  auto pool = BufferPool::Create(3 * ((3 << 20) + (64 << 10)));
  ASSERT_EQ(pool->Prefault(block, 5).value(), 3u);  // the cap holds three
  std::vector<BlockBuffer> held;
  std::vector<uintptr_t> at;
  for (int i = 0; i < 3; ++i) {
    held.push_back(pool->Take(block).value());
    at.push_back(Addr(held.back()));
  }
  std::sort(at.begin(), at.end());
  const size_t capacity = held[0].capacity();
  EXPECT_EQ(capacity, (3u << 20) + (64u << 10));
  EXPECT_EQ(at[0] % (2 << 20), 0u);  // the slab starts on a huge page
  EXPECT_EQ(at[1], at[0] + capacity);
  EXPECT_EQ(at[2], at[1] + capacity);
  BufferPoolStats s = pool->Stats();
  EXPECT_EQ(s.reused, 3u);
  EXPECT_EQ(s.fresh_bytes, size_t{10} << 20);  // 3 x 3.06 MiB, rounded to 2 MiB
  // A fourth buffer is new memory; back first, it fills the cap's room.
  held.push_back(pool->Take(block).value());
  held.pop_back();
  EXPECT_EQ(pool->Stats().free_buffers, 1u);
  // A slab's buffers come back all the same (they cannot be unmapped alone).
  for (int i = 0; i < 3; ++i) std::memset(held[i].data(), i, held[i].size());
  held.clear();
  s = pool->Stats();
  EXPECT_EQ(s.free_buffers, 4u);
  EXPECT_EQ(s.released, 0u);
  // And they are taken again.
  for (int i = 0; i < 4; ++i) held.push_back(pool->Take(block).value());
  EXPECT_EQ(pool->Stats().reused, 7u);
}

TEST(BufferPool, ABufferOutlivesEveryOtherHandleOnThePool) {
  SharedBlock kept;
  {
    auto pool = BufferPool::Create(1 << 20);
    BlockBuffer b = pool->Take(4096).value();
    std::memset(b.data(), 7, 4096);
    kept = std::make_shared<const BlockBuffer>(std::move(b));
  }
  // The pool lives on inside the buffer; dropping it frees both.
  EXPECT_EQ(kept->data()[4095], std::byte{7});
  kept.reset();
}

TEST(BufferPool, RecyclesUnderConcurrentTakesAndDrops) {
  auto pool = BufferPool::Create(64 << 20);
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        BlockBuffer b = pool->Take(20000 + 8 * t).value();
        std::memset(b.data(), t, b.size());
        ASSERT_EQ(b.data()[b.size() - 1], static_cast<std::byte>(t));
      }
    });
  }
  for (auto& th : threads) th.join();
  BufferPoolStats s = pool->Stats();
  EXPECT_EQ(s.takes, uint64_t{kThreads} * kRounds);
  // Each thread holds one buffer at a time: at most one new one each.
  EXPECT_LE(s.fresh_bytes, uint64_t{kThreads} * 20480);
  EXPECT_GE(s.reused, uint64_t{kThreads} * (kRounds - 1));
}

}  // namespace
}  // namespace kvtier::cache_internal
