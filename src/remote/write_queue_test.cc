#include "remote/write_queue.h"

#include <gtest/gtest.h>

#include <thread>

namespace kvtier::remote {
namespace {

BlockKey QueueKey(uint8_t i) {
  BlockKey k;
  k.bytes.fill(i);
  return k;
}

SharedBlock Block(size_t n) {
  return std::make_shared<const BlockBuffer>(std::move(BlockBuffer::Allocate(n)).value());
}

using R = WriteQueue::PushResult;

TEST(WriteQueue, BoundedInBytesNeverWaits) {
  WriteQueue q(1000, Env::Default());
  EXPECT_EQ(q.Push(QueueKey(1), Block(600)), R::kQueued);
  EXPECT_EQ(q.Push(QueueKey(2), Block(600)), R::kFull);
  EXPECT_EQ(q.Push(QueueKey(3), Block(400)), R::kQueued);
  EXPECT_EQ(q.bytes(), 1000u);
  EXPECT_EQ(q.blocks(), 2u);
}

TEST(WriteQueue, OversizedBlockOnlyIntoAnEmptyQueue) {
  WriteQueue q(1000, Env::Default());
  EXPECT_EQ(q.Push(QueueKey(1), Block(5000)), R::kQueued);
  EXPECT_EQ(q.Push(QueueKey(2), Block(1)), R::kFull);
  std::vector<QueuedBlock> b = q.PopBatch(10, 1);
  ASSERT_EQ(b.size(), 1u);
  q.Done(b);
  EXPECT_EQ(q.bytes(), 0u);
  EXPECT_EQ(q.Push(QueueKey(2), Block(5000)), R::kQueued);
}

TEST(WriteQueue, DuplicatesWhileQueuedOrInFlight) {
  WriteQueue q(1 << 20, Env::Default());
  EXPECT_EQ(q.Push(QueueKey(1), Block(10)), R::kQueued);
  EXPECT_EQ(q.Push(QueueKey(1), Block(10)), R::kDuplicate);
  std::vector<QueuedBlock> b = q.PopBatch(10, 1 << 20);
  EXPECT_EQ(q.Push(QueueKey(1), Block(10)), R::kDuplicate);  // in flight
  q.Done(b);
  EXPECT_EQ(q.Push(QueueKey(1), Block(10)), R::kQueued);
}

TEST(WriteQueue, BatchesRespectCountAndBytes) {
  WriteQueue q(1 << 20, Env::Default());
  for (uint8_t i = 0; i < 10; ++i) ASSERT_EQ(q.Push(QueueKey(i), Block(100)), R::kQueued);
  EXPECT_EQ(q.PopBatch(3, 1 << 20).size(), 3u);
  EXPECT_EQ(q.PopBatch(10, 250).size(), 2u);
  EXPECT_EQ(q.PopBatch(10, 1).size(), 1u);  // at least one
}

TEST(WriteQueue, WaitForCoversOnlyEarlierBlocks) {
  WriteQueue q(1 << 20, Env::Default());
  ASSERT_EQ(q.Push(QueueKey(1), Block(10)), R::kQueued);
  const uint64_t mark = q.NextSeq();
  EXPECT_FALSE(q.WaitFor(mark, 1000));  // not done yet: times out
  std::vector<QueuedBlock> b = q.PopBatch(10, 1 << 20);
  ASSERT_EQ(q.Push(QueueKey(2), Block(10)), R::kQueued);  // later: not waited for
  std::thread t([&] { q.Done(b); });
  EXPECT_TRUE(q.WaitFor(mark, 0));
  t.join();
  EXPECT_EQ(q.blocks(), 1u);
}

TEST(WriteQueue, CloseDrainsAbortDrops) {
  WriteQueue q(1 << 20, Env::Default());
  ASSERT_EQ(q.Push(QueueKey(1), Block(10)), R::kQueued);
  ASSERT_EQ(q.Push(QueueKey(2), Block(10)), R::kQueued);
  q.Close();
  EXPECT_EQ(q.Push(QueueKey(3), Block(10)), R::kClosed);
  EXPECT_EQ(q.PopBatch(1, 1 << 20).size(), 1u);  // still drains
  EXPECT_EQ(q.Abort().size(), 1u);
  EXPECT_TRUE(q.PopBatch(10, 1 << 20).empty());
  EXPECT_EQ(q.bytes(), 10u);  // the one in flight
}

}  // namespace
}  // namespace kvtier::remote
