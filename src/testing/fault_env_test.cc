#include "testing/fault_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/memory_env.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::byte> FaultBytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::transform(s.begin(), s.end(), out.begin(), [](char c) { return std::byte(c); });
  return out;
}

std::string FaultStr(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

class FaultEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(mem_.CreateDir("/d", 0700).ok());
    auto f = mem_.CreateFile("/d/f", WriteFileOptions{});
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE((*f)->Append(FaultBytes("content")).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }

  std::string Read(const std::string& path) {
    auto data = mem_.ReadWholeFile(path, 1 << 20);
    return data.ok() ? FaultStr(*data) : "<" + data.status().ToString() + ">";
  }

  MemoryEnv mem_;
  FaultInjectionEnv env_{&mem_};
};

TEST_F(FaultEnvTest, FailNthFailsExactlyThatCall) {
  env_.FailNth(OpKind::kAppend, 3, ENOSPC);
  auto f = env_.CreateFile("/d/g", WriteFileOptions{});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE((*f)->Append(FaultBytes("1")).ok());
  EXPECT_TRUE((*f)->Append(FaultBytes("2")).ok());
  Status s = (*f)->Append(FaultBytes("3"));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  EXPECT_THAT(s.message(), HasSubstr("(injected)"));
  EXPECT_THAT(s.message(), HasSubstr("/d/g"));
  EXPECT_TRUE((*f)->Append(FaultBytes("4")).ok());
  EXPECT_TRUE((*f)->Close().ok());
  EXPECT_EQ(Read("/d/g"), "124");
  EXPECT_EQ(env_.Calls(OpKind::kAppend), 4);
  EXPECT_EQ(env_.Injected(OpKind::kAppend), 1);
  EXPECT_EQ(env_.Calls(OpKind::kCreate), 1);
  EXPECT_EQ(env_.Calls(OpKind::kClose), 1);
  EXPECT_EQ(env_.Calls(OpKind::kSync), 0);
}

TEST_F(FaultEnvTest, SeveralFaultsForOneKind) {
  env_.FailNth(OpKind::kStat, 1, EIO);
  env_.FailNth(OpKind::kStat, 3, ENOENT);
  EXPECT_EQ(env_.Stat("/d/f").status().sys_errno(), EIO);
  EXPECT_TRUE(env_.Stat("/d/f").ok());
  Status s = env_.Stat("/d/f").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);  // ENOENT reads as the real thing
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_TRUE(env_.Stat("/d/f").ok());
  EXPECT_EQ(env_.Calls(OpKind::kStat), 4);
  EXPECT_EQ(env_.Injected(OpKind::kStat), 2);
}

TEST_F(FaultEnvTest, FailAllUntilClear) {
  env_.FailAll(OpKind::kSyncDir, EIO);
  for (int i = 0; i < 3; ++i) {
    Status s = env_.SyncDir("/d");
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_EQ(s.sys_errno(), EIO);
  }
  EXPECT_TRUE(env_.SyncFileSystem("/d").ok());  // other kinds are untouched
  env_.Clear();
  EXPECT_TRUE(env_.SyncDir("/d").ok());
  EXPECT_EQ(env_.Calls(OpKind::kSyncDir), 4);
  EXPECT_EQ(env_.Injected(OpKind::kSyncDir), 3);
  env_.ResetCounters();
  EXPECT_EQ(env_.Calls(OpKind::kSyncDir), 0);
  EXPECT_EQ(env_.Injected(OpKind::kSyncDir), 0);
}

TEST_F(FaultEnvTest, ResetCountersKeepsPendingFaultsRelative) {
  env_.FailNth(OpKind::kRemove, 2, EIO);
  EXPECT_EQ(env_.RemoveFile("/d/none").code(), StatusCode::kNotFound);  // call 1: real
  env_.ResetCounters();
  EXPECT_EQ(env_.RemoveFile("/d/f").sys_errno(), EIO);  // call 2 of the plan
  EXPECT_EQ(Read("/d/f"), "content");
  EXPECT_EQ(env_.Calls(OpKind::kRemove), 1);
}

