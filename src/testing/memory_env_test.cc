#include "testing/memory_env.h"

#include <algorithm>
#include <cerrno>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kvtier {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

std::vector<std::byte> MemBytes(std::string_view s) {
  std::vector<std::byte> out(s.size());
  std::transform(s.begin(), s.end(), out.begin(), [](char c) { return std::byte(c); });
  return out;
}

std::string MemStr(std::span<const std::byte> b) {
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

class MemoryEnvTest : public ::testing::Test {
 protected:
  // Creates `path` with `content`; Sync()s the file when `sync` is set.
  void Write(const std::string& path, std::string_view content, bool sync = false) {
    auto f = env_.CreateFile(path, WriteFileOptions{});
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->Append(MemBytes(content)).ok());
    if (sync) {
      ASSERT_TRUE((*f)->Sync().ok());
    }
    ASSERT_TRUE((*f)->Close().ok());
  }
  // The contents of `path`, or "<" + status code name + ">".
  std::string Read(const std::string& path) {
    auto data = env_.ReadWholeFile(path, 1 << 20);
    if (!data.ok()) return "<" + std::string(StatusCodeName(data.status().code())) + ">";
    return MemStr(*data);
  }

  MemoryEnv env_;
};

TEST_F(MemoryEnvTest, WriteThenReadBack) {
  ASSERT_TRUE(env_.CreateDirs("/cache/ab/cd", 0700).ok());
  Write("/cache/ab/cd/f", "hello world");
  auto r = env_.OpenForRead("/cache/ab/cd/f", ReadFileOptions{});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)->size(), 11u);
  std::vector<std::byte> buf(5);
  auto n = (*r)->ReadAt(6, buf);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 5u);
  EXPECT_EQ(MemStr(buf), "world");
  std::vector<std::byte> tail(8);
  n = (*r)->ReadAt(8, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 3u);
  n = (*r)->ReadAt(100, tail);
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 0u);

  auto info = env_.Stat("/cache/ab/cd/f");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->size, 11u);
  EXPECT_EQ(info->mtime_unix_s, 1'700'000'000);
  EXPECT_EQ(env_.Stat("/cache/ab")->type, FileType::kDirectory);
  EXPECT_THAT(*env_.ListDir("/cache/ab/cd"), ElementsAre("f"));
  EXPECT_THAT(*env_.ListDir("/"), ElementsAre("cache"));
  // "//" and "." are the same path.
  EXPECT_EQ(Read("//cache/./ab/cd/f"), "hello world");
}

TEST_F(MemoryEnvTest, ErrorsMatchPosix) {
  Write("/f", "x");
  ASSERT_TRUE(env_.CreateDirs("/d/e", 0700).ok());

  Status s = env_.Stat("/missing").status();
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.sys_errno(), ENOENT);
  EXPECT_THAT(s.message(), HasSubstr("/missing"));
  EXPECT_EQ(env_.Stat("/missing/x").status().sys_errno(), ENOENT);
  EXPECT_EQ(env_.Stat("/f/x").status().sys_errno(), ENOTDIR);
  EXPECT_EQ(env_.CreateFile("/f", WriteFileOptions{}).status().sys_errno(), EEXIST);
  EXPECT_EQ(env_.CreateFile("/d", WriteFileOptions{}).status().sys_errno(), EEXIST);
  s = env_.CreateDir("/f", 0700);
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.sys_errno(), EEXIST);
  EXPECT_TRUE(env_.CreateDir("/d", 0700).ok());
  EXPECT_EQ(env_.CreateDir("/nope/x", 0700).code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.CreateDirs("/f/g", 0700).sys_errno(), ENOTDIR);
  EXPECT_EQ(env_.RemoveFile("/d").sys_errno(), EISDIR);
  EXPECT_EQ(env_.RemoveDir("/f").sys_errno(), ENOTDIR);
  EXPECT_EQ(env_.RemoveDir("/d").sys_errno(), ENOTEMPTY);
  EXPECT_EQ(env_.ListDir("/f").status().sys_errno(), ENOTDIR);
  EXPECT_EQ(env_.RenameFile("/f", "/d").sys_errno(), EISDIR);
  EXPECT_EQ(env_.RenameFile("/d", "/f").sys_errno(), ENOTDIR);
  EXPECT_EQ(env_.RenameFile("/d", "/d/e/x").sys_errno(), EINVAL);
  EXPECT_EQ(env_.RenameFile("/missing", "/x").code(), StatusCode::kNotFound);
  EXPECT_EQ(env_.FreeSpace("/missing").status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(env_.RemoveDir("/d/e").ok());
  EXPECT_TRUE(env_.RemoveDir("/d").ok());
  EXPECT_TRUE(env_.RemoveFile("/f").ok());
  EXPECT_THAT(*env_.ListDir("/"), IsEmpty());

  auto w = env_.CreateFile("/g", WriteFileOptions{});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ((*w)->Append(MemBytes("x")).code(), StatusCode::kFailedPrecondition);
}

