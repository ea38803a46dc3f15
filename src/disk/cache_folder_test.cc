#include "kvtier/cache_folder.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "synth/block_generator.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using disk_test::TempDir;

constexpr int kBlocks = 6;

// A cache folder with kBlocks tiny blocks stored through a DiskTier.
class CacheFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.Sub("cache");
    auto tier = DiskTier::Open(disk_test::TestOptions(dir_), Env::Default());
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    for (int i = 0; i < kBlocks; ++i) {
      keys_.push_back(TestBlockKey(i));
      ASSERT_TRUE((*tier)->Store(keys_.back(), disk_test::MakeTestBlock(i)).ok());
    }
    ASSERT_TRUE((*tier)->Flush().ok());
    ASSERT_TRUE((*tier)->Close().ok());
    std::sort(keys_.begin(), keys_.end());
    block_bytes_ = disk_test::MakeTestBlock(0)->size();
    auto info = Env::Default()->Stat(BlockPath(keys_[0]));
    ASSERT_TRUE(info.ok());
    alloc_bytes_ = info->allocated_bytes;
  }

  std::unique_ptr<CacheFolder> Open(CacheFolderAccess access = CacheFolderAccess::kReadOnly,
                                    const std::string& dir = "", Env* env = Env::Default()) {
    CacheFolderOptions o;
    o.dir = dir.empty() ? dir_ : dir;
    o.access = access;
    auto f = CacheFolder::Open(o, env);
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? std::move(f).value() : nullptr;
  }

  std::string BlockPath(const BlockKey& key) const {
    return disk::FolderLayout(dir_).BlockPath(key);
  }

  TempDir tmp_{"cache_folder_test"};
  std::string dir_;
  std::vector<BlockKey> keys_;
  uint64_t block_bytes_ = 0;
  uint64_t alloc_bytes_ = 0;  // what one block file takes on this file system
};

TEST_F(CacheFolderTest, OpenRefusesWhatIsNotACacheFolderAndCreatesNothing) {
  CacheFolderOptions o;
  o.dir = tmp_.Sub("absent");
  EXPECT_TRUE(CacheFolder::Open(o, Env::Default()).status().IsNotFound());
  EXPECT_FALSE(fs::exists(o.dir));
  o.dir = tmp_.Sub("empty");
  fs::create_directory(o.dir);
  Status s = CacheFolder::Open(o, Env::Default()).status();
  EXPECT_TRUE(s.IsNotFound()) << s.ToString();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("not a kvtier cache folder"));
  EXPECT_TRUE(fs::is_empty(o.dir));
  o.access = CacheFolderAccess::kReadWrite;
  EXPECT_TRUE(CacheFolder::Open(o, Env::Default()).status().IsNotFound());
  EXPECT_TRUE(fs::is_empty(o.dir));
  o.dir = BlockPath(keys_[0]);  // a file
  EXPECT_TRUE(CacheFolder::Open(o, Env::Default()).status().IsNotFound());
  EXPECT_FALSE(CacheFolder::Exists(Env::Default(), o.dir));
  EXPECT_FALSE(CacheFolder::Exists(Env::Default(), tmp_.Sub("empty")));
  EXPECT_TRUE(CacheFolder::Exists(Env::Default(), dir_));
}

TEST_F(CacheFolderTest, ListsEntriesAndUsage) {
  auto folder = Open();
  ASSERT_NE(folder, nullptr);
  auto entries = folder->ListEntries();
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  std::vector<BlockKey> keys;
  for (const CacheFolderEntry& e : *entries) {
    keys.push_back(e.key);
    EXPECT_EQ(e.bytes, block_bytes_);
    EXPECT_EQ(e.signature, disk_test::TinyLayout().Signature());
    EXPECT_GT(e.created_at_us, 0);
  }
  EXPECT_EQ(keys, keys_);  // key order
  auto usage = folder->PerSignature();
  ASSERT_TRUE(usage.ok());
  ASSERT_EQ(usage->size(), 1u);
  EXPECT_EQ((*usage)[0].blocks, uint64_t{kBlocks});
  EXPECT_EQ((*usage)[0].bytes, kBlocks * block_bytes_);
}

