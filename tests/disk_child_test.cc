// The child-process side of the disk-tier crash and multi-process tests
// (see tests/disk_child.h), plus SpawnDiskChild/WaitChild.
#include "disk_child.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"

namespace kvtier::disk_child {
namespace {

const char* Get(const char* name, const char* fallback = "") {
  const char* v = getenv(name);
  return v != nullptr ? v : fallback;
}

uint64_t GetU64(const char* name, uint64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr ? std::strtoull(v, nullptr, 10) : fallback;
}

int64_t GetI64(const char* name, int64_t fallback) {
  const char* v = getenv(name);
  return v != nullptr ? std::strtoll(v, nullptr, 10) : fallback;
}

// The child's Env: the real one with the wall clock moved by
// KVTIER_DISK_CLOCK_OFFSET_S.
disk_test::ControlledEnv* ChildEnv() {
  static disk_test::ControlledEnv* env = [] {
    auto* e = new disk_test::ControlledEnv(Env::Default());
    e->AdvanceUnix(GetI64("KVTIER_DISK_CLOCK_OFFSET_S", 0) * 1'000'000);
    return e;
  }();
  return env;
}

// The block of `key`, encoded now by the child's clock.
SharedBlock ChildBlock(const BlockKey& key) {
  BlockKey zero{};
  auto b = MakeBlockFile(disk_test::TinyLayout(), key, zero, zero,
                         ChildEnv()->NowUnixMicros() / 1'000'000);
  if (!b.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(b).value());
}

DiskTierOptions ChildOptions() {
  DiskTierOptions o = disk_test::TestOptions(Get("KVTIER_DISK_DIR"));
  o.max_bytes = GetU64("KVTIER_DISK_MAX_BYTES", o.max_bytes);
  if (o.max_bytes == 0) o.max_bytes = DiskTierOptions().max_bytes;
  o.durability = GetU64("KVTIER_DISK_FSYNC", 0) ? Durability::kFsync : Durability::kChecksum;
  o.writer_threads = static_cast<uint32_t>(GetU64("KVTIER_DISK_WRITERS", 1));
  o.commit_batch_bytes = GetU64("KVTIER_DISK_BATCH_BYTES", 0);
  o.queue_max_bytes = 64 << 20;
  o.reconcile_on_open = true;
  return o;
}

// The child's end of its ProgressPipe (KVTIER_DISK_PROGRESS_FD), if any.
class ProgressReporter {
 public:
  ProgressReporter() {
    const char* fd = getenv("KVTIER_DISK_PROGRESS_FD");
    if (fd == nullptr) return;
    fd_ = static_cast<int>(std::strtol(fd, nullptr, 10));
    // A parent that stopped listening must not kill the child by SIGPIPE.
    signal(SIGPIPE, SIG_IGN);
  }
  bool enabled() const { return fd_ >= 0; }

  void Report(uint64_t n) {
    if (fd_ < 0 || n == last_) return;
    last_ = n;
    const std::string line = std::to_string(n) + "\n";
    size_t done = 0;
    while (done < line.size()) {
      const ssize_t w = write(fd_, line.data() + done, line.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        fd_ = -1;  // the parent is gone: stop reporting
        return;
      }
      done += static_cast<size_t>(w);
    }
  }

