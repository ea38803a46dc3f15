// The Env contract (include/kvtier/env.h), one suite run against every Env:
// the POSIX Env, the in-memory Env, and the fault-injecting Env (with no
// faults set) over each. What one Env does here, all do: status codes,
// errnos, messages naming the path, short reads only at end of file,
// atomic replacement, folder semantics, clocks and threads. What only one
// of them has (O_DIRECT, real symlinks and FIFOs, power-loss modelling,
// injected faults) is tested next to it.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/env.h"
#include "testing/fault_env.h"
#include "testing/memory_env.h"
#include "testing/temp_dir.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::vector<std::byte> Bytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::transform(s.begin(), s.end(), out.begin(), [](char c) { return std::byte(c); });
  return out;
}

std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

// One Env under test, with an empty folder to work in.
class EnvUnderTest {
 public:
  virtual ~EnvUnderTest() = default;
  virtual Env* env() = 0;
  virtual std::string root() = 0;
};

class PosixUnderTest final : public EnvUnderTest {
 public:
  Env* env() override { return Env::Default(); }
  std::string root() override { return dir_.path(); }

 private:
  testing::TempDir dir_;
};

class MemoryUnderTest final : public EnvUnderTest {
 public:
  MemoryUnderTest() { (void)env_.CreateDirs("/work", 0700); }
  Env* env() override { return &env_; }
  std::string root() override { return "/work"; }

 private:
  MemoryEnv env_;
};

// The fault-injecting Env with nothing to inject must be its base.
class FaultUnderTest final : public EnvUnderTest {
 public:
  explicit FaultUnderTest(std::unique_ptr<EnvUnderTest> base)
      : base_(std::move(base)), env_(base_->env()) {}
  Env* env() override { return &env_; }
  std::string root() override { return base_->root(); }

 private:
  std::unique_ptr<EnvUnderTest> base_;
  FaultInjectionEnv env_;
};

struct EnvKind {
  std::string name;
  std::function<std::unique_ptr<EnvUnderTest>()> make;
};

class EnvContractTest : public ::testing::TestWithParam<EnvKind> {
 protected:
  void SetUp() override {
    under_ = GetParam().make();
    env_ = under_->env();
    root_ = under_->root();
  }

  std::string P(std::string_view name) const { return JoinPath(root_, name); }

  void Write(const std::string& path, std::string_view content) {
    auto f = env_->CreateFile(path, WriteFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append(Bytes(content)).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }

  std::unique_ptr<EnvUnderTest> under_;
  Env* env_ = nullptr;
  std::string root_;
};

TEST_P(EnvContractTest, WriteThenReadBackShortOnlyAtTheEnd) {
  auto f = env_->CreateFile(P("a"), WriteFileOptions{});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  ASSERT_TRUE((*f)->Append(Bytes("hello ")).ok());
  ASSERT_TRUE((*f)->Append(Bytes("world")).ok());
  ASSERT_TRUE((*f)->Append({}).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE((*f)->Close().ok());  // a second Close is harmless
  EXPECT_EQ((*f)->Append(Bytes("x")).code(), StatusCode::kFailedPrecondition);

  auto r = env_->OpenForRead(P("a"), ReadFileOptions{});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 11u);
  std::vector<std::byte> part(5);
  auto n = (*r)->ReadAt(6, part);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  EXPECT_EQ(Str(part), "world");
  std::vector<std::byte> tail(10);
  n = (*r)->ReadAt(8, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3u);
  EXPECT_EQ(Str(std::span(tail).first(3)), "rld");
  n = (*r)->ReadAt(11, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);
  n = (*r)->ReadAt(1000, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  auto info = env_->Stat(P("a"));
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->size, 11u);
}

// Prefetch and random_access are advice: the bytes read are the same with
// them, and a prefetch of any range (past the end too) succeeds.
TEST_P(EnvContractTest, PrefetchAndRandomAccessLeaveTheBytesAsTheyAre) {
  Write(P("a"), "0123456789abcdef");
  ReadFileOptions ro;
  ro.random_access = true;
  auto r = env_->OpenForRead(P("a"), ro);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)->size(), 16u);
  EXPECT_TRUE((*r)->Prefetch(10, 4).ok());
  EXPECT_TRUE((*r)->Prefetch(0, 0).ok());
  EXPECT_TRUE((*r)->Prefetch(12, 1000).ok());
  EXPECT_TRUE((*r)->Prefetch(1000, 10).ok());
  std::vector<std::byte> part(4);
  auto n = (*r)->ReadAt(10, part);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 4u);
  EXPECT_EQ(Str(part), "abcd");
  n = (*r)->ReadAt(0, part);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(Str(part), "0123");
}

