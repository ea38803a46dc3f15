#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtier/env.h"

// What every Env must do is tested once for all of them in
// src/testing/env_contract_test.cc; these are the POSIX Env's own cases
// (real symlinks, FIFOs, O_DIRECT, umask, processes).
namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

std::vector<std::byte> PosixBytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::transform(s.begin(), s.end(), out.begin(), [](char c) { return std::byte(c); });
  return out;
}

std::string Str(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class PosixEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvtier_env_XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string P(std::string_view name) const { return JoinPath(dir_, name); }

  void Write(const std::string& path, std::string_view content) {
    auto f = env_->CreateFile(path, WriteFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append(PosixBytes(content)).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }

  Env* env_ = Env::Default();
  std::string dir_;
};

TEST_F(PosixEnvTest, DefaultIsOneObject) { EXPECT_EQ(Env::Default(), Env::Default()); }

TEST_F(PosixEnvTest, DirectIoReadsExactBytesEvenUnaligned) {
  std::string content(10000, '\0');
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + 3);
  Write(P("d"), content);
  ReadFileOptions opts;
  opts.direct_io = true;
  auto r = env_->OpenForRead(P("d"), opts);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // An odd offset and length into a vector: not aligned for O_DIRECT, so the
  // file must fall back to buffered reads rather than fail.
  std::vector<std::byte> buf(1001);
  auto n = (*r)->ReadAt(13, buf);
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, 1001u);
  EXPECT_EQ(Str(buf), content.substr(13, 1001));
}

TEST_F(PosixEnvTest, ExclusiveCreateRefusesExistingFile) {
  Write(P("a"), "old");
  auto f = env_->CreateFile(P("a"), WriteFileOptions{});
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), StatusCode::kIOError);
  EXPECT_EQ(f.status().sys_errno(), EEXIST);
  EXPECT_THAT(f.status().message(), HasSubstr(P("a")));

  WriteFileOptions trunc;
  trunc.exclusive = false;
  auto g = env_->CreateFile(P("a"), trunc);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  ASSERT_TRUE((*g)->Append(PosixBytes("n")).ok());
  ASSERT_TRUE((*g)->Close().ok());
  auto data = env_->ReadWholeFile(P("a"), 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(Str(*data), "n");
}

TEST_F(PosixEnvTest, RenameReplacesTarget) {
  Write(P("a"), "new");
  Write(P("b"), "old");
  ASSERT_TRUE(env_->RenameFile(P("a"), P("b")).ok());
  auto data = env_->ReadWholeFile(P("b"), 100);
  ASSERT_TRUE(data.ok());
  EXPECT_EQ(Str(*data), "new");
  EXPECT_TRUE(env_->Stat(P("a")).status().IsNotFound());
}

TEST_F(PosixEnvTest, RenameNoReplaceMovesOnlyOntoAFreeName) {
  Write(P("first"), "first");
  Write(P("second"), "second");
  ASSERT_TRUE(env_->RenameNoReplace(P("first"), P("final")).ok());
  EXPECT_TRUE(env_->Stat(P("first")).status().IsNotFound());
  // The second writer loses: the first file stays, the loser's is untouched.
  Status s = env_->RenameNoReplace(P("second"), P("final"));
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.sys_errno(), EEXIST);
  EXPECT_THAT(s.message(), HasSubstr(P("final")));
  EXPECT_EQ(Str(*env_->ReadWholeFile(P("final"), 100)), "first");
  EXPECT_EQ(Str(*env_->ReadWholeFile(P("second"), 100)), "second");
  EXPECT_TRUE(env_->RenameNoReplace(P("missing"), P("other")).IsNotFound());
}