 private:
  int fd_ = -1;
  uint64_t last_ = 0;
};

int OpenFailed(const Status& s) {
  std::fprintf(stderr, "child %d: open: %s\n", getpid(), s.ToString().c_str());
  return kExitSetup;
}

bool LoadAndCheck(DiskTier* tier, const BlockKey& key, bool* wrong) {
  std::vector<std::byte> buf(16384);
  auto r = tier->Load(key, buf);
  if (!r.ok() || !r->has_value()) return false;
  if (!CheckBlockFile(std::span(buf).first(**r), disk_test::TinyLayout(), key).ok()) {
    *wrong = true;
    std::fprintf(stderr, "child %d: wrong bytes for %s\n", getpid(), key.Hex().c_str());
  }
  return true;
}

int RunStoreLoop() {
  auto tier = DiskTier::Open(ChildOptions(), ChildEnv());
  if (!tier.ok()) return OpenFailed(tier.status());
  const uint64_t base = GetU64("KVTIER_DISK_SEED", 0) * 1'000'000;
  ProgressReporter progress;
  bool wrong = false;
  for (uint64_t i = 0;; ++i) {
    BlockKey key = TestBlockKey(base + i);
    (void)(*tier)->Store(key, disk_test::MakeTestBlock(disk_test::TinyLayout(), key));
    if (i % 7 == 3) LoadAndCheck(tier->get(), TestBlockKey(base + i / 2), &wrong);
    if (i % 50 == 49) (void)(*tier)->Erase(TestBlockKey(base + i - 10));
    if (wrong) return kExitWrongBytes;
    if (progress.enabled()) progress.Report((*tier)->Stats().saves_persisted);
  }
}

int RunKillPoint() {
  DiskTierOptions o = ChildOptions();
  o.reconcile_on_open = false;
  const int point = static_cast<int>(GetU64("KVTIER_DISK_KILL_POINT", 0));
  const int kill_at = static_cast<int>(GetU64("KVTIER_DISK_KILL_AT", 1));
  auto arrivals = std::make_shared<std::atomic<int>>(0);
  disk::KillHook hook = [point, kill_at, arrivals](DiskKillPoint p) {
    if (static_cast<int>(p) != point) return;
    if (arrivals->fetch_add(1) + 1 == kill_at) kill(getpid(), SIGKILL);
  };
  auto tier = disk::OpenWithKillHook(o, ChildEnv(), std::move(hook));
  if (!tier.ok()) return OpenFailed(tier.status());
  const uint64_t base = GetU64("KVTIER_DISK_SEED", 0) * 1'000'000;
  for (uint64_t i = 0; i < 1000; ++i) {
    BlockKey key = TestBlockKey(base + i);
    if (!(*tier)->Store(key, disk_test::MakeTestBlock(disk_test::TinyLayout(), key)).ok()) {
      return kExitStoreError;
    }
    (void)(*tier)->Flush();
  }
  return 0;  // the kill point was never reached
}

int RunShare() {
  auto tier = DiskTier::Open(ChildOptions(), ChildEnv());
  if (!tier.ok()) return OpenFailed(tier.status());
  std::mt19937_64 rng(GetU64("KVTIER_DISK_SEED", 1));
  const uint64_t keys = GetU64("KVTIER_DISK_KEYS", 100);
  const uint64_t ops = GetU64("KVTIER_DISK_OPS", 100);
  const uint64_t pause_every = GetU64("KVTIER_DISK_PAUSE_EVERY", 0);
  bool wrong = false;
  for (uint64_t op = 0; op < ops && !wrong; ++op) {
    BlockKey key = TestBlockKey(rng() % keys);
    if (rng() % 2 == 0) {
      Status s = (*tier)->Store(key, ChildBlock(key));
      if (!s.ok()) {
        std::fprintf(stderr, "child %d: store: %s\n", getpid(), s.ToString().c_str());
        return kExitStoreError;
      }
    } else {
      LoadAndCheck(tier->get(), key, &wrong);
    }
    if (pause_every != 0 && (op + 1) % pause_every == 0) raise(SIGSTOP);
  }
  (void)(*tier)->Close();
  if (wrong) return kExitWrongBytes;
  return (*tier)->Stats().quarantined > 0 ? kExitQuarantined : 0;
}

int RunSynth() {
  DiskTierOptions o = ChildOptions();
  o.reconcile_on_open = false;  // as `kvtier synth --cache` by default
  auto tier = DiskTier::Open(o, ChildEnv());
  if (!tier.ok()) return OpenFailed(tier.status());
  const uint64_t keys = GetU64("KVTIER_DISK_KEYS", 100);
  std::vector<uint64_t> order(keys);
  for (uint64_t i = 0; i < keys; ++i) order[i] = i;
  std::mt19937_64 rng(GetU64("KVTIER_DISK_SEED", 1));
  std::shuffle(order.begin(), order.end(), rng);
  for (uint64_t i : order) {
    Status s = (*tier)->Store(TestBlockKey(i), ChildBlock(TestBlockKey(i)));
    if (!s.ok()) {
      std::fprintf(stderr, "child %d: store: %s\n", getpid(), s.ToString().c_str());
      return kExitStoreError;
    }
  }
  if (!(*tier)->Flush().ok()) return kExitStoreError;
  bool wrong = false;
  uint64_t missing = 0;
  for (uint64_t i = 0; i < keys; ++i) {
    if (!LoadAndCheck(tier->get(), TestBlockKey(i), &wrong)) ++missing;
  }
  const uint64_t quarantined = (*tier)->Stats().quarantined;
  (void)(*tier)->Close();
  if (wrong) return kExitWrongBytes;
  if (quarantined > 0) return kExitQuarantined;
  if (missing > 0) {
    std::fprintf(stderr, "child %d: %llu of %llu keys missing\n", getpid(),
                 static_cast<unsigned long long>(missing), static_cast<unsigned long long>(keys));
    return kExitMissing;
  }
  return 0;
}

// Runs the child mode named by KVTIER_DISK_CHILD, before gtest's main.
struct ChildDispatcher {
  ChildDispatcher() {
    const char* mode = getenv("KVTIER_DISK_CHILD");
    if (mode == nullptr) return;
    int rc = kExitSetup;
    if (std::strcmp(mode, "store_loop") == 0) rc = RunStoreLoop();
    if (std::strcmp(mode, "kill_point") == 0) rc = RunKillPoint();
    if (std::strcmp(mode, "share") == 0) rc = RunShare();
    if (std::strcmp(mode, "synth") == 0) rc = RunSynth();
    _exit(rc);
  }
} const g_child_dispatcher;

}  // namespace

ProgressPipe::~ProgressPipe() { Reset(-1); }

void ProgressPipe::Reset(int fd) {
  if (fd_ >= 0) close(fd_);
  fd_ = fd;
  last_ = 0;
  partial_.clear();
}

bool ProgressPipe::ReadSome() {
  if (fd_ < 0) return false;
  char buf[4096];
  ssize_t n;
  do {
    n = read(fd_, buf, sizeof(buf));
  } while (n < 0 && errno == EINTR);
  if (n <= 0) {
    close(fd_);
    fd_ = -1;
    return false;
  }
  partial_.append(buf, static_cast<size_t>(n));
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(partial_.data() + start, partial_.data() + nl, v);
    if (ec == std::errc() && end == partial_.data() + nl) last_ = std::max(last_, v);
  }
  partial_.erase(0, start);
  return true;
}