TEST_F(CacheFolderTest, ScanSortsFilesByKind) {
  const std::string sub = fs::path(BlockPath(keys_[0])).parent_path().string();
  const std::string temp = BlockPath(keys_[0]) + ".tmp.999999999.1";
  std::ofstream(temp) << "partial";
  std::ofstream(sub + "/notes.txt") << "hello";
  fs::create_directory(dir_ + "/blocks/zz");
  fs::create_directories(dir_ + "/quarantine");
  std::ofstream(dir_ + "/quarantine/1700000000-1-1-x.safetensors") << "bad";
  auto folder = Open();
  ASSERT_NE(folder, nullptr);
  auto scan = folder->Scan();
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->blocks.size(), size_t{kBlocks});
  ASSERT_EQ(scan->temps.size(), 1u);
  EXPECT_EQ(scan->temps[0].path, temp);
  EXPECT_EQ(scan->temps[0].pid, 999999999);
  EXPECT_EQ(*scan->temps[0].key, keys_[0]);
  ASSERT_EQ(scan->foreign.size(), 2u);
  EXPECT_EQ(scan->foreign[0].path, sub + "/notes.txt");
  EXPECT_EQ(scan->foreign[1].path, dir_ + "/blocks/zz");
  ASSERT_EQ(scan->quarantine.size(), 1u);
  EXPECT_EQ(scan->quarantine[0].bytes, 3u);
}

TEST_F(CacheFolderTest, VerifyNamesEachKindOfDamage) {
  auto folder = Open();
  ASSERT_NE(folder, nullptr);
  auto clean = folder->Verify({});
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  ASSERT_EQ(clean->size(), size_t{kBlocks});
  for (const CacheFileVerdict& v : *clean) EXPECT_EQ(v.reason, "") << v.path << ": " << v.message;

  // An edited created_at digit: only meta_checksum can tell.
  {
    std::fstream f(BlockPath(keys_[0]), std::ios::in | std::ios::out | std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const size_t at = text.find("\"created_at\":\"1700000000\"");
    ASSERT_NE(at, std::string::npos);
    f.seekp(static_cast<std::streamoff>(at + 14));
    f.put('2');
  }
  fs::remove(BlockPath(keys_[1]));
  const std::string other = ModelLayout::Preset("qwen2.5-0.5b").value().Signature();
  CacheVerifyOptions opts;
  auto damaged = folder->Verify(opts);
  ASSERT_TRUE(damaged.ok());
  std::map<std::string, std::string> reasons;
  for (const CacheFileVerdict& v : *damaged) {
    if (!v.reason.empty()) reasons[v.path] = v.reason;
  }
  EXPECT_EQ(reasons,
            (std::map<std::string, std::string>{{BlockPath(keys_[0]), "meta_checksum_mismatch"},
                                                {BlockPath(keys_[1]), "missing_file"}}));
  opts.signature = &other;
  auto wrong_layout = folder->Verify(opts);
  ASSERT_TRUE(wrong_layout.ok());
  EXPECT_EQ((*wrong_layout)[2].reason, "signature_mismatch");
}

TEST_F(CacheFolderTest, ASymlinkToTheFolderIsTheFolder) {
  const std::string link = tmp_.Sub("link");
  fs::create_directory_symlink(dir_, link);
  EXPECT_TRUE(CacheFolder::Exists(Env::Default(), link));
  auto folder = Open(CacheFolderAccess::kReadOnly, link);
  ASSERT_NE(folder, nullptr);
  auto entries = folder->ListEntries();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), size_t{kBlocks});
  auto verdicts = folder->Verify({});
  ASSERT_TRUE(verdicts.ok());
  ASSERT_EQ(verdicts->size(), size_t{kBlocks});
  EXPECT_EQ((*verdicts)[0].path.rfind(link + "/blocks/", 0), 0u) << (*verdicts)[0].path;
  EXPECT_EQ((*verdicts)[0].reason, "");
}

TEST_F(CacheFolderTest, ReadOnlyRefusesToApplyGc) {
  auto folder = Open();
  ASSERT_NE(folder, nullptr);
  CacheGcRequest req;
  req.max_bytes = 0;
  auto plan = folder->PlanGc(req);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->size(), size_t{kBlocks});
  EXPECT_EQ(folder->ApplyGc(*plan).status().code(), StatusCode::kFailedPrecondition);
  for (const BlockKey& k : keys_) EXPECT_TRUE(fs::exists(BlockPath(k)));
}

// Blocks stored "now" seen from 100 s later: a retention of 10 s expires
// them all; retentions whose microseconds overflow 64 bits expire none.
TEST_F(CacheFolderTest, RetentionSaturatesInsteadOfOverflowing) {
  disk_test::ControlledEnv later(Env::Default());
  later.AdvanceUnix(100'000'000);
  auto folder = Open(CacheFolderAccess::kReadOnly, "", &later);
  ASSERT_NE(folder, nullptr);
  auto expired = [&](int64_t seconds) {
    CacheGcRequest req;
    req.retention_seconds = seconds;
    auto plan = folder->PlanGc(req);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? static_cast<int>(std::count_if(
                           plan->begin(), plan->end(),
                           [](const CacheGcItem& i) { return i.reason == "expired"; }))
                     : -1;
  };
  EXPECT_EQ(expired(10), kBlocks);
  EXPECT_EQ(expired(1'000'000), 0);
  EXPECT_EQ(expired(9'223'372'036'855), 0);  // × 10^6 just overflows
  EXPECT_EQ(expired(std::numeric_limits<int64_t>::max()), 0);
  CacheGcRequest req;
  req.retention_seconds = 0;
  EXPECT_TRUE(folder->PlanGc(req).status().IsInvalidArgument());
}

