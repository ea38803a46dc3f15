// Several processes sharing one cache folder: four children store and load
// blocks over a shared key space with a small budget. While they run, the
// test freezes them all (SIGSTOP) whenever one of them stops itself at a
// point of progress, and measures the folder: it never holds more than the
// budget plus one block per writer. No child ever reads wrong bytes, and
// afterwards the folder is consistent.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

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
    p.pause_every = 97 + 31 * static_cast<uint64_t>(i);  // out of step with each other
    pids.push_back(SpawnDiskChild(p));
    ASSERT_GT(pids.back(), 0);
  }
  const uint64_t bound = budget + kProcs * kWritersPerProc * block;
  auto index_of = [&pids](pid_t pid) {
    return static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
  };
  std::vector<int> codes(kProcs, -1);
  uint64_t samples = 0, max_seen = 0;
  int running = kProcs;
  while (running > 0) {
    // An event, not a timer: some child stopped itself at one of its pause
    // points (or exited). 4 children × 1500 operations with pauses every
    // 97–190 make at least 10 samples however fast the machine is.
    std::vector<bool> stopped(kProcs, false);
    int status = 0;
    const pid_t first = waitpid(-1, &status, WUNTRACED);
    ASSERT_GT(first, 0);
    const int f = index_of(first);
    ASSERT_LT(f, kProcs);
    if (WIFSTOPPED(status)) {
      stopped[f] = true;
    } else {
      codes[f] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    // Freeze the others and wait until each reports that it stopped (or
    // exited): then the folder is one instant's state.
    for (int i = 0; i < kProcs; ++i) {
      if (codes[i] >= 0 || stopped[i]) continue;
      kill(pids[i], SIGSTOP);
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
  EXPECT_GE(samples, 10u);
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
