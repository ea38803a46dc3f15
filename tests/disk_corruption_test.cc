// Damaged folders: bit flips anywhere in a file, truncations, appended bytes,
// swapped files, files replaced by other valid blocks or other layouts,
// foreign files and deleted files. Every damaged block is a miss — on the
// read path and after a reconcile — and every intact block is served exactly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

namespace fs = std::filesystem;
using disk_test::BlockFilePath;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using disk_test::TinyLayout;
using testing::IsOk;

std::vector<char> ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void WriteAll(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

enum class Damage {
  kBitFlip,
  kTruncate,
  kAppend,
  kSwap,         // exchanged with the next damaged block's file
  kOtherBlock,   // a valid block of another key under this name
  kOtherLayout,  // this key's block, but of another layout
  kForeign,      // random bytes of the same size
  kDelete,
  kNone,
};
constexpr int kDamageKinds = 9;

class DiskCorruptionTest : public ::testing::TestWithParam<bool> {};

// GetParam(): true = detect through a reconcile pass first, false = on load.
TEST_P(DiskCorruptionTest, EveryDamagedBlockIsAMissAndEveryIntactOneIsExact) {
  const bool reconcile_first = GetParam();
  TempDir dir;
  constexpr uint64_t kBlocks = 9 * 40;
  {
    auto tier = DiskTier::Open(TestOptions(dir.path()), Env::Default());
    ASSERT_THAT(tier, IsOk());
    for (uint64_t i = 0; i < kBlocks; ++i) {
      ASSERT_THAT((*tier)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
    }
    ASSERT_THAT((*tier)->Close(), IsOk());
  }
  std::mt19937_64 rng(reconcile_first ? 11 : 12);
  ModelLayout other = ModelLayout::Preset("tiny", 32).value();
  std::vector<Damage> damage(kBlocks);
  uint64_t flips_in_header = 0;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    damage[i] = static_cast<Damage>(i % kDamageKinds);
    const std::string path = BlockFilePath(dir.path(), TestBlockKey(i));
    std::vector<char> bytes = ReadAll(path);
    ASSERT_FALSE(bytes.empty());
    switch (damage[i]) {
      case Damage::kBitFlip: {
        uint64_t n = 0;
        for (int b = 7; b >= 0; --b) n = (n << 8) | static_cast<uint8_t>(bytes[b]);
        size_t pos = rng() % bytes.size();
        if (pos < 8 + n) ++flips_in_header;
        bytes[pos] = static_cast<char>(bytes[pos] ^ (1 << (rng() % 8)));
        WriteAll(path, bytes);
        break;
      }
      case Damage::kTruncate:
        bytes.resize(rng() % bytes.size());
        WriteAll(path, bytes);
        break;
      case Damage::kAppend:
        bytes.push_back(static_cast<char>(rng()));
        WriteAll(path, bytes);
        break;
      case Damage::kSwap:  // done below, in pairs
        break;
      case Damage::kOtherBlock: {
        SharedBlock b = MakeTestBlock(TinyLayout(), TestBlockKey(i + 1'000'000));
        WriteAll(path, std::vector<char>(reinterpret_cast<const char*>(b->data()),
                                         reinterpret_cast<const char*>(b->data()) + b->size()));
        break;
      }
      case Damage::kOtherLayout: {
        SharedBlock b = MakeTestBlock(other, TestBlockKey(i));
        WriteAll(path, std::vector<char>(reinterpret_cast<const char*>(b->data()),
                                         reinterpret_cast<const char*>(b->data()) + b->size()));
        break;
      }
      case Damage::kForeign:
        for (char& c : bytes) c = static_cast<char>(rng());
        WriteAll(path, bytes);
        break;
      case Damage::kDelete:
        fs::remove(path);
        break;
      case Damage::kNone:
        break;
    }
  }
  // Blocks i and i + 9 (both kSwap) exchange their files.
  for (uint64_t i = static_cast<uint64_t>(Damage::kSwap); i + kDamageKinds < kBlocks;
       i += 2 * kDamageKinds) {
    const std::string a = BlockFilePath(dir.path(), TestBlockKey(i));
    const std::string b = BlockFilePath(dir.path(), TestBlockKey(i + kDamageKinds));
    fs::rename(a, a + ".x");
    fs::rename(b, a);
    fs::rename(a + ".x", b);
  }
  EXPECT_GT(flips_in_header, 0u);  // flips hit both the header and the data

  DiskTierOptions o = TestOptions(dir.path());
  auto tier = DiskTier::Open(o, Env::Default());
  ASSERT_THAT(tier, IsOk());
  DiskTier* t = tier->get();
  if (reconcile_first) {
    ASSERT_THAT(t->Reconcile(), IsOk());
  }
  uint64_t damaged = 0, quarantine_expected = 0, other_layout_kept = 0;
  for (uint64_t i = 0; i < kBlocks; ++i) {
    std::vector<std::byte> buf(16384);
    auto r = t->Load(TestBlockKey(i), buf);
    ASSERT_THAT(r, IsOk());
    if (damage[i] == Damage::kNone) {
      ASSERT_TRUE(r->has_value()) << i;
      EXPECT_THAT(CheckBlockFile(std::span(buf).first(**r), TinyLayout(), TestBlockKey(i)), IsOk());
      continue;
    }
    ++damaged;
    EXPECT_FALSE(r->has_value()) << "damage " << static_cast<int>(damage[i]) << " block " << i;
    if (damage[i] == Damage::kOtherLayout) {
      // A valid block of another layout (its own meta_checksum holds): the
      // reconcile, or the load that found it in place of its row, indexes
      // it under its own signature, as another writer's file; it stays,
      // counted, never served here.
      ++other_layout_kept;
      EXPECT_TRUE(fs::exists(BlockFilePath(dir.path(), TestBlockKey(i)))) << i;
      continue;
    }
    if (damage[i] != Damage::kDelete) ++quarantine_expected;
    EXPECT_FALSE(fs::exists(BlockFilePath(dir.path(), TestBlockKey(i)))) << i;
  }
  DiskTierStats s = t->Stats();
  EXPECT_EQ(s.hits, kBlocks - damaged);
  EXPECT_EQ(s.misses, damaged);
  EXPECT_EQ(s.incompatible_misses, other_layout_kept);
  EXPECT_EQ(s.quarantined, quarantine_expected);
  EXPECT_EQ(s.quarantine_files, quarantine_expected);
  EXPECT_EQ(s.compatible_entries, kBlocks - damaged);
  EXPECT_EQ(s.entries, kBlocks - damaged + other_layout_kept);
}

// The block checksum covers only the data section: an edit of a metadata
// value that keeps the header valid JSON must still be caught (by the
// header hash in the index row).
TEST(DiskHeaderEditTest, MetadataEditThatStillDecodesIsAMiss) {
  TempDir dir;
  auto tier = DiskTier::Open(TestOptions(dir.path()), Env::Default());
  ASSERT_THAT(tier, IsOk());
  for (uint64_t i = 0; i < 2; ++i) {
    ASSERT_THAT((*tier)->Store(TestBlockKey(i), MakeTestBlock(i)), IsOk());
  }
  ASSERT_THAT((*tier)->Flush(), IsOk());
  const std::string path = BlockFilePath(dir.path(), TestBlockKey(0));
  std::vector<char> bytes = ReadAll(path);
  std::string text(bytes.begin(), bytes.end());
  size_t at = text.find("1700000000");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 9] = '1';  // created_at 1700000000 -> 1700000001
  WriteAll(path, bytes);
  // The data checksum still matches; the header's meta_checksum does not...
  std::vector<std::byte> raw(reinterpret_cast<const std::byte*>(bytes.data()),
                             reinterpret_cast<const std::byte*>(bytes.data()) + bytes.size());
  EXPECT_EQ(BlockFileErrorOf(CheckBlockFile(raw, TinyLayout(), TestBlockKey(0))),
            BlockFileError::kMetaChecksumMismatch);
  // ...and they are not the bytes that were stored: a miss, quarantined.
  std::vector<std::byte> buf(16384);
  auto r = (*tier)->Load(TestBlockKey(0), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_FALSE(r->has_value());
  EXPECT_EQ((*tier)->Stats().quarantined, 1u);
  r = (*tier)->Load(TestBlockKey(1), buf);
  ASSERT_THAT(r, IsOk());
  EXPECT_TRUE(r->has_value());
}

INSTANTIATE_TEST_SUITE_P(Paths, DiskCorruptionTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "AfterReconcile" : "OnLoad");
                         });

}  // namespace
}  // namespace kvtier