TEST_F(CacheFolderTest, GcRemovesLeastRecentlyUsedFileThenRow) {
  auto folder = Open(CacheFolderAccess::kReadWrite);
  ASSERT_NE(folder, nullptr);
  CacheGcRequest req;
  req.max_bytes = 2 * alloc_bytes_;  // the budget counts allocated space
  auto plan = folder->PlanGc(req);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), size_t{kBlocks - 2});
  for (const CacheGcItem& i : *plan) EXPECT_EQ(i.reason, "over_budget");
  auto freed = folder->ApplyGc(*plan);
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_EQ(*freed, (kBlocks - 2) * block_bytes_);
  for (const CacheGcItem& i : *plan) EXPECT_FALSE(fs::exists(i.path));
  auto entries = folder->ListEntries();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 2u);
  auto verdicts = folder->Verify({});
  ASSERT_TRUE(verdicts.ok());
  ASSERT_EQ(verdicts->size(), 2u);
  for (const CacheFileVerdict& v : *verdicts) EXPECT_EQ(v.reason, "") << v.message;
}

// CacheFolderOptions::progress: one call per entry of blocks/ as a walk
// finishes it (done counting up to the entries, a foreign one included),
// then, in Gc, the bytes over the budget evicted so far, ending at all of
// them.
TEST_F(CacheFolderTest, ProgressCountsSubfoldersThenTheBytesOverTheBudget) {
  std::ofstream(dir_ + "/blocks/zz") << "foreign";
  const size_t entries =
      std::distance(fs::directory_iterator(dir_ + "/blocks"), fs::directory_iterator());
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> calls;
  CacheFolderOptions o;
  o.dir = dir_;
  o.access = CacheFolderAccess::kReadWrite;
  o.progress = [&](const char* unit, uint64_t done, uint64_t total) {
    calls.emplace_back(unit, done, total);
  };
  auto folder = CacheFolder::Open(o, Env::Default());
  ASSERT_TRUE(folder.ok()) << folder.status().ToString();
  auto walk = [&] {
    std::vector<std::tuple<std::string, uint64_t, uint64_t>> w;
    for (uint64_t i = 1; i <= entries; ++i) w.emplace_back("subfolders", i, entries);
    return w;
  };
  ASSERT_TRUE((*folder)->Scan().ok());
  EXPECT_EQ(calls, walk());
  calls.clear();
  CacheGcRequest req;
  req.max_bytes = 2 * alloc_bytes_;
  uint64_t items = 0;
  auto freed = (*folder)->Gc(req, /*dry_run=*/false, [&](const CacheGcItem&) { ++items; });
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  const uint64_t evicted = kBlocks - 2;
  EXPECT_EQ(items, 1 + evicted);  // the foreign file, then the budget
  const uint64_t over = evicted * alloc_bytes_;
  auto want = walk();
  for (uint64_t i = 1; i <= evicted; ++i) {
    want.emplace_back("bytes over the budget", i * alloc_bytes_, over);
  }
  EXPECT_EQ(calls, want);
}

