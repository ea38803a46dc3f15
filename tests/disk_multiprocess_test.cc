// Several processes sharing one cache folder: four children store and load
// blocks over a shared key space with a small budget. While they run, the
// test freezes them (SIGSTOP) at random moments and measures the folder: it
// never holds more than the budget plus one block per writer. No child ever
// reads wrong bytes, and afterwards the folder is consistent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "disk/disk_test_util.h"
#include "disk_child.h"
#include "disk_verify.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

using disk_child::ChildParams;
using disk_child::SpawnDiskChild;

TEST(DiskMultiProcessTest, FourProcessesShareOneFolderWithinBudget) {
  disk_test::TempDir dir;
  const uint64_t block = disk_test::MakeTestBlock(0)->size();
  constexpr int kProcs = 4;
  constexpr uint32_t kWritersPerProc = 1;
  const uint64_t budget = 24 * block;
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcs; ++i) {
    ChildParams p;
    p.mode = "share";
    p.dir = dir.path();
    p.seed = 1000 + static_cast<uint64_t>(i);
    p.max_bytes = budget;
    p.ops = 1500;
    p.keys = 80;
    p.writer_threads = kWritersPerProc;
    pids.push_back(SpawnDiskChild(p));
    ASSERT_GT(pids.back(), 0);
  }
  const uint64_t bound = budget + kProcs * kWritersPerProc * block;
  std::mt19937_64 rng(5);
  std::vector<int> codes(kProcs, -1);
  uint64_t samples = 0, max_seen = 0;
  int running = kProcs;
  while (running > 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5 + rng() % 20));
    for (int i = 0; i < kProcs; ++i) {
      if (codes[i] < 0) kill(pids[i], SIGSTOP);
    }
    // Wait until each live child reports that it stopped (or exited): then
    // the folder is one instant's state.
    for (int i = 0; i < kProcs; ++i) {
      if (codes[i] >= 0) continue;
      int status = 0;
      if (waitpid(pids[i], &status, WUNTRACED) == pids[i] && !WIFSTOPPED(status)) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
    }
    uint64_t bytes = disk_test::BlockFolderBytes(dir.path());
    max_seen = std::max(max_seen, bytes);
    ++samples;
    EXPECT_LE(bytes, bound) << "sample " << samples;
    running = 0;
    for (int i = 0; i < kProcs; ++i) {
      if (codes[i] >= 0) continue;
      kill(pids[i], SIGCONT);
      ++running;
    }
  }
  for (int i = 0; i < kProcs; ++i) EXPECT_EQ(codes[i], 0) << "child " << i;
  EXPECT_GE(samples, 5u);
  EXPECT_GT(max_seen, budget / 2);  // the folder did fill up

  DiskTierOptions o = disk_test::TestOptions(dir.path());
  o.max_bytes = budget;
  disk_test::FolderReport rep = disk_test::VerifyFolder(dir.path(), &o);
  EXPECT_EQ(rep.wrong, 0u);
  EXPECT_EQ(rep.temp_files, 0u);
  EXPECT_EQ(rep.quarantined, 0u);
  EXPECT_EQ(rep.rows, rep.block_files);
  EXPECT_EQ(rep.served.size(), rep.block_files);
  EXPECT_LE(disk_test::BlockFolderBytes(dir.path()), budget);
}

}  // namespace
}  // namespace kvtier