TEST_F(MemoryEnvTest, CreateNonExclusiveTruncates) {
  Write("/f", "long old content");
  WriteFileOptions opts;
  opts.exclusive = false;
  auto f = env_.CreateFile("/f", opts);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(MemBytes("new")).ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(Read("/f"), "new");
  EXPECT_EQ(env_.UsedBytes(), 3u);
}

TEST_F(MemoryEnvTest, RenameReplacesFilesAndMovesFolders) {
  Write("/a", "new");
  Write("/b", "old");
  ASSERT_TRUE(env_.RenameFile("/a", "/b").ok());
  EXPECT_EQ(Read("/b"), "new");
  EXPECT_EQ(Read("/a"), "<NotFound>");
  EXPECT_EQ(env_.UsedBytes(), 3u);

  ASSERT_TRUE(env_.CreateDirs("/x/y", 0700).ok());
  Write("/x/y/f", "deep");
  ASSERT_TRUE(env_.RenameFile("/x", "/z").ok());
  EXPECT_EQ(Read("/z/y/f"), "deep");
  EXPECT_EQ(env_.Stat("/x").status().code(), StatusCode::kNotFound);
}

TEST_F(MemoryEnvTest, RenameNoReplaceMovesOnlyOntoAFreeName) {
  Write("/a", "first");
  Write("/b", "second");
  ASSERT_TRUE(env_.RenameNoReplace("/a", "/final").ok());
  EXPECT_EQ(Read("/a"), "<NotFound>");
  Status s = env_.RenameNoReplace("/b", "/final");
  EXPECT_EQ(s.code(), StatusCode::kIOError);
  EXPECT_EQ(s.sys_errno(), EEXIST);
  EXPECT_EQ(Read("/final"), "first");
  EXPECT_EQ(Read("/b"), "second");
  EXPECT_EQ(env_.RenameNoReplace("/missing", "/x").code(), StatusCode::kNotFound);
}

TEST_F(MemoryEnvTest, LocksHeldByOpenFilesAreSeenByOtherOpeners) {
  WriteFileOptions wo;
  wo.lock = true;
  auto writer = env_.CreateFile("/w", wo);
  ASSERT_TRUE(writer.ok());
  ReadFileOptions shared;
  shared.lock = FileLock::kShared;
  EXPECT_EQ(env_.OpenForRead("/w", shared).status().code(), StatusCode::kUnavailable);
  EXPECT_TRUE(env_.OpenForRead("/w", {}).ok());
  ASSERT_TRUE((*writer)->Close().ok());
  auto r1 = env_.OpenForRead("/w", shared);
  ASSERT_TRUE(r1.ok());
  EXPECT_TRUE(env_.OpenForRead("/w", shared).ok());
  ReadFileOptions exclusive;
  exclusive.lock = FileLock::kExclusive;
  EXPECT_EQ(env_.OpenForRead("/w", exclusive).status().code(), StatusCode::kUnavailable);
  r1->reset();
  auto ex = env_.OpenForRead("/w", exclusive);
  EXPECT_TRUE(ex.ok());
  EXPECT_EQ(env_.OpenForRead("/w", shared).status().code(), StatusCode::kUnavailable);
  ex->reset();
  // A writer dropped without Close() releases its lock too.
  { auto w2 = env_.CreateFile("/w2", wo); }
  EXPECT_TRUE(env_.OpenForRead("/w2", exclusive).ok());
}

