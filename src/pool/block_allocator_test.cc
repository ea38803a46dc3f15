#include "pool/block_allocator.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>

#include "kvtier/slot_memory.h"
#include "pool/slot_arena.h"
#include "testing/status_matchers.h"

namespace kvtier::pool_internal {
namespace {

using ::kvtier::testing::IsOk;
using ::kvtier::testing::StatusIs;

TEST(BlockAllocatorTest, HandsOutLowestIdsFirstAndCountsFree) {
  BlockAllocator a(4);
  EXPECT_EQ(a.FreeCount(), 4u);
  for (uint32_t want = 0; want < 4; ++want) {
    auto got = a.Allocate();
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->slot, want);
    EXPECT_FALSE(got->was_cached);
    EXPECT_EQ(a.RefCount(want), 1u);
  }
  EXPECT_EQ(a.FreeCount(), 0u);
  EXPECT_FALSE(a.Allocate().has_value());
}

TEST(BlockAllocatorTest, RefcountsNeverGoNegative) {
  BlockAllocator a(2);
  auto s = a.Allocate();
  ASSERT_TRUE(s.has_value());
  ASSERT_THAT(a.AddRef(s->slot), IsOk());
  EXPECT_EQ(a.RefCount(s->slot), 2u);
  auto left = a.Free(s->slot);
  ASSERT_THAT(left, IsOk());
  EXPECT_EQ(*left, 1u);
  EXPECT_EQ(a.FreeCount(), 1u);  // still held once
  left = a.Free(s->slot);
  ASSERT_THAT(left, IsOk());
  EXPECT_EQ(*left, 0u);
  EXPECT_EQ(a.FreeCount(), 2u);
  EXPECT_THAT(a.Free(s->slot), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_EQ(a.RefCount(s->slot), 0u);
  EXPECT_EQ(a.FreeCount(), 2u);
  EXPECT_THAT(a.AddRef(s->slot), StatusIs(StatusCode::kFailedPrecondition));
  EXPECT_THAT(a.Free(7), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(a.AddRef(7), StatusIs(StatusCode::kInvalidArgument));
  EXPECT_EQ(a.RefCount(7), 0u);
}

TEST(BlockAllocatorTest, FreedSlotIsReusedFirst) {
  BlockAllocator a(4);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(a.Allocate().has_value());
  ASSERT_THAT(a.Free(1), IsOk());
  auto got = a.Allocate();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->slot, 1u);
}

TEST(BlockAllocatorTest, CachedSlotsAreReclaimedLastInLruOrder) {
  BlockAllocator a(4);
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(a.Allocate().has_value());
  a.SetCached(2, true);
  a.SetCached(0, true);
  ASSERT_THAT(a.Free(2), IsOk());  // cached, freed first
  ASSERT_THAT(a.Free(0), IsOk());  // cached, freed second
  ASSERT_THAT(a.Free(3), IsOk());  // plain
  EXPECT_EQ(a.FreeCount(), 3u);
  EXPECT_EQ(a.CachedFreeCount(), 2u);

  auto first = a.Allocate();
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->slot, 3u);
  EXPECT_FALSE(first->was_cached);
  auto second = a.Allocate();
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->slot, 2u);  // least recently freed cached slot
  EXPECT_TRUE(second->was_cached);
  EXPECT_FALSE(a.IsCached(2));
  EXPECT_EQ(a.CachedFreeCount(), 1u);
}

TEST(BlockAllocatorTest, ReviveTakesACachedSlotBack) {
  BlockAllocator a(2);
  ASSERT_TRUE(a.Allocate().has_value());
  a.SetCached(0, true);
  EXPECT_THAT(a.Revive(0), StatusIs(StatusCode::kFailedPrecondition));  // in use
  ASSERT_THAT(a.Free(0), IsOk());
  ASSERT_THAT(a.Revive(0), IsOk());
  EXPECT_EQ(a.RefCount(0), 1u);
  EXPECT_EQ(a.FreeCount(), 1u);
  EXPECT_EQ(a.CachedFreeCount(), 0u);
  EXPECT_THAT(a.Revive(1), StatusIs(StatusCode::kFailedPrecondition));  // plain
}

TEST(BlockAllocatorTest, UncachingAFreeSlotMakesItPlain) {
  BlockAllocator a(2);
  ASSERT_TRUE(a.Allocate().has_value());
  ASSERT_TRUE(a.Allocate().has_value());
  a.SetCached(1, true);
  ASSERT_THAT(a.Free(1), IsOk());
  EXPECT_EQ(a.CachedFreeCount(), 1u);
  a.SetCached(1, false);
  EXPECT_EQ(a.CachedFreeCount(), 0u);
  EXPECT_EQ(a.FreeCount(), 1u);
  auto got = a.Allocate();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->slot, 1u);
  EXPECT_FALSE(got->was_cached);
}

