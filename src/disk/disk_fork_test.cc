// fork() while the disk tier's threads use the index (index_fork_guard.h):
// the child of the fork opens the same index again and writes it.
//
// Before the guard, a forked child inherited SQLite's per-file records as
// a parent thread left them: a write transaction in progress made every
// BEGIN IMMEDIATE of the child wait its busy timeout on a lock no process
// held (kUnavailable), and a mutex held at that instant hung the child's
// open for ever (test_sglang_hybrid.py's forked child ran past 15 s in 26
// of 450 runs, three at once; 25 of them waited inside SQLite).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "disk/disk_index.h"
#include "disk/disk_test_util.h"
#include "disk/index_fork_guard.h"
#include "synth/block_generator.h"
#include "testing/forked_child.h"
#include "testing/status_matchers.h"

namespace kvtier::disk {
namespace {

using disk_test::TempDir;
using testing::ExitForkedChild;
using testing::IsOk;

// The child's exit codes.
constexpr int kOpenFailed = 2, kWriteFailed = 3, kReadFailed = 4;

IndexRow Row(uint64_t i, int64_t sig) {
  IndexRow r;
  r.key = TestBlockKey(i);
  r.sig_id = sig;
  r.size = 1000 + i;  // different bytes per row
  r.created_at_us = static_cast<int64_t>(i) + 1;
  r.last_access_us = static_cast<int64_t>(i) + 1;
  return r;
}

IndexOptions Options() {
  IndexOptions o;
  // A child that inherited a phantom lock (SQLite's in-memory lock records
  // of the parent) waits for it in vain and fails after this, well within
  // WaitChild's 60 s. 2 s was too short for the real contention with the
  // three busy threads of ChildrenForkedFromBusyThreadsEachWriteTheirRow
  // under TSan on a loaded 2-core machine: one child of twenty got
  // "database is locked" once (CI run at f967a99).
  o.busy_timeout_ms = 20'000;
  return o;
}

// In the child: opens the index at `path`, writes row `i` and reads it
// back; never returns.
[[noreturn]] void ChildWritesRow(const std::string& path, uint64_t i) {
  auto index = DiskIndex::Open(path, Options());
  if (!index.ok()) {
    std::fprintf(stderr, "child open: %s\n", index.status().ToString().c_str());
    ExitForkedChild(kOpenFailed);
  }
  auto sig = (*index)->SignatureId("fork");
  const IndexRow row = Row(i, sig.ok() ? *sig : 0);
  if (Status s = (*index)->Upsert(std::vector<IndexRow>{row}); !sig.ok() || !s.ok()) {
    std::fprintf(stderr, "child write: %s\n", s.ToString().c_str());
    ExitForkedChild(kWriteFailed);
  }
  auto back = (*index)->Lookup(row.key);
  ExitForkedChild(back.ok() && back->has_value() && (*back)->size == row.size ? 0 : kReadFailed);
}

// The child's exit code, or -1 if it ran past `seconds` (then killed).
int WaitChild(pid_t pid, int seconds) {
  for (int i = 0; i < seconds * 100; ++i) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// An index in a folder of its own, and the count of forks that went ahead
// with passes out before the test.
class IndexForkGuardTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = DiskIndex::Open(path_, Options());
    ASSERT_THAT(opened, IsOk());
    index_ = std::move(opened).value();
    auto sig = index_->SignatureId("fork");
    ASSERT_THAT(sig, IsOk());
    sig_ = *sig;
    forks_before_ = IndexForkGuard::ForksWithPassesOut();
  }

  TempDir dir_;
  const std::string path_ = dir_.Sub("index.sqlite");
  std::unique_ptr<DiskIndex> index_;
  int64_t sig_ = 0;
  uint64_t forks_before_ = 0;
};

TEST_F(IndexForkGuardTest, AForkWaitsForAWriteTransactionAndTheChildWritesTheIndex) {
  std::atomic<bool> in_transaction{false};
  std::atomic<bool> committed{false};
  std::thread holder([&] {
    auto tx = index_->BeginWrite();
    ASSERT_THAT(tx, IsOk());
    ASSERT_THAT(tx->Totals(), IsOk());  // the write lock is held from here
    in_transaction = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    committed = true;
    EXPECT_THAT(tx->Commit(), IsOk());
  });
  while (!in_transaction) std::this_thread::yield();
  const pid_t pid = fork();
  if (pid == 0) ChildWritesRow(path_, 7);
  ASSERT_GT(pid, 0);
  // The fork waited for the transaction to end.
  EXPECT_TRUE(committed.load());
  holder.join();
  EXPECT_EQ(WaitChild(pid, 60), 0);
  EXPECT_EQ(IndexForkGuard::ForksWithPassesOut(), forks_before_);
  EXPECT_EQ(IndexForkGuard::PassesOut(), 0u);
  // The child's row, in the parent, which writes on.
  auto row = index_->Lookup(TestBlockKey(7));
  ASSERT_THAT(row, IsOk());
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->size, 1007u);
  ASSERT_THAT(index_->Upsert(std::vector<IndexRow>{Row(8, sig_)}), IsOk());
}

// Threads read and write the index without a pause while the main thread
// forks twenty times; each child writes a row of its own.
TEST_F(IndexForkGuardTest, ChildrenForkedFromBusyThreadsEachWriteTheirRow) {
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (uint64_t t = 0; t < 3; ++t) {
    busy.emplace_back([&, t] {
      for (uint64_t n = 0; !stop; ++n) {
        const IndexRow row = Row(1000 + t * 1000000 + n % 64, sig_);
        EXPECT_THAT(index_->Upsert(std::vector<IndexRow>{row}), IsOk());
        EXPECT_THAT(index_->Lookup(row.key), IsOk());
      }
    });
  }
  constexpr uint64_t kChildren = 20;
  std::vector<int> codes;
  for (uint64_t c = 0; c < kChildren; ++c) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const pid_t pid = fork();
    if (pid == 0) ChildWritesRow(path_, 100 + c);
    ASSERT_GT(pid, 0);
    codes.push_back(WaitChild(pid, 60));
  }
  stop = true;
  for (std::thread& t : busy) t.join();
  EXPECT_EQ(codes, std::vector<int>(kChildren, 0));
  EXPECT_EQ(IndexForkGuard::ForksWithPassesOut(), forks_before_);
  for (uint64_t c = 0; c < kChildren; ++c) {
    auto row = index_->Lookup(TestBlockKey(100 + c));
    ASSERT_THAT(row, IsOk());
    ASSERT_TRUE(row->has_value()) << c;
    EXPECT_EQ((*row)->size, 1100 + c);
  }
}

// A thread that forks while it holds a lease itself: its own pass is not
// waited for (it could not end), and the fork goes ahead at once.
TEST_F(IndexForkGuardTest, TheForkingThreadsOwnTransactionIsNotWaitedFor) {
  {
    auto tx = index_->BeginWrite();
    ASSERT_THAT(tx, IsOk());
    EXPECT_EQ(IndexForkGuard::PassesOut(), 1u);
    const pid_t pid = fork();
    if (pid == 0) ExitForkedChild(IndexForkGuard::PassesOut() == 1 ? 0 : 1);
    ASSERT_GT(pid, 0);
    EXPECT_EQ(WaitChild(pid, 60), 0);
    EXPECT_THAT(tx->Commit(), IsOk());
  }
  EXPECT_EQ(IndexForkGuard::ForksWithPassesOut(), forks_before_);
  EXPECT_EQ(IndexForkGuard::PassesOut(), 0u);
}

}  // namespace
}  // namespace kvtier::disk
