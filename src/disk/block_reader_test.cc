// BlockReader: buffered and O_DIRECT reads give exact bytes and
// DecodeBlock's verdicts wherever the damage is (header, data, row).
#include "disk/block_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "disk/disk_test_util.h"
#include "disk/folder_layout.h"
#include "disk/header_hash.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier::disk {
namespace {

using disk_test::TempDir;
using testing::IsOk;

struct ReaderCase {
  bool direct;
  const char* name;
};

class BlockReaderTest : public ::testing::TestWithParam<ReaderCase> {
 protected:
  void SetUp() override {
    // 64 layers: a header of several KiB, past the first page.
    auto l = ModelLayout::Preset("tiny");
    ASSERT_THAT(l, IsOk());
    layout_ = *l;
    while (layout_.layers.size() < 64) layout_.layers.push_back(layout_.layers[0]);
    ASSERT_THAT(layout_.Validate(), IsOk());
    signature_ = layout_.Signature();
    auto b = MakeBlockFile(layout_, key_, BlockKey{}, BlockKey{}, 1'700'000'000);
    ASSERT_THAT(b, IsOk());
    block_ = std::vector<std::byte>(b->data(), b->data() + b->size());
    row_.key = key_;
    row_.size = block_.size();
    row_.header_hash = HeaderHash(block_);
    ASSERT_GT(*BlockHeaderPrefixBytes(std::span(block_).first(8), block_.size()), 4096u);
  }

  void WriteFile(const std::vector<std::byte>& bytes) {
    std::filesystem::create_directories(folder_.Subdir(key_.bytes[0]));
    std::ofstream f(folder_.BlockPath(key_), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  }

  ReadOutcome Read(const IndexRow& row, std::vector<std::byte>* out) {
    BlockReaderOptions o;
    o.direct_io = GetParam().direct;
    o.direct_io_min_bytes = 0;
    BlockReader reader(Env::Default(), &folder_, &signature_, o);
    auto buf = BlockBuffer::Allocate(row.size);
    EXPECT_THAT(buf, IsOk());
    Status error;
    ReadOutcome r = reader.Read(row, buf->mutable_span(), &error);
    out->assign(buf->data(), buf->data() + buf->size());
    return r;
  }

  TempDir dir_;
  FolderLayout folder_{dir_.path()};
  ModelLayout layout_;
  std::string signature_;
  BlockKey key_ = TestBlockKey(42);
  std::vector<std::byte> block_;
  IndexRow row_;
};

TEST_P(BlockReaderTest, IntactBlockReadsExactly) {
  WriteFile(block_);
  std::vector<std::byte> got;
  EXPECT_EQ(Read(row_, &got), ReadOutcome::kOk);
  EXPECT_EQ(got, block_);
}

TEST_P(BlockReaderTest, DamageAnywhereIsBad) {
  // First header byte, last header byte, first data byte, last data byte.
  const uint64_t header_end = *BlockHeaderPrefixBytes(std::span(block_).first(8), block_.size());
  for (uint64_t at : {uint64_t{10}, header_end - 2, header_end, block_.size() - 1}) {
    SCOPED_TRACE(at);
    std::vector<std::byte> bad = block_;
    bad[at] ^= std::byte{0x20};
    WriteFile(bad);
    std::vector<std::byte> got;
    EXPECT_EQ(Read(row_, &got), ReadOutcome::kBad);
  }
}

TEST_P(BlockReaderTest, RowThatDescribesAnotherFileIsBadAndMissingFileIsGone) {
  std::vector<std::byte> got;
  EXPECT_EQ(Read(row_, &got), ReadOutcome::kGone);
  WriteFile(block_);
  IndexRow other_hash = row_;
  other_hash.header_hash ^= 1;
  EXPECT_EQ(Read(other_hash, &got), ReadOutcome::kBad);
  IndexRow other_size = row_;
  other_size.size -= 1;
  EXPECT_EQ(Read(other_size, &got), ReadOutcome::kBad);
  IndexRow other_key = row_;
  other_key.key = TestBlockKey(43);
  std::filesystem::create_directories(folder_.Subdir(other_key.key.bytes[0]));
  std::filesystem::rename(folder_.BlockPath(key_), folder_.BlockPath(other_key.key));
  EXPECT_EQ(Read(other_key, &got), ReadOutcome::kBad);  // the header names key 42
}

INSTANTIATE_TEST_SUITE_P(Modes, BlockReaderTest,
                         ::testing::Values(ReaderCase{false, "Buffered"},
                                           ReaderCase{true, "Direct"}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace kvtier::disk