// Counts allocations and can refuse them.
class CountingMemory final : public SlotMemory {
 public:
  explicit CountingMemory(int allowed) : allowed_(allowed) {}
  MemoryKind kind() const override { return MemoryKind::kHost; }
  Result<std::byte*> Allocate(size_t bytes) override {
    if (allowed_ == 0) return Status::ResourceExhausted("no more chunks");
    --allowed_;
    ++live_;
    return inner_->Allocate(bytes);
  }
  void Deallocate(std::byte* p, size_t bytes) override {
    --live_;
    inner_->Deallocate(p, bytes);
  }
  void Copy(CopyDirection dir, const Copy2D& c) override { inner_->Copy(dir, c); }
  int live() const { return live_; }

 private:
  std::shared_ptr<SlotMemory> inner_ = NewHostSlotMemory();
  int allowed_;
  std::atomic<int> live_{0};
};

TEST(SlotArenaTest, GrowsLazilyInChunks) {
  auto mem = std::make_shared<CountingMemory>(2);
  {
    SlotArena arena(mem, 1000, 10, 4);
    EXPECT_EQ(arena.slot_stride(), 1024u);
    EXPECT_EQ(arena.capacity_bytes(), 0u);
    EXPECT_FALSE(arena.IsBacked(0));
    ASSERT_THAT(arena.Ensure(1), IsOk());
    EXPECT_EQ(mem->live(), 1);
    EXPECT_EQ(arena.capacity_bytes(), 4u * 1024);
    EXPECT_TRUE(arena.IsBacked(0));
    EXPECT_FALSE(arena.IsBacked(4));
    EXPECT_EQ(arena.Address(1) - arena.Address(0), 1024);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(arena.Address(3)) % 256, 0u);
    // The last chunk holds the 2 remaining slots only.
    ASSERT_THAT(arena.Ensure(9), IsOk());
    EXPECT_EQ(arena.capacity_bytes(), 6u * 1024);
    // Allocation failures and bad ids are statuses.
    EXPECT_THAT(arena.Ensure(5), StatusIs(StatusCode::kResourceExhausted));
    EXPECT_FALSE(arena.IsBacked(5));
    EXPECT_THAT(arena.Ensure(10), StatusIs(StatusCode::kInvalidArgument));
  }
  EXPECT_EQ(mem->live(), 0);
}

TEST(HostSlotMemoryTest, CopiesRowsWithPitches) {
  auto mem = NewHostSlotMemory();
  EXPECT_EQ(mem->kind(), MemoryKind::kHost);
  std::byte src[12], dst[12] = {};
  for (int i = 0; i < 12; ++i) src[i] = std::byte(i + 1);
  // 3 rows of 2 bytes, source pitch 4, destination pitch 3.
  mem->Copy(CopyDirection::kHostToSlot, Copy2D{dst, 3, src, 4, 2, 3});
  const uint8_t want[12] = {1, 2, 0, 5, 6, 0, 9, 10, 0, 0, 0, 0};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(static_cast<uint8_t>(dst[i]), want[i]) << i;
}

TEST(SlotArenaTest, AllocateAllBacksEverySlotOnce) {
  auto mem = std::make_shared<CountingMemory>(3);
  {
    SlotArena arena(mem, 1000, 10, 4);
    ASSERT_THAT(arena.Ensure(0), IsOk());
    ASSERT_THAT(arena.AllocateAll(), IsOk());
    EXPECT_EQ(mem->live(), 3);
    EXPECT_EQ(arena.capacity_bytes(), 10u * 1024);
    for (uint32_t s = 0; s < 10; ++s) EXPECT_TRUE(arena.IsBacked(s)) << s;
    // Fresh chunks come back written (faulted in): zeros.
    EXPECT_EQ(arena.Address(9)[1023], std::byte{0});
    ASSERT_THAT(arena.AllocateAll(), IsOk());  // nothing left to do
    EXPECT_EQ(mem->live(), 3);
  }
  EXPECT_EQ(mem->live(), 0);
  auto short_of_memory = std::make_shared<CountingMemory>(1);
  SlotArena arena(short_of_memory, 1000, 10, 4);
  EXPECT_THAT(arena.AllocateAll(), StatusIs(StatusCode::kResourceExhausted));
}

TEST(HostSlotMemoryTest, LargeChunksStartOnAHugePage) {
  auto mem = NewHostSlotMemory();
  const size_t bytes = (size_t{4} << 20) + 256;
  Result<std::byte*> p = mem->Allocate(bytes);
  ASSERT_THAT(p, IsOk());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*p) % (size_t{2} << 20), 0u);
  (*p)[0] = std::byte{1};
  (*p)[bytes - 1] = std::byte{2};
  mem->Deallocate(*p, bytes);
}

}  // namespace
}  // namespace kvtier::pool_internal