TEST_F(MemoryEnvTest, SymlinksAndFifos) {
  Write("/file", "abc");
  ASSERT_TRUE(env_.AddSymlink("/link", "file").ok());
  ASSERT_TRUE(env_.AddSymlink("/loop", "/loop").ok());
  ASSERT_TRUE(env_.AddFifo("/fifo").ok());
  EXPECT_EQ(env_.Stat("/link")->type, FileType::kSymlink);
  EXPECT_EQ(env_.Stat("/fifo")->type, FileType::kFifo);

  auto r = env_.OpenForRead("/link", ReadFileOptions{});
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().sys_errno(), ELOOP);
  ReadFileOptions follow;
  follow.follow_symlinks = true;
  auto f = env_.OpenForRead("/link", follow);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->size(), 3u);
  EXPECT_EQ(env_.OpenForRead("/loop", follow).status().sys_errno(), ELOOP);
  EXPECT_EQ(env_.OpenForRead("/fifo", ReadFileOptions{}).status().code(),
            StatusCode::kInvalidArgument);

  auto link = env_.ReadWholeFile("/link", 100);
  EXPECT_EQ(link.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(link.status().message(), HasSubstr("symlink"));
  auto fifo = env_.ReadWholeFile("/fifo", 100);
  EXPECT_EQ(fifo.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(fifo.status().message(), HasSubstr("FIFO"));
  auto folder = env_.ReadWholeFile("/", 100);
  EXPECT_EQ(folder.status().code(), StatusCode::kInvalidArgument);
  EXPECT_THAT(folder.status().message(), HasSubstr("folder"));
  EXPECT_EQ(env_.ReadWholeFile("/file", 2).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(Read("/file"), "abc");
}

TEST_F(MemoryEnvTest, PermissionsAreEnforced) {
  WriteFileOptions wo;
  wo.permissions = 0200;
  auto f = env_.CreateFile("/secret", wo);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Close().ok());
  auto r = env_.OpenForRead("/secret", ReadFileOptions{});
  EXPECT_EQ(r.status().code(), StatusCode::kIOError);
  EXPECT_EQ(r.status().sys_errno(), EACCES);
  ASSERT_TRUE(env_.Chmod("/secret", 0600).ok());
  EXPECT_TRUE(env_.OpenForRead("/secret", ReadFileOptions{}).ok());

  ASSERT_TRUE(env_.CreateDir("/ro", 0500).ok());
  EXPECT_EQ(env_.CreateFile("/ro/x", WriteFileOptions{}).status().sys_errno(), EACCES);
  EXPECT_EQ(env_.CreateDir("/ro/x", 0700).sys_errno(), EACCES);
  ASSERT_TRUE(env_.CreateDir("/noread", 0300).ok());
  EXPECT_EQ(env_.ListDir("/noread").status().sys_errno(), EACCES);
  ASSERT_TRUE(env_.CreateDir("/nosearch", 0600).ok());
  EXPECT_EQ(env_.Stat("/nosearch/x").status().sys_errno(), EACCES);
}

TEST_F(MemoryEnvTest, CapacityGivesEnospcAfterWhatFits) {
  env_.SetCapacity(100);
  EXPECT_EQ(*env_.FreeSpace("/"), 100u);
  Write("/a", std::string(60, 'a'));
  EXPECT_EQ(*env_.FreeSpace("/"), 40u);
  auto f = env_.CreateFile("/b", WriteFileOptions{});
  ASSERT_TRUE(f.ok());
  Status s = (*f)->Append(MemBytes(std::string(50, 'b')));
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(s.sys_errno(), ENOSPC);
  EXPECT_THAT(s.message(), HasSubstr("/b"));
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(env_.Stat("/b")->size, 40u);
  EXPECT_EQ(*env_.FreeSpace("/"), 0u);
  EXPECT_EQ(env_.UsedBytes(), 100u);
  ASSERT_TRUE(env_.RemoveFile("/a").ok());
  EXPECT_EQ(*env_.FreeSpace("/"), 60u);
  ASSERT_TRUE(env_.RenameFile("/b", "/c").ok());
  EXPECT_EQ(env_.UsedBytes(), 40u);
}

TEST_F(MemoryEnvTest, FakeClockAndProcesses) {
  EXPECT_EQ(env_.NowMicros(), 1'000'000u);
  EXPECT_EQ(env_.NowUnixMicros(), 1'700'000'000'000'000);
  env_.AdvanceClock(2'500'000);
  EXPECT_EQ(env_.NowMicros(), 3'500'000u);
  env_.SleepForMicros(500'000);
  EXPECT_EQ(env_.NowMicros(), 4'000'000u);
  EXPECT_EQ(env_.NowUnixMicros(), 1'700'000'003'000'000);
  Write("/f", "x");
  EXPECT_EQ(env_.Stat("/f")->mtime_unix_s, 1'700'000'003);

  EXPECT_EQ(env_.ProcessId(), 4242);
  EXPECT_TRUE(env_.ProcessAlive(4242));
  EXPECT_FALSE(env_.ProcessAlive(77));
  env_.SetProcessAlive(77, true);
  EXPECT_TRUE(env_.ProcessAlive(77));
  env_.SetProcessAlive(77, false);
  EXPECT_FALSE(env_.ProcessAlive(77));

  MemoryEnvOptions opts;
  opts.pid = 7;
  MemoryEnv other(opts);
  EXPECT_EQ(other.ProcessId(), 7);
}

TEST_F(MemoryEnvTest, DropUnsyncedDataKeepsOnlySyncedFilesInSyncedFolders) {
  ASSERT_TRUE(env_.CreateDir("/c", 0700).ok());
  ASSERT_TRUE(env_.SyncDir("/").ok());
  Write("/c/synced", "durable", /*sync=*/true);
  Write("/c/unsynced_data", "lost");
  ASSERT_TRUE(env_.SyncDir("/c").ok());
  Write("/c/second", "synced by the second SyncDir", /*sync=*/true);

  // More data after the Sync rolls back to the synced prefix.
  auto f = env_.CreateFile("/c/grow", WriteFileOptions{});
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->Append(MemBytes("kept")).ok());
  ASSERT_TRUE((*f)->Sync().ok());
  ASSERT_TRUE((*f)->Append(MemBytes("+lost")).ok());
  ASSERT_TRUE((*f)->Close().ok());
  ASSERT_TRUE(env_.SyncDir("/c").ok());
  Write("/c/late", "gone", /*sync=*/true);  // its name was never synced
  // Removed without a SyncDir: comes back.
  ASSERT_TRUE(env_.RemoveFile("/c/synced").ok());

  env_.DropUnsyncedData();
  EXPECT_THAT(*env_.ListDir("/c"),
              UnorderedElementsAre("synced", "unsynced_data", "second", "grow"));
  env_.DropUnsyncedData();  // idempotent
  EXPECT_EQ(Read("/c/synced"), "durable");
  EXPECT_EQ(Read("/c/unsynced_data"), "");
  EXPECT_EQ(Read("/c/grow"), "kept");
  EXPECT_EQ(Read("/c/second"), "synced by the second SyncDir");
  EXPECT_EQ(env_.UsedBytes(), 7u + 0u + 4u + 28u);
}

TEST_F(MemoryEnvTest, DropUnsyncedDataRemovesNamesNotSynced) {
  ASSERT_TRUE(env_.CreateDir("/c", 0700).ok());
  ASSERT_TRUE(env_.SyncDir("/").ok());
  Write("/c/f", "data", /*sync=*/true);
  env_.DropUnsyncedData();
  EXPECT_THAT(*env_.ListDir("/c"), IsEmpty());
  EXPECT_EQ(env_.UsedBytes(), 0u);

  // A folder whose parent was not synced vanishes with everything in it,
  // even though the folder itself was synced.
  ASSERT_TRUE(env_.CreateDirs("/c/d/e", 0700).ok());
  Write("/c/d/e/f", "x", true);
  ASSERT_TRUE(env_.SyncDir("/c/d/e").ok());
  ASSERT_TRUE(env_.SyncDir("/c/d").ok());
  env_.DropUnsyncedData();
  EXPECT_EQ(env_.Stat("/c/d").status().code(), StatusCode::kNotFound);
}

TEST_F(MemoryEnvTest, DropUnsyncedDataRevertsRenames) {
  ASSERT_TRUE(env_.CreateDir("/c", 0700).ok());
  ASSERT_TRUE(env_.SyncDir("/").ok());
  Write("/c/tmp1", "one", true);
  Write("/c/final", "old", true);
  ASSERT_TRUE(env_.SyncDir("/c").ok());
  ASSERT_TRUE(env_.RenameFile("/c/tmp1", "/c/final").ok());
  env_.DropUnsyncedData();  // the rename was not made durable
  EXPECT_THAT(*env_.ListDir("/c"), UnorderedElementsAre("tmp1", "final"));
  EXPECT_EQ(Read("/c/final"), "old");
  EXPECT_EQ(Read("/c/tmp1"), "one");

  ASSERT_TRUE(env_.RenameFile("/c/tmp1", "/c/final").ok());
  ASSERT_TRUE(env_.SyncDir("/c").ok());
  env_.DropUnsyncedData();
  EXPECT_THAT(*env_.ListDir("/c"), ElementsAre("final"));
  EXPECT_EQ(Read("/c/final"), "one");
}

TEST_F(MemoryEnvTest, WriteFileAtomicWithSyncSurvivesPowerLoss) {
  ASSERT_TRUE(env_.CreateDir("/c", 0700).ok());
  ASSERT_TRUE(env_.SyncDir("/").ok());
  WriteFileOptions durable;
  durable.sync = true;
  ASSERT_TRUE(env_.WriteFileAtomic("/c/meta", MemBytes("v1"), durable).ok());
  ASSERT_TRUE(env_.WriteFileAtomic("/c/meta", MemBytes("v2"), WriteFileOptions{}).ok());
  EXPECT_EQ(Read("/c/meta"), "v2");
  EXPECT_THAT(*env_.ListDir("/c"), ElementsAre("meta"));
  env_.DropUnsyncedData();
  EXPECT_EQ(Read("/c/meta"), "v1");
  EXPECT_THAT(*env_.ListDir("/c"), ElementsAre("meta"));
}

TEST_F(MemoryEnvTest, SyncFileSystemMakesEverythingDurable) {
  ASSERT_TRUE(env_.CreateDirs("/a/b", 0700).ok());
  Write("/a/b/f", "all of it");
  ASSERT_TRUE(env_.SyncFileSystem("/a").ok());
  Write("/a/b/g", "not this");
  env_.DropUnsyncedData();
  EXPECT_EQ(Read("/a/b/f"), "all of it");
  EXPECT_EQ(Read("/a/b/g"), "<NotFound>");
}

TEST_F(MemoryEnvTest, ThreadsWriteConcurrently) {
  constexpr int kThreads = 4;
  constexpr int kAppends = 200;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.push_back(env_.StartThread([this, t] {
      const std::string path = "/t" + std::to_string(t);
      auto f = env_.CreateFile(path, WriteFileOptions{});
      if (!f.ok()) return;
      for (int i = 0; i < kAppends; ++i) (void)(*f)->Append(MemBytes("ab"));
      (void)(*f)->Close();
      (void)env_.FreeSpace("/");
      (void)env_.ListDir("/");
    }));
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(env_.Stat("/t" + std::to_string(t))->size, 2u * kAppends);
  }
  EXPECT_EQ(env_.UsedBytes(), 2u * kAppends * kThreads);
}

}  // namespace
}  // namespace kvtier
