// VerifyGroup and VerifyPool: every task runs exactly once, Wait() returns
// only after all of them (their writes visible), the caller runs what no
// worker took (no pool, a closed pool), and a worker does run tasks off the
// caller's thread.
#include "remote/verify_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "kvtier/env.h"

namespace kvtier::remote {
namespace {

TEST(VerifyGroup, WithoutAPoolWaitRunsEveryTaskOnTheCaller) {
  VerifyGroup g;
  std::vector<std::thread::id> ran;
  for (int i = 0; i < 5; ++i) g.Add([&] { ran.push_back(std::this_thread::get_id()); });
  g.Wait();
  ASSERT_EQ(ran.size(), 5u);
  for (const std::thread::id& id : ran) EXPECT_EQ(id, std::this_thread::get_id());
  EXPECT_FALSE(g.RunOne());  // nothing left
  g.Wait();                  // and a second Wait() has nothing to do
  EXPECT_EQ(ran.size(), 5u);
}

TEST(VerifyPool, EveryTaskRunsOnceAndIsDoneWhenWaitReturns) {
  VerifyPool pool(3, Env::Default());
  for (int round = 0; round < 20; ++round) {
    auto g = std::make_shared<VerifyGroup>();
    std::vector<int> out(200, 0);  // one slot per task: a task run twice shows as 2
    for (size_t i = 0; i < out.size(); ++i) {
      g->Add([&out, i] { out[i] += static_cast<int>(i) + 1; });
      pool.Post(g);
    }
    g->Wait();
    for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], static_cast<int>(i) + 1) << i;
  }
}

TEST(VerifyPool, AClosedPoolLeavesTheTasksToWait) {
  VerifyPool pool(2, Env::Default());
  pool.Close();
  pool.Close();  // idempotent
  auto g = std::make_shared<VerifyGroup>();
  std::vector<std::thread::id> ran;
  for (int i = 0; i < 4; ++i) {
    g->Add([&] { ran.push_back(std::this_thread::get_id()); });
    pool.Post(g);
  }
  g->Wait();
  ASSERT_EQ(ran.size(), 4u);
  for (const std::thread::id& id : ran) EXPECT_EQ(id, std::this_thread::get_id());
}

TEST(VerifyPool, AWorkerRunsATaskWhileTheCallerGoesOn) {
  VerifyPool pool(1, Env::Default());
  auto g = std::make_shared<VerifyGroup>();
  std::atomic<bool> started{false}, release{false};
  std::thread::id ran_on;
  g->Add([&] {
    ran_on = std::this_thread::get_id();
    started = true;
    while (!release) std::this_thread::yield();
  });
  pool.Post(g);
  // The caller is free while the worker holds the task (a caller that ran it
  // itself would spin here for ever: the test's own timeout).
  while (!started) std::this_thread::yield();
  EXPECT_FALSE(g->RunOne());  // taken: nothing for the caller
  release = true;
  g->Wait();
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

TEST(VerifyPool, DefaultThreadsIsOneToFour) {
  const uint32_t n = VerifyPool::DefaultThreads();
  EXPECT_GE(n, 1u);
  EXPECT_LE(n, 4u);
}

}  // namespace
}  // namespace kvtier::remote
