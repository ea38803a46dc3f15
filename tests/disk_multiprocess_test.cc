// Several processes sharing one cache folder. Each child runs with its wall
// clock shifted by its own offset, so processes write different bytes
// (created_at) for the same key, as processes encoding in different seconds
// do: identical bytes would hide races between them.
//
// Four children store and load blocks over a shared key space with a small
// budget. While they run, the test freezes them all (SIGSTOP) whenever one of
// them stops itself at a point of progress, and measures the folder: it never
// holds more than the budget plus one commit batch per writer (a writer's
// published blocks are counted by the other processes once its batch's rows
// commit). No child ever reads wrong bytes or quarantines a file, and
// afterwards the folder is consistent.
//
// Two children with clocks 7 s apart store the same keys at once (as two
// `kvtier synth --cache D` runs), five times: every key is served, nothing
// is quarantined, one row per file (issue 12 item 1).
#include <errno.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "disk/disk_test_util.h"
#include "disk_child.h"
#include "disk_verify.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

using disk_child::ChildParams;
using disk_child::SpawnDiskChild;

// waitpid(pid, WUNTRACED), again when a signal interrupts it.
pid_t WaitRetrying(pid_t pid, int* status) {
  pid_t r;
  do {
    r = waitpid(pid, status, WUNTRACED);
  } while (r < 0 && errno == EINTR);
  return r;
}

// Kills (SIGKILL, which also ends a stopped process) and reaps every child
// whose exit code is still -1 when it goes.
class KillOnExit {
 public:
  KillOnExit(const std::vector<pid_t>& pids, std::vector<int>& codes)
      : pids_(pids), codes_(codes) {}
  ~KillOnExit() {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (codes_[i] >= 0 || pids_[i] <= 0) continue;
      kill(pids_[i], SIGKILL);
      disk_child::WaitChild(pids_[i]);
    }
  }
  KillOnExit(const KillOnExit&) = delete;
  KillOnExit& operator=(const KillOnExit&) = delete;

 private:
  const std::vector<pid_t>& pids_;
  std::vector<int>& codes_;
};

TEST(DiskMultiProcessTest, FourProcessesShareOneFolderWithinBudget) {
  disk_test::TempDir dir;
  const uint64_t block = disk_test::MakeTestBlock(0)->size();
  constexpr int kProcs = 4;
  constexpr uint32_t kWritersPerProc = 1;
  const uint64_t budget = 24 * block;
  const uint64_t batch = 3 * block;  // each writer commits up to 3 blocks at once
  std::vector<pid_t> pids;
  std::vector<int> codes(kProcs, -1);
  // A failed ASSERT returns while children still run: they are killed and
  // reaped before `dir` goes (else they would fail on a folder that is gone,
  // hiding the first failure).
  KillOnExit reaper(pids, codes);
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
    p.clock_offset_s = 7 * i;
    p.commit_batch_bytes = batch;
    pids.push_back(SpawnDiskChild(p));
    ASSERT_GT(pids.back(), 0);
  }
  const uint64_t bound = budget + kProcs * kWritersPerProc * batch;
  auto index_of = [&pids](pid_t pid) {
    return static_cast<int>(std::find(pids.begin(), pids.end(), pid) - pids.begin());
  };
  uint64_t samples = 0, max_seen = 0;
  int running = kProcs;
  while (running > 0) {
    // An event, not a timer: some child stopped itself at one of its pause
    // points (or exited). 4 children × 1500 operations with pauses every
    // 97–190 make at least 10 samples however fast the machine is.
    std::vector<bool> stopped(kProcs, false);
    int status = 0;
    const pid_t first = WaitRetrying(-1, &status);
    ASSERT_GT(first, 0) << "waitpid: " << errno;
    const int f = index_of(first);
    // A process that is not one of ours (a sanitizer's helper, say): not an
    // event of the test.
    if (f == kProcs) continue;
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
      if (WaitRetrying(pids[i], &status) == pids[i] && !WIFSTOPPED(status)) {
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
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/quarantine"));
}

TEST(DiskMultiProcessTest, TwoWritersOfTheSameKeysWithClocks7sApartLoseNothing) {
  constexpr uint64_t kKeys = 300;
  for (int round = 0; round < 5; ++round) {
    SCOPED_TRACE(round);
    disk_test::TempDir dir;
    std::vector<pid_t> pids;
    for (int i = 0; i < 2; ++i) {
      ChildParams p;
      p.mode = "synth";
      p.dir = dir.path();
      p.seed = static_cast<uint64_t>(100 * round + i);
      p.keys = kKeys;
      p.writer_threads = 2;
      p.clock_offset_s = 7 * i;
      pids.push_back(SpawnDiskChild(p));
      ASSERT_GT(pids.back(), 0);
    }
    // 0: each stored every key and loaded every one back, none quarantined.
    for (pid_t pid : pids) EXPECT_EQ(disk_child::WaitChild(pid), 0);
    EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/quarantine"));
    disk_test::FolderReport rep = disk_test::VerifyFolder(dir.path());
    EXPECT_EQ(rep.wrong, 0u);
    EXPECT_EQ(rep.quarantined, 0u);
    EXPECT_EQ(rep.temp_files, 0u);
    EXPECT_EQ(rep.block_files, kKeys);
    EXPECT_EQ(rep.rows, kKeys);
    EXPECT_EQ(rep.served.size(), kKeys);
  }
}

}  // namespace
}  // namespace kvtier
