// DiskIndex: schema, per-signature totals kept by triggers, touches, errors.
// (Eviction over the index is Capacity's: disk_capacity_test.cc.)
#include "disk/disk_index.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>

#include "disk/disk_test_util.h"
#include "disk/sqlite_db.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier::disk {
namespace {

using disk_test::TempDir;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

IndexRow Row(uint64_t i, int64_t sig, uint64_t size, int64_t access) {
  IndexRow r;
  r.key = TestBlockKey(i);
  r.sig_id = sig;
  r.size = size;
  r.created_at_us = access;
  r.last_access_us = access;
  return r;
}

std::unique_ptr<DiskIndex> OpenIndex(const std::string& path) {
  auto idx = DiskIndex::Open(path, IndexOptions{});
  EXPECT_THAT(idx, IsOk());
  return idx.ok() ? std::move(idx).value() : nullptr;
}

// Processes that open a new index at the same moment all read it in
// rollback-journal mode and each needs an exclusive lock to switch it to
// WAL; SQLite refuses one of them at once instead of waiting (waiting
// would deadlock), and that Open failed ("PRAGMA journal_mode=WAL: database
// is locked"): DiskMultiProcessTest's children exited kExitSetup now and
// then.
TEST(DiskIndexTest, ProcessesOpeningANewIndexAtTheSameMomentAllSucceed) {
  TempDir dir;
  constexpr int kFolders = 30, kOpeners = 8;
  for (int f = 0; f < kFolders; ++f) {
    const std::string path = dir.Sub("i" + std::to_string(f) + ".sqlite");
    int go[2];
    ASSERT_EQ(pipe(go), 0);
    std::vector<pid_t> pids;
    for (int t = 0; t < kOpeners; ++t) {
      const pid_t pid = fork();
      if (pid == 0) {
        close(go[1]);
        char c;
        while (read(go[0], &c, 1) < 0 && errno == EINTR) {
        }
        // Released all at once: the parent closed its end.
        auto index = DiskIndex::Open(path, IndexOptions{});
        if (!index.ok()) std::fprintf(stderr, "%s\n", index.status().ToString().c_str());
        _exit(index.ok() ? 0 : 1);
      }
      ASSERT_GT(pid, 0);
      pids.push_back(pid);
    }
    close(go[0]);
    close(go[1]);
    for (pid_t pid : pids) {
      int status = 0;
      ASSERT_EQ(waitpid(pid, &status, 0), pid);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "folder " << f;
    }
  }
}

// An index that cannot be opened names the file and the system call that
// failed (SQLite's VFS report, kept per thread in sqlite_db.cc), not only
// SQLite's own "unable to open database file".
TEST(DiskIndexTest, AnOpenFailureNamesTheFileAndTheCall) {
  TempDir dir;
  const std::string path = dir.Sub("index.sqlite");
  std::filesystem::create_directory(path);  // a folder in the index's place
  auto idx = DiskIndex::Open(path, IndexOptions{});
  ASSERT_FALSE(idx.ok());
  EXPECT_THAT(idx.status().message(), HasSubstr("(open(" + path + ") - "));
}

TEST(DiskIndexTest, TotalsFollowInsertsReplacementsAndDeletesPerSignature) {
  TempDir dir;
  auto idx = OpenIndex(dir.Sub("index.sqlite"));
  ASSERT_NE(idx, nullptr);
  auto a = idx->SignatureId("sig-a");
  auto b = idx->SignatureId("sig-b");
  ASSERT_THAT(a, IsOk());
  ASSERT_THAT(b, IsOk());
  EXPECT_NE(*a, *b);
  EXPECT_EQ(*idx->SignatureId("sig-a"), *a);
  std::vector<IndexRow> rows = {Row(1, *a, 100, 10), Row(2, *a, 200, 20), Row(3, *b, 50, 30)};
  ASSERT_THAT(idx->Upsert(rows), IsOk());
  auto t = idx->Totals();
  ASSERT_THAT(t, IsOk());
  EXPECT_EQ(t->entries, 3u);
  EXPECT_EQ(t->bytes, 350u);
  // Replacing a row moves its bytes (and signature) without double counting.
  std::vector<IndexRow> replace = {Row(2, *b, 250, 5)};
  ASSERT_THAT(idx->Upsert(replace), IsOk());
  auto per = idx->PerSignature();
  ASSERT_THAT(per, IsOk());
  ASSERT_EQ(per->size(), 2u);
  EXPECT_EQ((*per)[0].signature, "sig-a");
  EXPECT_EQ((*per)[0].blocks, 1u);
  EXPECT_EQ((*per)[0].bytes, 100u);
  EXPECT_EQ((*per)[1].signature, "sig-b");
  EXPECT_EQ((*per)[1].blocks, 2u);
  EXPECT_EQ((*per)[1].bytes, 300u);
  auto row2 = idx->Lookup(TestBlockKey(2));
  ASSERT_THAT(row2, IsOk());
  ASSERT_TRUE(row2->has_value());
  EXPECT_EQ((*row2)->last_access_us, 20);  // the later access time is kept
  EXPECT_EQ((*row2)->size, 250u);
  std::vector<BlockKey> del = {TestBlockKey(1), TestBlockKey(9)};
  auto n = idx->Delete(del);
  ASSERT_THAT(n, IsOk());
  EXPECT_EQ(*n, 1u);
  t = idx->Totals();
  EXPECT_EQ(t->entries, 2u);
  EXPECT_EQ(t->bytes, 300u);
  EXPECT_EQ(idx->PerSignature()->size(), 1u);  // sig-a has no blocks left
  EXPECT_EQ(*idx->IntegrityCheck(), "ok");
}

// A touch records an access now: the row becomes the newest, even when the
// time given is earlier than the row's (a clock that stepped back), and is
// never moved back.
TEST(DiskIndexTest, TouchMakesTheRowTheNewest) {
  TempDir dir;
  auto idx = OpenIndex(dir.Sub("index.sqlite"));
  int64_t sig = *idx->SignatureId("s");
  std::vector<IndexRow> rows = {Row(1, sig, 10, 100)};
  ASSERT_THAT(idx->Upsert(rows), IsOk());
  std::vector<std::pair<BlockKey, int64_t>> t1 = {{TestBlockKey(1), 50}, {TestBlockKey(7), 1}};
  ASSERT_THAT(idx->Touch(t1), IsOk());
  EXPECT_EQ((*idx->Lookup(TestBlockKey(1)))->last_access_us, 101);
  std::vector<std::pair<BlockKey, int64_t>> t2 = {{TestBlockKey(1), 500}};
  ASSERT_THAT(idx->Touch(t2), IsOk());
  EXPECT_EQ((*idx->Lookup(TestBlockKey(1)))->last_access_us, 500);
  EXPECT_FALSE(idx->Lookup(TestBlockKey(7))->has_value());
}

TEST(DiskIndexTest, RowsPersistAcrossReopenAndPrefixRangesAreExact) {
  TempDir dir;
  std::string path = dir.Sub("index.sqlite");
  std::set<BlockKey> by_prefix;
  uint8_t prefix = TestBlockKey(0).bytes[0];
  {
    auto idx = OpenIndex(path);
    int64_t sig = *idx->SignatureId("s");
    std::vector<IndexRow> rows;
    for (uint64_t i = 0; i < 300; ++i) {
      rows.push_back(Row(i, sig, i + 1, static_cast<int64_t>(i)));
      if (rows.back().key.bytes[0] == prefix) by_prefix.insert(rows.back().key);
    }
    ASSERT_THAT(idx->Upsert(rows), IsOk());
  }
  auto idx = OpenIndex(path);
  EXPECT_EQ(idx->Totals()->entries, 300u);
  auto in_prefix = idx->RowsWithPrefix(prefix);
  ASSERT_THAT(in_prefix, IsOk());
  std::set<BlockKey> got;
  for (const IndexRow& r : *in_prefix) got.insert(r.key);
  EXPECT_EQ(got, by_prefix);
  uint64_t seen = 0;
  BlockKey last{};
  ASSERT_THAT(idx->ForEachRow(
                  [&](const IndexRow& r) {
                    if (seen > 0) {
                      EXPECT_LT(last, r.key);
                    }
                    last = r.key;
                    ++seen;
                  },
                  /*batch=*/7),
              IsOk());
  EXPECT_EQ(seen, 300u);
}

// `kvtier ls` streams through this: oldest access first, ties in key order,
// every row once across batch boundaries that fall inside a run of ties.
TEST(DiskIndexTest, ForEachRowByAccessIsOldestFirstWithTiesInKeyOrder) {
  TempDir dir;
  auto idx = OpenIndex(dir.Sub("index.sqlite"));
  int64_t sig = *idx->SignatureId("s");
  std::vector<IndexRow> rows;
  for (uint64_t i = 0; i < 300; ++i) {
    rows.push_back(Row(i, sig, i + 1, 1000 + static_cast<int64_t>((i * 37) % 40)));
  }
  ASSERT_THAT(idx->Upsert(rows, AccessTimes::kAsGiven), IsOk());
  std::vector<std::pair<int64_t, BlockKey>> want;
  for (const IndexRow& r : rows) want.emplace_back(r.last_access_us, r.key);
  std::sort(want.begin(), want.end());
  std::vector<std::pair<int64_t, BlockKey>> got;
  ASSERT_THAT(idx->ForEachRowByAccess(
                  [&](const IndexRow& r) { got.emplace_back(r.last_access_us, r.key); },
                  /*batch=*/7),
              IsOk());
  EXPECT_EQ(got, want);
  got.clear();
  ASSERT_THAT(idx->ForEachRowByAccess(
                  [&](const IndexRow& r) { got.emplace_back(r.last_access_us, r.key); }),
              IsOk());
  EXPECT_EQ(got, want);
}

// Rebuild() moves the files only once no connection is in use: a tier's
// repair once moved them while another thread's lease opened the path, that
// connection found a new empty file beside the old WAL, and the reconcile
// after the repair failed ("disk I/O error") with every row lost
// (DamagedPageTest, under load). A holder that asks for another connection
// meanwhile gets it: no deadlock.
TEST(DiskIndexRebuildTest, WaitsForTheConnectionsInUseAndServesTheirHolders) {
  TempDir dir;
  const std::string path = dir.Sub("index.sqlite");
  auto idx = OpenIndex(path);
  int64_t sig = *idx->SignatureId("s");
  std::vector<IndexRow> rows;
  for (uint64_t i = 0; i < 10; ++i) rows.push_back(Row(i, sig, i + 1, 1000 + i));
  ASSERT_THAT(idx->Upsert(rows, AccessTimes::kAsGiven), IsOk());

  std::atomic<bool> moved{false}, released{false}, moved_while_held{false};
  Status rebuilt = Status::Internal("not run");
  std::thread rebuilder;
  {
    auto tx = idx->BeginWrite();  // a connection on lease
    ASSERT_THAT(tx, IsOk());
    rebuilder = std::thread([&] {
      rebuilt = idx->Rebuild([&] {
        moved = true;
        moved_while_held = !released.load();
        for (const char* suffix : {"", "-wal", "-shm"}) {
          std::error_code ec;
          std::filesystem::rename(path + suffix, path + ".old" + suffix, ec);
        }
        return Status::Ok();
      });
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the rebuild waits
    EXPECT_FALSE(moved.load());
    auto again = idx->Lookup(rows[4].key);  // a second connection, for the holder
    ASSERT_THAT(again, IsOk());
    EXPECT_TRUE(again->has_value());
    released = true;
  }
  rebuilder.join();
  ASSERT_THAT(rebuilt, IsOk());
  EXPECT_TRUE(moved.load());
  EXPECT_FALSE(moved_while_held.load());
  // The new file: empty, the signature's id kept, writable.
  auto gone = idx->Lookup(rows[0].key);
  ASSERT_THAT(gone, IsOk());
  EXPECT_FALSE(gone->has_value());
  ASSERT_THAT(idx->Upsert(std::vector<IndexRow>{rows[3]}, AccessTimes::kAsGiven), IsOk());
  auto back = idx->Lookup(rows[3].key);
  ASSERT_THAT(back, IsOk());
  ASSERT_TRUE(back->has_value());
  EXPECT_EQ((*back)->sig_id, sig);
}

// A connection that does not come back bounds the wait: after
// busy_timeout_ms the rebuild gives up (kUnavailable), moves nothing, and
// the index serves on.
TEST(DiskIndexRebuildTest, AConnectionHeldTooLongFailsTheRebuildAndMovesNothing) {
  TempDir dir;
  const std::string path = dir.Sub("index.sqlite");
  IndexOptions o;
  o.busy_timeout_ms = 300;
  auto opened = DiskIndex::Open(path, o);
  ASSERT_THAT(opened, IsOk());
  std::unique_ptr<DiskIndex> idx = std::move(opened).value();
  int64_t sig = *idx->SignatureId("s");
  ASSERT_THAT(idx->Upsert(std::vector<IndexRow>{Row(1, sig, 10, 1000), Row(2, sig, 10, 1001)},
                          AccessTimes::kAsGiven),
              IsOk());
  bool moved = false;
  Status rebuilt = Status::Ok();
  {
    auto tx = idx->BeginWrite();
    ASSERT_THAT(tx, IsOk());
    std::thread t([&] {
      rebuilt = idx->Rebuild([&] {
        moved = true;
        return Status::Ok();
      });
    });
    t.join();  // returns while the transaction still holds its connection
  }
  EXPECT_THAT(rebuilt, StatusIs(StatusCode::kUnavailable));
  EXPECT_THAT(rebuilt.message(), HasSubstr("1 connection(s) still in use after 300 ms"));
  EXPECT_FALSE(moved);
  auto row = idx->Lookup(TestBlockKey(2));
  ASSERT_THAT(row, IsOk());
  EXPECT_TRUE(row->has_value());
}

TEST(DiskIndexTest, NotADatabaseIsCorruption) {
  TempDir dir;
  std::string path = dir.Sub("index.sqlite");
  { std::ofstream(path) << std::string(8192, 'x'); }
  EXPECT_THAT(DiskIndex::Open(path, IndexOptions{}), StatusIs(StatusCode::kCorruption));
}

TEST(DiskIndexTest, NewerSchemaIsRefused) {
  TempDir dir;
  std::string path = dir.Sub("index.sqlite");
  {
    auto db = SqliteDb::Open(path, SqliteDb::OpenMode::kReadWriteCreate, 1000);
    ASSERT_THAT(db, IsOk());
    ASSERT_THAT((*db)->Exec("PRAGMA user_version = 7"), IsOk());
  }
  EXPECT_THAT(DiskIndex::Open(path, IndexOptions{}),
              StatusIs(StatusCode::kFailedPrecondition, HasSubstr("schema version 7")));
}

TEST(DiskIndexTest, MissingIndexIsNotFoundWhenCreationIsOff) {
  TempDir dir;
  IndexOptions o;
  o.create_if_missing = false;
  EXPECT_THAT(DiskIndex::Open(dir.Sub("none.sqlite"), o), StatusIs(StatusCode::kNotFound));
}

}  // namespace
}  // namespace kvtier::disk

namespace kvtier::disk {
namespace {

// A read-only bind mount of `src` at `where`, for the test's life (root only).
class ReadOnlyMount {
 public:
  ReadOnlyMount(const std::string& src, const std::string& where) : where_(where) {
    if (::mount(src.c_str(), where.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      error_ = std::strerror(errno);
      return;
    }
    mounted_ = true;
    if (::mount(nullptr, where.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) != 0) {
      error_ = std::strerror(errno);
      read_only_ = false;
      return;
    }
    read_only_ = true;
  }
  ~ReadOnlyMount() {
    if (mounted_) ::umount2(where_.c_str(), MNT_DETACH);
  }
  bool ok() const { return mounted_ && read_only_; }
  const std::string& error() const { return error_; }

 private:
  std::string where_;
  std::string error_;
  bool mounted_ = false;
  bool read_only_ = false;
};

IndexOptions ReadOnly() {
  IndexOptions o;
  o.read_only = true;
  return o;
}

TEST(DiskIndexReadOnlyTest, ReadsRowsAndRefusesEveryWriteAndCreatesNothing) {
  TempDir dir;
  const std::string path = dir.Sub("index.sqlite");
  {
    auto idx = OpenIndex(path);
    ASSERT_NE(idx, nullptr);
    auto sig = idx->SignatureId("sig");
    ASSERT_THAT(sig, IsOk());
    ASSERT_THAT(idx->Upsert(std::vector<IndexRow>{Row(1, *sig, 100, 5), Row(2, *sig, 50, 6)}),
                IsOk());
  }
  auto ro = DiskIndex::Open(path, ReadOnly());
  ASSERT_THAT(ro, IsOk());
  auto totals = (*ro)->Totals();
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->entries, 2u);
  EXPECT_EQ(totals->bytes, 150u);
  auto row = (*ro)->Lookup(TestBlockKey(2));
  ASSERT_THAT(row, IsOk());
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->size, 50u);
  EXPECT_THAT((*ro)->Upsert(std::vector<IndexRow>{Row(3, 1, 1, 1)}),
              StatusIs(StatusCode::kIOError));
  EXPECT_THAT((*ro)->Delete(std::vector<BlockKey>{TestBlockKey(1)}),
              StatusIs(StatusCode::kIOError));
  totals = (*ro)->Totals();
  ASSERT_THAT(totals, IsOk());
  EXPECT_EQ(totals->entries, 2u);
  // Nothing to open is NotFound, and opening it created nothing.
  EXPECT_THAT(DiskIndex::Open(dir.Sub("none.sqlite"), ReadOnly()), StatusIs(StatusCode::kNotFound));
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("none.sqlite")));
}

