// Helpers for disk-tier tests (unit tests in src/disk/ and the crash, fault
// and multi-process tests in tests/): a temporary folder, blocks whose
// content is a pure function of their key, and small tier options.
//
// Test-only: included by *_test.cc files, never by the library.
#ifndef KVTIER_DISK_DISK_TEST_UTIL_H_
#define KVTIER_DISK_DISK_TEST_UTIL_H_

#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvtier/block_file.h"
#include "kvtier/block_key.h"
#include "kvtier/disk_tier.h"
#include "kvtier/layout.h"
#include "kvtier/options.h"
#include "testing/block_generator.h"

namespace kvtier::disk_test {

// A fresh folder under $TMPDIR (or /tmp), removed with its content on
// destruction.
class TempDir {
 public:
  TempDir() {
    std::string base = std::filesystem::temp_directory_path().string() + "/kvtier_disk_XXXXXX";
    std::vector<char> buf(base.begin(), base.end());
    buf.push_back('\0');
    char* made = ::mkdtemp(buf.data());
    path_ = made != nullptr ? std::string(made) : std::string();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string Sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline const ModelLayout& TinyLayout() {
  static const ModelLayout* layout = new ModelLayout(ModelLayout::Preset("tiny").value());
  return *layout;
}

// The block file of TestBlockKey(i) for `layout`.
inline SharedBlock MakeTestBlock(const ModelLayout& layout, const BlockKey& key) {
  BlockKey zero{};
  Result<BlockBuffer> buf = MakeBlockFile(layout, key, zero, zero, 1'700'000'000);
  if (!buf.ok()) return nullptr;
  return std::make_shared<const BlockBuffer>(std::move(buf).value());
}

inline SharedBlock MakeTestBlock(uint64_t i) { return MakeTestBlock(TinyLayout(), TestBlockKey(i)); }

// Options for a test folder: tiny layout, no background reconcile unless
// asked, short flush interval.
inline DiskTierOptions TestOptions(const std::string& dir,
                                   const ModelLayout& layout = TinyLayout()) {
  DiskTierOptions o;
  o.dir = dir;
  o.layout_signature = layout.Signature();
  o.writer_threads = 2;
  o.read_threads = 2;
  o.queue_max_bytes = 1 << 20;
  o.reconcile_on_open = false;
  o.touch_flush_interval_ms = 50;
  return o;
}

// Sum of the sizes of every regular file under <dir>/blocks (temp files
// included).
inline uint64_t BlockFolderBytes(const std::string& dir) {
  uint64_t total = 0;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir + "/blocks", ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code ec2;
    if (it->is_regular_file(ec2)) total += it->file_size(ec2);
  }
  return total;
}

inline std::string BlockFilePath(const std::string& dir, const BlockKey& key) {
  std::string hex = key.Hex();
  return dir + "/blocks/" + hex.substr(0, 2) + "/" + hex + ".safetensors";
}

}  // namespace kvtier::disk_test

#endif  // KVTIER_DISK_DISK_TEST_UTIL_H_