bool ProgressPipe::WaitFor(uint64_t n) {
  while (last_ < n) {
    if (!ReadSome()) return false;
  }
  return true;
}

pid_t SpawnDiskChild(const ChildParams& p, ProgressPipe* progress) {
  int fds[2] = {-1, -1};
  // Close-on-exec: only the child this pipe is for gets the write end
  // (below), no later child inherits either end.
  if (progress != nullptr && pipe2(fds, O_CLOEXEC) != 0) return -1;
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "KVTIER_DISK_", 12) != 0) env.emplace_back(*e);
  }
  env.push_back("KVTIER_DISK_CHILD=" + p.mode);
  env.push_back("KVTIER_DISK_DIR=" + p.dir);
  env.push_back("KVTIER_DISK_SEED=" + std::to_string(p.seed));
  env.push_back("KVTIER_DISK_MAX_BYTES=" + std::to_string(p.max_bytes));
  env.push_back("KVTIER_DISK_FSYNC=" + std::to_string(p.fsync ? 1 : 0));
  env.push_back("KVTIER_DISK_KILL_POINT=" + std::to_string(p.kill_point));
  env.push_back("KVTIER_DISK_KILL_AT=" + std::to_string(p.kill_at));
  env.push_back("KVTIER_DISK_OPS=" + std::to_string(p.ops));
  env.push_back("KVTIER_DISK_KEYS=" + std::to_string(p.keys));
  env.push_back("KVTIER_DISK_WRITERS=" + std::to_string(p.writer_threads));
  env.push_back("KVTIER_DISK_PAUSE_EVERY=" + std::to_string(p.pause_every));
  if (progress != nullptr) env.push_back("KVTIER_DISK_PROGRESS_FD=" + std::to_string(fds[1]));
  env.push_back("KVTIER_DISK_CLOCK_OFFSET_S=" + std::to_string(p.clock_offset_s));
  env.push_back("KVTIER_DISK_BATCH_BYTES=" + std::to_string(p.commit_batch_bytes));
  std::vector<char*> envp;
  for (std::string& s : env) envp.push_back(s.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  char* argv[] = {exe, nullptr};
  pid_t pid = fork();
  if (pid == 0) {
    if (progress != nullptr && fcntl(fds[1], F_SETFD, 0) != 0) _exit(127);
    execve(exe, argv, envp.data());
    _exit(127);
  }
  if (progress != nullptr) {
    close(fds[1]);  // EOF on the read end once the child is gone
    if (pid > 0) {
      progress->Reset(fds[0]);
    } else {
      close(fds[0]);
    }
  }
  return pid;
}

int WaitChild(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

}  // namespace kvtier::disk_child