// Gc in one walk: a dry run hands over the very items (and order) that
// applying then removes: quarantined files first, then each blocks/
// subfolder's (a row without its file, a dead writer's temp file, a foreign
// file, a block file with no row that does not verify), then the budget,
// least recently accessed first, a valid block file with no row (a writer
// killed before its row; its file's mtime, its access time, is of 2023)
// among the rows. What stays is indexed, the orphan adopted if it stays.
TEST_F(CacheFolderTest, GcDryRunListsWhatApplyingRemovesInTheSameOrder) {
  ASSERT_TRUE(fs::remove(BlockPath(keys_[0])));
  const std::string temp = BlockPath(keys_[1]) + ".tmp.999999999.1";
  std::ofstream(temp) << "partial";
  const std::string sub = fs::path(BlockPath(keys_[2])).parent_path().string();
  std::ofstream(sub + "/notes.txt") << "hello";
  fs::create_directories(dir_ + "/quarantine");
  std::ofstream(dir_ + "/quarantine/1700000000-1-1-x.safetensors") << "bad";
  const BlockKey orphan = TestBlockKey(100), invalid = TestBlockKey(101);
  for (const BlockKey& k : {orphan, invalid}) {
    fs::create_directories(fs::path(BlockPath(k)).parent_path());
  }
  {
    SharedBlock b = disk_test::MakeTestBlock(disk_test::TinyLayout(), orphan);
    ASSERT_NE(b, nullptr);
    std::ofstream(BlockPath(orphan), std::ios::binary)
        .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
    std::ofstream(BlockPath(invalid)) << "not a block file";
  }
  // An orphan's access time is its file's mtime, in whole seconds: left at
  // now, it came after the rows' (microseconds) whenever a second began
  // between SetUp's stores and this write (CI's tsan stage once).
  const timeval in_2023[2] = {{1700000000, 0}, {1700000000, 0}};
  ASSERT_EQ(::utimes(BlockPath(orphan).c_str(), in_2023), 0);
  CacheGcRequest req;
  // Staying before the budget: keys_[1..5] and the orphan, 6 blocks.
  req.max_bytes = 3 * alloc_bytes_;
  auto collect = [&](CacheFolder* f, bool dry_run, std::vector<CacheGcItem>* items) {
    return f->Gc(req, dry_run, [&](const CacheGcItem& i) { items->push_back(i); });
  };
  std::vector<CacheGcItem> planned, removed;
  {
    auto ro = Open();
    ASSERT_NE(ro, nullptr);
    auto none = collect(ro.get(), true, &planned);
    ASSERT_TRUE(none.ok()) << none.status().ToString();
    EXPECT_EQ(*none, 0u);
    EXPECT_EQ(collect(ro.get(), false, &removed).status().code(), StatusCode::kFailedPrecondition);
    EXPECT_TRUE(removed.empty());
  }
  EXPECT_TRUE(fs::exists(temp));  // a dry run removes nothing
  auto folder = Open(CacheFolderAccess::kReadWrite);
  ASSERT_NE(folder, nullptr);
  auto freed = collect(folder.get(), false, &removed);
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  auto paths = [](const std::vector<CacheGcItem>& items) {
    std::vector<std::string> out;
    for (const CacheGcItem& i : items) out.push_back(i.reason + " " + i.path);
    return out;
  };
  EXPECT_EQ(paths(removed), paths(planned));
  std::vector<std::string> reasons;
  for (const CacheGcItem& i : planned) reasons.push_back(i.reason);
  ASSERT_EQ(reasons.size(), 8u) << ::testing::PrintToString(paths(planned));
  EXPECT_EQ(reasons.front(), "quarantined");
  std::multiset<std::string> walked(reasons.begin() + 1, reasons.begin() + 5);
  EXPECT_EQ(walked,
            (std::multiset<std::string>{"missing_file", "dead_temp", "foreign", "invalid_orphan"}));
  EXPECT_EQ(std::vector<std::string>(reasons.begin() + 5, reasons.end()),
            std::vector<std::string>(3, "over_budget"));
  EXPECT_EQ(planned[5].path, BlockPath(orphan));  // the oldest access
  uint64_t bytes = 0;
  for (const CacheGcItem& i : planned) bytes += i.bytes;
  EXPECT_EQ(*freed, bytes);
  for (const CacheGcItem& i : planned) EXPECT_FALSE(fs::exists(i.path)) << i.path;
  // Three blocks stay, each with its row and file.
  auto entries = folder->ListEntries();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), 3u);
  auto verdicts = folder->Verify({});
  ASSERT_TRUE(verdicts.ok());
  ASSERT_EQ(verdicts->size(), 3u);
  for (const CacheFileVerdict& v : *verdicts) EXPECT_EQ(v.reason, "") << v.message;
}

// A valid block file with no row that nothing removes is adopted: no item,
// and the index counts it.
TEST_F(CacheFolderTest, GcAdoptsTheOrphansThatStay) {
  const BlockKey orphan = TestBlockKey(100);
  fs::create_directories(fs::path(BlockPath(orphan)).parent_path());
  SharedBlock b = disk_test::MakeTestBlock(disk_test::TinyLayout(), orphan);
  ASSERT_NE(b, nullptr);
  std::ofstream(BlockPath(orphan), std::ios::binary)
      .write(reinterpret_cast<const char*>(b->data()), static_cast<std::streamsize>(b->size()));
  auto folder = Open(CacheFolderAccess::kReadWrite);
  ASSERT_NE(folder, nullptr);
  std::vector<CacheGcItem> items;
  auto freed =
      folder->Gc(CacheGcRequest{}, false, [&](const CacheGcItem& i) { items.push_back(i); });
  ASSERT_TRUE(freed.ok()) << freed.status().ToString();
  EXPECT_TRUE(items.empty());
  auto entries = folder->ListEntries();
  ASSERT_TRUE(entries.ok());
  EXPECT_EQ(entries->size(), size_t{kBlocks + 1});
}

}  // namespace
}  // namespace kvtier