TEST_F(PosixEnvTest, LocksHeldByOpenFilesAreSeenByOtherOpeners) {
  WriteFileOptions wo;
  wo.lock = true;
  auto writer = env_->CreateFile(P("w"), wo);
  ASSERT_TRUE(writer.ok()) << writer.status().ToString();
  ReadFileOptions shared;
  shared.lock = FileLock::kShared;
  // The writer's exclusive lock refuses every other opener that asks.
  EXPECT_EQ(env_->OpenForRead(P("w"), shared).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(env_->OpenForRead(P("w"), {}).ok());  // a plain open ignores locks
  ASSERT_TRUE((*writer)->Close().ok());
  auto r1 = env_->OpenForRead(P("w"), shared);
  ASSERT_TRUE(r1.ok()) << r1.status().ToString();
  auto r2 = env_->OpenForRead(P("w"), shared);
  EXPECT_TRUE(r2.ok());  // shared locks coexist
  ReadFileOptions exclusive;
  exclusive.lock = FileLock::kExclusive;
  EXPECT_EQ(env_->OpenForRead(P("w"), exclusive).status().code(), StatusCode::kUnavailable);
  r1->reset();
  r2->reset();
  EXPECT_TRUE(env_->OpenForRead(P("w"), exclusive).ok());  // closing released them
  // Another process sees the lock too (flock, not a per-process fcntl lock).
  auto held = env_->OpenForRead(P("w"), exclusive);
  ASSERT_TRUE(held.ok());
  pid_t child = fork();
  if (child == 0) {
    auto r = Env::Default()->OpenForRead(P("w"), shared);
    _exit(r.status().code() == StatusCode::kUnavailable ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_F(PosixEnvTest, StatReportsTypesWithoutFollowingSymlinks) {
  Write(P("file"), "12345");
  ASSERT_EQ(::symlink(P("file").c_str(), P("link").c_str()), 0);
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  ASSERT_TRUE(env_->CreateDir(P("sub"), 0700).ok());

  auto file = env_->Stat(P("file"));
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->type, FileType::kRegular);
  EXPECT_EQ(file->size, 5u);
  EXPECT_LE(std::abs(file->mtime_unix_s - static_cast<int64_t>(std::time(nullptr))), 5);
  auto link = env_->Stat(P("link"));
  ASSERT_TRUE(link.ok());
  EXPECT_EQ(link->type, FileType::kSymlink);
  auto fifo = env_->Stat(P("fifo"));
  ASSERT_TRUE(fifo.ok());
  EXPECT_EQ(fifo->type, FileType::kFifo);
  auto sub = env_->Stat(P("sub"));
  ASSERT_TRUE(sub.ok());
  EXPECT_EQ(sub->type, FileType::kDirectory);
}

TEST_F(PosixEnvTest, OpenForReadRefusesSymlinkUnlessFollowing) {
  Write(P("file"), "abc");
  ASSERT_EQ(::symlink(P("file").c_str(), P("link").c_str()), 0);
  auto r = env_->OpenForRead(P("link"), ReadFileOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().sys_errno(), ELOOP);
  EXPECT_THAT(r.status().message(), HasSubstr("symlink"));
  ReadFileOptions follow;
  follow.follow_symlinks = true;
  auto f = env_->OpenForRead(P("link"), follow);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ((*f)->size(), 3u);
}

TEST_F(PosixEnvTest, OpenForReadRefusesFifoAndFolderWithoutBlocking) {
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);
  auto r = env_->OpenForRead(P("fifo"), ReadFileOptions{});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("FIFO"));
  auto d = env_->OpenForRead(dir_, ReadFileOptions{});
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(d.status().message(), HasSubstr("folder"));
}

TEST_F(PosixEnvTest, ReadWholeFileRefusesNonRegularAndOversize) {
  Write(P("file"), "0123456789");
  ASSERT_EQ(::symlink(P("file").c_str(), P("link").c_str()), 0);
  ASSERT_EQ(::mkfifo(P("fifo").c_str(), 0600), 0);

  auto ok = env_->ReadWholeFile(P("file"), 10);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(Str(*ok), "0123456789");

  auto big = env_->ReadWholeFile(P("file"), 9);
  EXPECT_EQ(big.status().code(), StatusCode::kResourceExhausted);
  EXPECT_THAT(big.status().message(), HasSubstr("10 bytes"));

  auto link = env_->ReadWholeFile(P("link"), 100);
  EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(link.status().message(), HasSubstr("symlink"));
  auto fifo = env_->ReadWholeFile(P("fifo"), 100);
  EXPECT_EQ(fifo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(fifo.status().message(), HasSubstr("FIFO"));
  auto folder = env_->ReadWholeFile(dir_, 100);
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.status().message(), HasSubstr("folder"));

  Write(P("empty"), "");
  auto empty = env_->ReadWholeFile(P("empty"), 0);
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

TEST_F(PosixEnvTest, PermissionsAreAppliedDespiteUmask) {
  mode_t old = ::umask(0077);
  WriteFileOptions opts;
  opts.permissions = 0640;
  auto f = env_->CreateFile(P("f"), opts);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Close().ok());
  ASSERT_TRUE(env_->CreateDir(P("d"), 0750).ok());
  ASSERT_TRUE(env_->WriteFileAtomic(P("w"), PosixBytes("x"), opts).ok());
  ::umask(old);
  EXPECT_EQ(ModeOf(P("f")), 0640u);
  EXPECT_EQ(ModeOf(P("d")), 0750u);
  EXPECT_EQ(ModeOf(P("w")), 0640u);
  ASSERT_TRUE(env_->Chmod(P("f"), 0604).ok());
  EXPECT_EQ(ModeOf(P("f")), 0604u);
}

TEST_F(PosixEnvTest, ProcessAliveSeesSelfButNotAReapedChild) {
  EXPECT_EQ(env_->ProcessId(), static_cast<int>(::getpid()));
  EXPECT_TRUE(env_->ProcessAlive(env_->ProcessId()));
  EXPECT_TRUE(env_->ProcessAlive(1));  // init: exists even when not ours to signal
  EXPECT_FALSE(env_->ProcessAlive(0));
  EXPECT_FALSE(env_->ProcessAlive(-1));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_FALSE(env_->ProcessAlive(static_cast<int>(child)));
}

TEST(JoinPathTest, JoinsWithOneSlash) {
  EXPECT_EQ(JoinPath("a", "b"), "a/b");
  EXPECT_EQ(JoinPath("a/", "b"), "a/b");
  EXPECT_EQ(JoinPath("a//", "/b"), "a/b");
  EXPECT_EQ(JoinPath("/", "b"), "/b");
  EXPECT_EQ(JoinPath("", "b"), "b");
  EXPECT_EQ(JoinPath("a", ""), "a");
  EXPECT_EQ(JoinPath("/x/y", "z/w"), "/x/y/z/w");
}

}  // namespace
}  // namespace kvtier