// Every kind fails on its own call, with the errno asked for, and the call
// does not reach the wrapped Env.
TEST_F(FaultEnvTest, EveryKindCanFail) {
  auto reader = env_.OpenForRead("/d/f", ReadFileOptions{});
  ASSERT_TRUE(reader.ok());
  auto writer = env_.CreateFile("/d/w", WriteFileOptions{});
  ASSERT_TRUE(writer.ok());
  std::vector<std::byte> buf(4);
  struct Case {
    OpKind kind;
    std::function<Status()> call;
    std::function<void()> check_untouched;
  };
  std::vector<Case> cases = {
      {OpKind::kOpenRead, [&] { return env_.OpenForRead("/d/f", {}).status(); }, [] {}},
      {OpKind::kCreate, [&] { return env_.CreateFile("/d/new", {}).status(); },
       [&] { EXPECT_TRUE(mem_.Stat("/d/new").status().IsNotFound()); }},
      {OpKind::kRead, [&] { return (*reader)->ReadAt(0, buf).status(); }, [] {}},
      {OpKind::kPrefetch, [&] { return (*reader)->Prefetch(0, 4); }, [] {}},
      {OpKind::kAppend, [&] { return (*writer)->Append(FaultBytes("zz")); },
       [&] { EXPECT_EQ(mem_.Stat("/d/w")->size, 0u); }},
      {OpKind::kSync, [&] { return (*writer)->Sync(); }, [] {}},
      {OpKind::kRename, [&] { return env_.RenameFile("/d/f", "/d/r"); },
       [&] { EXPECT_EQ(Read("/d/f"), "content"); }},
      {OpKind::kRemove, [&] { return env_.RemoveFile("/d/f"); },
       [&] { EXPECT_EQ(Read("/d/f"), "content"); }},
      {OpKind::kStat, [&] { return env_.Stat("/d/f").status(); }, [] {}},
      {OpKind::kCreateDir, [&] { return env_.CreateDir("/d/sub", 0700); },
       [&] { EXPECT_TRUE(mem_.Stat("/d/sub").status().IsNotFound()); }},
      {OpKind::kListDir, [&] { return env_.ListDir("/d").status(); }, [] {}},
      {OpKind::kSyncDir, [&] { return env_.SyncDir("/d"); }, [] {}},
      {OpKind::kFreeSpace, [&] { return env_.FreeSpace("/d").status(); }, [] {}},
      {OpKind::kChmod, [&] { return env_.Chmod("/d/f", 0); },
       [&] { EXPECT_EQ(Read("/d/f"), "content"); }},
      {OpKind::kRemoveDir, [&] { return env_.RemoveDir("/d"); },
       [&] { EXPECT_EQ(mem_.Stat("/d")->type, FileType::kDirectory); }},
      {OpKind::kSyncFileSystem, [&] { return env_.SyncFileSystem("/d"); }, [] {}},
      {OpKind::kClose, [&] { return (*writer)->Close(); }, [] {}},
  };
  ASSERT_EQ(cases.size(), static_cast<size_t>(kNumOpKinds));
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(OpKindName(c.kind)));
    const int64_t before = env_.Calls(c.kind);
    env_.FailNth(c.kind, 1, EIO);
    Status s = c.call();
    EXPECT_EQ(s.code(), StatusCode::kIOError);
    EXPECT_EQ(s.sys_errno(), EIO);
    EXPECT_THAT(s.message(), HasSubstr("(injected)"));
    EXPECT_EQ(env_.Calls(c.kind), before + 1);
    EXPECT_EQ(env_.Injected(c.kind), 1);
    c.check_untouched();
  }
}

TEST_F(FaultEnvTest, RenameNoReplaceCountsAsARenameAndForwardsEexist) {
  env_.FailNth(OpKind::kRename, 1, EIO);
  EXPECT_EQ(env_.RenameNoReplace("/d/f", "/d/r").sys_errno(), EIO);
  EXPECT_EQ(Read("/d/f"), "content");
  ASSERT_TRUE(env_.RenameNoReplace("/d/f", "/d/r").ok());
  ASSERT_TRUE(env_.WriteFileAtomic("/d/g", FaultBytes("other"), WriteFileOptions{}).ok());
  EXPECT_EQ(env_.RenameNoReplace("/d/g", "/d/r").sys_errno(), EEXIST);  // from the base Env
  EXPECT_EQ(Read("/d/r"), "content");
  EXPECT_EQ(env_.Calls(OpKind::kRename), 4);  // WriteFileAtomic renames once
  EXPECT_EQ(env_.Injected(OpKind::kRename), 1);
}

TEST_F(FaultEnvTest, TornAppendWritesAPrefix) {
  env_.SetTornAppendBytes(3);
  env_.FailNth(OpKind::kAppend, 1, EIO);
  auto f = env_.CreateFile("/d/torn", WriteFileOptions{});
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->Append(FaultBytes("abcdef")).sys_errno(), EIO);
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(Read("/d/torn"), "abc");
}