TEST(DiskIndexReadOnlyTest, OpensInAFolderThatCannotBeWritten) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("src"));
  std::filesystem::create_directories(dir.Sub("ro"));
  {
    auto idx = OpenIndex(dir.Sub("src/index.sqlite"));
    ASSERT_NE(idx, nullptr);
    auto sig = idx->SignatureId("sig");
    ASSERT_THAT(sig, IsOk());
    ASSERT_THAT(idx->Upsert(std::vector<IndexRow>{Row(7, *sig, 70, 5)}), IsOk());
  }  // the last connection checkpoints and removes -wal and -shm
  ASSERT_FALSE(std::filesystem::exists(dir.Sub("src/index.sqlite-shm")));
  ReadOnlyMount mount(dir.Sub("src"), dir.Sub("ro"));
  if (!mount.ok()) GTEST_SKIP() << "read-only bind mount refused: " << mount.error();
  // Even root cannot create the -shm file on a read-only mount.
  EXPECT_THAT(DiskIndex::Open(dir.Sub("ro/index.sqlite"), IndexOptions{}),
              StatusIs(StatusCode::kIOError));
  auto ro = DiskIndex::Open(dir.Sub("ro/index.sqlite"), ReadOnly());
  ASSERT_THAT(ro, IsOk());
  auto row = (*ro)->Lookup(TestBlockKey(7));
  ASSERT_THAT(row, IsOk());
  ASSERT_TRUE(row->has_value());
  EXPECT_EQ((*row)->size, 70u);
  auto per = (*ro)->PerSignature();
  ASSERT_THAT(per, IsOk());
  ASSERT_EQ(per->size(), 1u);
  EXPECT_EQ((*per)[0].signature, "sig");
}

TEST(SqliteUriTest, PercentEncodesEverythingButUnreservedAndSlash) {
  EXPECT_EQ(UriPath("/a/b-c_d.e~f"), "/a/b-c_d.e~f");
  EXPECT_EQ(UriPath("/x y/?#%"), "/x%20y/%3F%23%25");
}

}  // namespace
}  // namespace kvtier::disk
