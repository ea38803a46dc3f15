// Checks a cache folder after a crash or a multi-process run: the index
// passes PRAGMA integrity_check, a reopened tier (with its reconcile) leaves
// no temp files, one row per block file, and every block file is served
// with exactly the bytes the generator makes for its key.
#ifndef KVTIER_TESTS_DISK_VERIFY_H_
#define KVTIER_TESTS_DISK_VERIFY_H_

#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "disk/disk_index.h"
#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"

namespace kvtier::disk_test {

struct FolderReport {
  std::set<BlockKey> served;  // keys whose block loaded and checked out
  uint64_t block_files = 0;   // block files after the reconcile
  uint64_t temp_files = 0;    // temp files after the reconcile
  uint64_t rows = 0;          // index rows after the reconcile
  uint64_t quarantined = 0;   // files the reopened tier quarantined
  uint64_t wrong = 0;         // loads that returned bytes that fail the check
};

inline std::string IndexIntegrity(const std::string& dir) {
  auto index = disk::DiskIndex::Open(dir + "/index.sqlite", disk::IndexOptions{});
  if (!index.ok()) return index.status().ToString();
  auto check = (*index)->IntegrityCheck();
  return check.ok() ? *check : check.status().ToString();
}

// Reopens `dir` and loads every block file and every row found there.
inline FolderReport VerifyFolder(const std::string& dir, const DiskTierOptions* base = nullptr) {
  FolderReport rep;
  EXPECT_EQ(IndexIntegrity(dir), "ok");
  DiskTierOptions o = base != nullptr ? *base : TestOptions(dir);
  o.dir = dir;
  o.reconcile_on_open = true;
  // As the children count: a limit in file lengths (ControlledEnv says a
  // file takes what it holds), so the check's own reconcile evicts nothing
  // the children's limit kept.
  static disk_test::ControlledEnv* const env = new disk_test::ControlledEnv(Env::Default());
  auto tier = DiskTier::Open(o, env);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  if (!tier.ok()) return rep;
  (*tier)->WaitForBackgroundReconcile();
  std::set<BlockKey> keys;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir + "/blocks", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (!it->is_regular_file()) continue;
    std::string name = it->path().filename().string();
    std::string sub = it->path().parent_path().filename().string();
    auto key = BlockKey::FromHex(sub + std::string(62, '0'));
    if (!key) continue;
    disk::ParsedEntry e = disk::ParseBlockDirEntry(name, key->bytes[0]);
    if (e.kind == disk::EntryKind::kBlock) {
      ++rep.block_files;
      keys.insert(e.key);
    } else if (e.kind == disk::EntryKind::kTemp) {
      ++rep.temp_files;
    }
  }
  rep.rows = (*tier)->Stats().entries;
  for (const BlockKey& key : keys) {
    std::vector<std::byte> buf(64 << 10);
    auto r = (*tier)->Load(key, buf);
    if (!r.ok() || !r->has_value()) continue;
    if (CheckBlockFile(std::span(buf).first(**r), TinyLayout(), key).ok()) {
      rep.served.insert(key);
    } else {
      ++rep.wrong;
    }
  }
  rep.quarantined = (*tier)->Stats().quarantined;
  EXPECT_TRUE((*tier)->Close().ok());
  return rep;
}

}  // namespace kvtier::disk_test

#endif  // KVTIER_TESTS_DISK_VERIFY_H_
