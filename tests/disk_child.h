// Child processes for the disk-tier crash and multi-process tests.
//
// The integration test binary doubles as the child: SpawnDiskChild() runs
// /proc/self/exe with KVTIER_DISK_CHILD=<mode> and parameters in the
// environment, and tests/disk_child_test.cc intercepts that at static
// initialisation (before gtest starts), runs the mode and _exit()s with its
// result. Modes:
//   store_loop  stores blocks TestBlockKey(seed·10^6 + i), i = 0, 1, ...,
//               loading back earlier ones, until killed;
//   kill_point  stores blocks one at a time (each followed by Flush) and
//               SIGKILLs itself at the kill_at-th arrival at kill_point;
//   share       `ops` random stores and verified loads over `keys` shared
//               keys, then exits; with pause_every, it stops itself
//               (SIGSTOP) after every pause_every operations, so that the
//               parent can freeze everyone at points of progress.
// Every block's content is a pure function of its key (block_generator.h),
// so the parent can verify anything it finds. A child spawned with a
// ProgressPipe reports its progress on it, so that the parent acts on what
// the child has done rather than on how long it has run. Exit codes: 0 success,
// kExitWrongBytes if a load returned bytes that are not the block's,
// kExitSetup if the tier could not be opened.
#ifndef KVTIER_TESTS_DISK_CHILD_H_
#define KVTIER_TESTS_DISK_CHILD_H_

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace kvtier::disk_child {

inline constexpr int kExitWrongBytes = 3;
inline constexpr int kExitSetup = 4;
inline constexpr int kExitStoreError = 5;

struct ChildParams {
  std::string mode;        // store_loop | kill_point | share
  std::string dir;         // cache folder
  uint64_t seed = 0;       // key space / randomness
  uint64_t max_bytes = 0;  // DiskTierOptions::max_bytes (0 = default)
  bool fsync = false;      // Durability::kFsync
  int kill_point = -1;     // DiskKillPoint as int (kill_point mode)
  int kill_at = 1;         // ... at its kill_at-th arrival
  uint64_t ops = 0;        // share: operations
  uint64_t keys = 0;       // share: size of the shared key space
  uint32_t writer_threads = 1;
  uint64_t pause_every = 0;  // share: SIGSTOP itself after each so many ops (0 = never)
};

// The read end of the pipe a child reports its progress on: one decimal
// number a line, never decreasing. store_loop reports the blocks it has
// persisted (renamed into place and indexed: DiskTierStats::saves_persisted).
// Owns the descriptor; the parent only.
class ProgressPipe {
 public:
  ProgressPipe() = default;
  ~ProgressPipe();
  ProgressPipe(const ProgressPipe&) = delete;
  ProgressPipe& operator=(const ProgressPipe&) = delete;

  // Takes ownership of `fd` (closing the one held before).
  void Reset(int fd);
  // The latest number the child reported (0 before the first).
  uint64_t last() const { return last_; }
  // Reads until the child has reported at least `n`. False if the pipe
  // closed first (the child is gone).
  bool WaitFor(uint64_t n);

 private:
  // One read(2), blocking until something is there; parses whole lines.
  // False, and the pipe closed, at end of file or on an error.
  bool ReadSome();

  int fd_ = -1;
  uint64_t last_ = 0;
  std::string partial_;  // an incomplete line
};

// Starts a child running `p`; returns its pid (or -1). With `progress`, the
// child reports its progress on a pipe whose read end goes there.
pid_t SpawnDiskChild(const ChildParams& p, ProgressPipe* progress = nullptr);

// Waits for `pid`; returns its exit code, or 128 + signal if it was killed.
int WaitChild(pid_t pid);

}  // namespace kvtier::disk_child

#endif  // KVTIER_TESTS_DISK_CHILD_H_