TEST_P(EnvContractTest, ExclusiveCreateRefusesAnExistingFileAndTruncateReplaces) {
  Write(P("a"), "old content");
  auto f = env_->CreateFile(P("a"), WriteFileOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIOError);
  EXPECT_EQ(f.status().sys_errno(), EEXIST);
  EXPECT_THAT(f.status().message(), HasSubstr(P("a")));

  WriteFileOptions trunc;
  trunc.exclusive = false;
  auto g = env_->CreateFile(P("a"), trunc);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->Append(Bytes("n")).ok());
  ASSERT_TRUE((*g)->Close().ok());
  auto data = env_->ReadWholeFile(P("a"), 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(Str(*data), "n");
}

TEST_P(EnvContractTest, RenameReplacesTheTarget) {
  Write(P("a"), "new");
  Write(P("b"), "old");
  ASSERT_TRUE(env_->RenameFile(P("a"), P("b")).ok());
  auto data = env_->ReadWholeFile(P("b"), 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(Str(*data), "new");
  EXPECT_TRUE(env_->Stat(P("a")).status().IsNotFound());
}

TEST_P(EnvContractTest, AMissingPathIsNotFoundNamingThePath) {
  const std::string missing = P("missing");
  std::vector<Status> statuses = {
      env_->OpenForRead(missing, ReadFileOptions{}).status(),
      env_->Stat(missing).status(),
      env_->RemoveFile(missing),
      env_->RemoveDir(missing),
      env_->RenameFile(missing, P("other")),
      env_->ListDir(missing).status(),
      env_->Chmod(missing, 0600),
      env_->ReadWholeFile(missing, 10).status(),
      env_->CreateFile(JoinPath(missing, "x"), WriteFileOptions{}).status(),
      env_->CreateDir(JoinPath(missing, "x"), 0700),
  };
  for (const Status& s : statuses) {
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << s.ToString();
    EXPECT_EQ(s.sys_errno(), ENOENT) << s.ToString();
    EXPECT_THAT(s.message(), HasSubstr(missing));
  }
  EXPECT_TRUE(env_->FreeSpace(missing).status().IsNotFound());
}

TEST_P(EnvContractTest, FoldersCreateListRemove) {
  ASSERT_TRUE(env_->CreateDir(P("a"), 0700).ok());
  EXPECT_TRUE(env_->CreateDir(P("a"), 0700).ok());  // exists as a folder: OK
  Write(P("f"), "x");
  Status s = env_->CreateDir(P("f"), 0700);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.sys_errno(), EEXIST);

  ASSERT_TRUE(env_->CreateDirs(P("b/c/d"), 0700).ok());
  ASSERT_TRUE(env_->CreateDirs(P("b/c/d/"), 0700).ok());
  EXPECT_EQ(env_->Stat(P("b/c/d"))->type, FileType::kDirectory);
  EXPECT_EQ(env_->CreateDirs(P("f/g"), 0700).sys_errno(), ENOTDIR);

  auto names = env_->ListDir(root_);
  ASSERT_TRUE(names.ok());
  EXPECT_THAT(*names, UnorderedElementsAre("a", "b", "f"));
  auto empty = env_->ListDir(P("a"));
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(*empty, IsEmpty());

  EXPECT_EQ(env_->RemoveDir(P("b")).sys_errno(), ENOTEMPTY);
  EXPECT_EQ(env_->RemoveDir(P("f")).sys_errno(), ENOTDIR);
  EXPECT_EQ(env_->RemoveFile(P("a")).sys_errno(), EISDIR);
  EXPECT_TRUE(env_->RemoveDir(P("a")).ok());
  EXPECT_TRUE(env_->RemoveFile(P("f")).ok());
  EXPECT_THAT(*env_->ListDir(root_), ElementsAre("b"));
  EXPECT_TRUE(env_->SyncDir(root_).ok());
  EXPECT_TRUE(env_->SyncFileSystem(root_).ok());
}