TEST_F(FaultEnvTest, HelpersCountTheirCalls) {
  ASSERT_TRUE(env_.WriteFileAtomic("/d/a", FaultBytes("x"), WriteFileOptions{}).ok());
  EXPECT_EQ(env_.Calls(OpKind::kCreate), 1);
  EXPECT_EQ(env_.Calls(OpKind::kAppend), 1);
  EXPECT_EQ(env_.Calls(OpKind::kSync), 0);
  EXPECT_EQ(env_.Calls(OpKind::kClose), 1);
  EXPECT_EQ(env_.Calls(OpKind::kRename), 1);
  EXPECT_EQ(env_.Calls(OpKind::kSyncDir), 0);

  env_.ResetCounters();
  WriteFileOptions durable;
  durable.sync = true;
  ASSERT_TRUE(env_.WriteFileAtomic("/d/a", FaultBytes("y"), durable).ok());
  EXPECT_EQ(env_.Calls(OpKind::kSync), 1);
  EXPECT_EQ(env_.Calls(OpKind::kSyncDir), 1);

  env_.ResetCounters();
  auto data = env_.ReadWholeFile("/d/a", 10);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(FaultStr(*data), "y");
  EXPECT_EQ(env_.Calls(OpKind::kStat), 1);
  EXPECT_EQ(env_.Calls(OpKind::kOpenRead), 1);
  EXPECT_EQ(env_.Calls(OpKind::kRead), 1);

  env_.ResetCounters();
  ASSERT_TRUE(env_.CreateDirs("/x/y/z", 0700).ok());
  EXPECT_EQ(env_.Calls(OpKind::kCreateDir), 5);  // z, y (missing), x, y, z
}

TEST_F(FaultEnvTest, WriteFileAtomicCleansUpAfterEachFailure) {
  for (OpKind kind : {OpKind::kAppend, OpKind::kSync, OpKind::kClose, OpKind::kRename}) {
    SCOPED_TRACE(std::string(OpKindName(kind)));
    env_.FailNth(kind, 1, ENOSPC);
    WriteFileOptions durable;
    durable.sync = true;
    Status s = env_.WriteFileAtomic("/d/f", FaultBytes("replacement"), durable);
    EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
    EXPECT_EQ(s.sys_errno(), ENOSPC);
    EXPECT_THAT(*mem_.ListDir("/d"), ElementsAre("f"));  // no temp left
    EXPECT_EQ(Read("/d/f"), "content");
  }
  // A failed folder sync comes after the rename: the new content is in place.
  env_.FailNth(OpKind::kSyncDir, 1, EIO);
  WriteFileOptions durable;
  durable.sync = true;
  EXPECT_EQ(env_.WriteFileAtomic("/d/f", FaultBytes("new"), durable).sys_errno(), EIO);
  EXPECT_EQ(Read("/d/f"), "new");
}

TEST_F(FaultEnvTest, FailedSyncDirLosesTheFileOnPowerLoss) {
  ASSERT_TRUE(mem_.SyncDir("/").ok());
  ASSERT_TRUE(mem_.SyncDir("/d").ok());
  env_.FailNth(OpKind::kSyncDir, 1, EIO);
  WriteFileOptions durable;
  durable.sync = true;
  EXPECT_EQ(env_.WriteFileAtomic("/d/new", FaultBytes("v"), durable).code(), StatusCode::kIOError);
  EXPECT_EQ(Read("/d/new"), "v");
  mem_.DropUnsyncedData();
  EXPECT_THAT(*mem_.ListDir("/d"), ElementsAre("f"));
  EXPECT_EQ(Read("/d/f"), "");  // never synced: the name survived, the data did not
}

TEST(FaultEnvPosixTest, WrapsThePosixEnv) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier_fault_XXXXXX").string();
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  FaultInjectionEnv env(Env::Default());
  env.FailAll(OpKind::kAppend, ENOSPC);
  const std::string path = JoinPath(tmpl, "f");
  Status s = env.WriteFileAtomic(path, FaultBytes("x"), WriteFileOptions{});
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  EXPECT_THAT(*env.ListDir(tmpl), IsEmpty());
  env.Clear();
  EXPECT_TRUE(env.WriteFileAtomic(path, FaultBytes("x"), WriteFileOptions{}).ok());
  EXPECT_EQ(env.ProcessId(), Env::Default()->ProcessId());
  std::filesystem::remove_all(tmpl);
}

}  // namespace
}  // namespace kvtier