TEST_P(EnvContractTest, WriteFileAtomicReplacesAndLeavesNoTemp) {
  Write(P("target"), "old content");
  for (bool sync : {false, true}) {
    WriteFileOptions opts;
    opts.sync = sync;
    ASSERT_TRUE(env_->WriteFileAtomic(P("target"), Bytes(sync ? "synced" : "new"), opts).ok());
    auto data = env_->ReadWholeFile(P("target"), 100);
    ASSERT_TRUE(data.ok());
    EXPECT_EQ(Str(*data), sync ? "synced" : "new");
  }
  EXPECT_THAT(*env_->ListDir(root_), ElementsAre("target"));
}

TEST_P(EnvContractTest, WriteFileAtomicRemovesItsTempOnFailure) {
  // rename(file, non-empty folder) fails: the temp must not be left behind.
  ASSERT_TRUE(env_->CreateDirs(P("dst/inner"), 0700).ok());
  Status s = env_->WriteFileAtomic(P("dst"), Bytes("x"), WriteFileOptions{});
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.sys_errno(), EISDIR);
  EXPECT_THAT(*env_->ListDir(root_), ElementsAre("dst"));
  EXPECT_TRUE(env_->WriteFileAtomic(P("nope/x"), Bytes("x"), WriteFileOptions{}).IsNotFound());
}

TEST_P(EnvContractTest, ReadWholeFileRefusesOversizeAndFolders) {
  Write(P("file"), "0123456789");
  auto ok = env_->ReadWholeFile(P("file"), 10);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Str(*ok), "0123456789");
  auto big = env_->ReadWholeFile(P("file"), 9);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("10 bytes"));
  ASSERT_TRUE(env_->CreateDir(P("sub"), 0700).ok());
  EXPECT_EQ(env_->ReadWholeFile(P("sub"), 100).status().code(), StatusCode::kInvalidArgument);
  Write(P("empty"), "");
  auto empty = env_->ReadWholeFile(P("empty"), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_P(EnvContractTest, FreeSpaceIsPositive) {
  auto free = env_->FreeSpace(root_);
  ASSERT_TRUE(free.ok()) << free.status().ToString();
  EXPECT_GT(*free, 0u);
}

TEST_P(EnvContractTest, ClocksMoveForwardAndSleepAdvancesThem) {
  const uint64_t t0 = env_->NowMicros();
  env_->SleepForMicros(2000);
  const uint64_t t1 = env_->NowMicros();
  EXPECT_GE(t1 - t0, 2000u);
  EXPECT_GT(env_->NowUnixMicros(), int64_t{1'600'000'000} * 1'000'000);
}

TEST_P(EnvContractTest, ThreadsAndProcesses) {
  std::atomic<int> ran{0};
  std::thread t = env_->StartThread([&] { ran = 42; });
  t.join();
  EXPECT_EQ(ran.load(), 42);
  EXPECT_TRUE(env_->ProcessAlive(env_->ProcessId()));
}

INSTANTIATE_TEST_SUITE_P(
    AllEnvs, EnvContractTest,
    ::testing::Values(
        EnvKind{"Posix", [] { return std::make_unique<PosixUnderTest>(); }},
        EnvKind{"Memory", [] { return std::make_unique<MemoryUnderTest>(); }},
        EnvKind{
            "FaultOverPosix",
            [] { return std::make_unique<FaultUnderTest>(std::make_unique<PosixUnderTest>()); }},
        EnvKind{
            "FaultOverMemory",
            [] { return std::make_unique<FaultUnderTest>(std::make_unique<MemoryUnderTest>()); }}),
    [](const ::testing::TestParamInfo<EnvKind>& info) { return info.param.name; });

// EnvWrapper forwards every call it does not override.
class CountingWrapper final : public EnvWrapper {
 public:
  using EnvWrapper::EnvWrapper;
  Result<FileInfo> Stat(const std::string& path) override {
    ++stats;
    return target()->Stat(path);
  }
  int stats = 0;
};

TEST(EnvWrapperTest, ForwardsWhatItDoesNotOverride) {
  MemoryEnv base;
  CountingWrapper env(&base);
  EXPECT_EQ(env.target(), &base);
  ASSERT_TRUE(env.CreateDirs("/x/y", 0700).ok());  // CreateDirs calls Stat / CreateDir
  EXPECT_EQ(base.Stat("/x/y")->type, FileType::kDirectory);
  EXPECT_EQ(env.Stat("/x")->type, FileType::kDirectory);
  EXPECT_GE(env.stats, 1);
  EXPECT_EQ(env.NowMicros(), base.NowMicros());
  EXPECT_EQ(env.ProcessId(), base.ProcessId());
}

}  // namespace
}  // namespace kvtier
