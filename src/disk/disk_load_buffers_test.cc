// DiskTier::LoadBuffers: each block read once into an exact-size buffer from
// the caller's allocator, verified once, handed over per key; misses,
// corrupt files, pending writes and allocator failures per key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "disk/disk_test_util.h"
#include "kvtier/disk_tier.h"
#include "synth/block_generator.h"
#include "testing/status_matchers.h"

namespace kvtier {
namespace {

using disk_test::BlockFilePath;
using disk_test::Gate;
using disk_test::MakeTestBlock;
using disk_test::TempDir;
using disk_test::TestOptions;
using ::testing::HasSubstr;
using testing::IsOk;
using testing::StatusIs;

std::vector<std::byte> Bytes(const SharedBlock& b) {
  return std::vector<std::byte>(b->data(), b->data() + b->size());
}

// What LoadBuffers handed over, per key index.
struct Outcome {
  int calls = 0;
  Status status;                                // not OK: the error
  std::optional<std::vector<std::byte>> bytes;  // nullopt: a miss
  const std::byte* address = nullptr;           // of the buffer handed over
};

// Records allocations and results; thread-safe (LoadBuffers calls both from
// several threads).
class Recorder {
 public:
  explicit Recorder(size_t n) : outcomes_(n) {}

  // Allocates exact-size buffers; fails for sizes in `fail_sizes_` or for
  // the `fail_nth`-th call.
  DiskTier::BufferAllocator Allocator() {
    return [this](size_t bytes) -> Result<BlockBuffer> {
      std::lock_guard<std::mutex> lock(mu_);
      ++alloc_calls_;
      alloc_sizes_.push_back(bytes);
      if (fail_all_) return Status::ResourceExhausted("test allocator: no buffer");
      if (wrong_size_) {
        auto b = BlockBuffer::Allocate(bytes + 1);
        return b;
      }
      auto b = BlockBuffer::Allocate(bytes);
      if (b.ok()) allocated_.insert(b->data());
      return b;
    };
  }
  DiskTier::LoadedBufferCallback Callback() {
    return [this](size_t i, Result<std::optional<BlockBuffer>> r) {
      std::lock_guard<std::mutex> lock(mu_);
      Outcome& o = outcomes_.at(i);
      ++o.calls;
      if (!r.ok()) {
        o.status = r.status();
        return;
      }
      if (!r->has_value()) return;
      const BlockBuffer& b = **r;
      o.address = b.data();
      o.bytes = std::vector<std::byte>(b.data(), b.data() + b.size());
    };
  }

  const Outcome& at(size_t i) const { return outcomes_.at(i); }
  int alloc_calls() const { return alloc_calls_; }
  const std::vector<size_t>& alloc_sizes() const { return alloc_sizes_; }
  bool CameFromAllocator(const std::byte* p) const { return allocated_.count(p) > 0; }
  void FailAll() { fail_all_ = true; }
  void WrongSize() { wrong_size_ = true; }

 private:
  std::mutex mu_;
  std::vector<Outcome> outcomes_;
  int alloc_calls_ = 0;
  std::vector<size_t> alloc_sizes_;
  std::set<const std::byte*> allocated_;
  bool fail_all_ = false;
  bool wrong_size_ = false;
};

std::unique_ptr<DiskTier> OpenOrDie(const DiskTierOptions& o, disk::KillHook hook = {}) {
  auto t = hook ? disk::OpenWithKillHook(o, Env::Default(), std::move(hook))
                : DiskTier::Open(o, Env::Default());
  EXPECT_THAT(t, IsOk());
  return t.ok() ? std::move(t).value() : nullptr;
}

class LoadBuffersTest : public ::testing::TestWithParam<bool> {
 protected:
  DiskTierOptions Options() {
    DiskTierOptions o = TestOptions(dir_.path());
    o.direct_io_reads = GetParam();
    o.direct_io_min_bytes = 0;  // every size, to cover the bounce page
    return o;
  }
  TempDir dir_;
};

TEST_P(LoadBuffersTest, EachBlockArrivesOnceWithExactBytesInAnExactSizeBuffer) {
  auto tier = OpenOrDie(Options());
  // 300 keys: more than one 256-key index query. Keys 0..299 stored, then
  // the batch asks for them in reverse, with one key twice.
  std::vector<SharedBlock> blocks;
  for (uint64_t i = 0; i < 300; ++i) {
    blocks.push_back(MakeTestBlock(i));
    ASSERT_THAT(tier->Store(TestBlockKey(i), blocks.back()), IsOk());
  }
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<BlockKey> keys;
  for (uint64_t i = 300; i-- > 0;) keys.push_back(TestBlockKey(i));
  keys.push_back(TestBlockKey(5));
  Recorder rec(keys.size());
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  for (size_t j = 0; j < keys.size(); ++j) {
    const uint64_t i = j < 300 ? 299 - j : 5;
    const Outcome& o = rec.at(j);
    EXPECT_EQ(o.calls, 1) << j;
    EXPECT_THAT(o.status, IsOk()) << j;
    ASSERT_TRUE(o.bytes.has_value()) << j;
    EXPECT_EQ(*o.bytes, Bytes(blocks[i])) << j;
    EXPECT_TRUE(rec.CameFromAllocator(o.address)) << j;  // handed over, not copied
  }
  // One allocation per key, each exactly the block's size.
  EXPECT_EQ(rec.alloc_calls(), static_cast<int>(keys.size()));
  for (size_t n : rec.alloc_sizes()) EXPECT_EQ(n, blocks[0]->size());
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.loads, keys.size());
  EXPECT_EQ(s.hits, keys.size());
  EXPECT_EQ(s.hits_pending, 0u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.bytes_read, keys.size() * blocks[0]->size());
  EXPECT_EQ(s.errors, 0u);
}

TEST_P(LoadBuffersTest, AbsentKeyIsAMissWithoutAnAllocation) {
  auto tier = OpenOrDie(Options());
  SharedBlock b = MakeTestBlock(1);
  ASSERT_THAT(tier->Store(TestBlockKey(1), b), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<BlockKey> keys = {TestBlockKey(2), TestBlockKey(1)};
  Recorder rec(keys.size());
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  EXPECT_EQ(rec.at(0).calls, 1);
  EXPECT_THAT(rec.at(0).status, IsOk());
  EXPECT_FALSE(rec.at(0).bytes.has_value());
  ASSERT_TRUE(rec.at(1).bytes.has_value());
  EXPECT_EQ(*rec.at(1).bytes, Bytes(b));
  EXPECT_EQ(rec.alloc_calls(), 1);
  EXPECT_EQ(tier->Stats().misses, 1u);
  EXPECT_EQ(tier->Stats().hits, 1u);
}

TEST_P(LoadBuffersTest, CorruptFileIsAMissAndIsQuarantined) {
  auto tier = OpenOrDie(Options());
  SharedBlock good = MakeTestBlock(1);
  ASSERT_THAT(tier->Store(TestBlockKey(1), good), IsOk());
  ASSERT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(2)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  const std::string path = BlockFilePath(dir_.path(), TestBlockKey(2));
  {
    // Flip the last data byte: same size, bad checksum.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    c = static_cast<char>(c ^ 0x40);
    f.seekp(-1, std::ios::end);
    f.write(&c, 1);
  }
  std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(2)};
  Recorder rec(keys.size());
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  ASSERT_TRUE(rec.at(0).bytes.has_value());
  EXPECT_EQ(*rec.at(0).bytes, Bytes(good));
  EXPECT_EQ(rec.at(1).calls, 1);
  EXPECT_THAT(rec.at(1).status, IsOk());
  EXPECT_FALSE(rec.at(1).bytes.has_value());
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(tier->Contains(TestBlockKey(2)));
  DiskTierStats s = tier->Stats();
  EXPECT_EQ(s.quarantined, 1u);
  EXPECT_EQ(s.quarantine_files, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.entries, 1u);
}

TEST_P(LoadBuffersTest, PendingWriteIsCopiedIntoAnAllocatorBuffer) {
  Gate gate;
  DiskTierOptions o = Options();
  o.writer_threads = 1;
  auto tier = OpenOrDie(o, gate.Hook(DiskKillPoint::kBeforeWrite));
  SharedBlock b = MakeTestBlock(7);
  ASSERT_THAT(tier->Store(TestBlockKey(7), b), IsOk());
  gate.WaitArrived(1);  // the writer holds it: not on disk yet
  std::vector<BlockKey> keys = {TestBlockKey(7)};
  Recorder rec(keys.size());
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  ASSERT_TRUE(rec.at(0).bytes.has_value());
  EXPECT_EQ(*rec.at(0).bytes, Bytes(b));
  EXPECT_TRUE(rec.CameFromAllocator(rec.at(0).address));
  EXPECT_NE(rec.at(0).address, b->data());
  EXPECT_FALSE(std::filesystem::exists(BlockFilePath(dir_.path(), TestBlockKey(7))));
  EXPECT_EQ(tier->Stats().hits_pending, 1u);
  EXPECT_EQ(tier->Stats().hits, 1u);
  gate.Release();
  ASSERT_THAT(tier->Flush(), IsOk());
}

TEST_P(LoadBuffersTest, AllocatorFailureIsAnErrorForThatKeyOnly) {
  auto tier = OpenOrDie(Options());
  SharedBlock small = MakeTestBlock(1);
  ASSERT_THAT(tier->Store(TestBlockKey(1), small), IsOk());
  ASSERT_THAT(tier->Store(TestBlockKey(2), MakeTestBlock(2)), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(2)};
  {
    Recorder rec(keys.size());
    rec.FailAll();
    tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_EQ(rec.at(i).calls, 1);
      EXPECT_THAT(rec.at(i).status,
                  StatusIs(StatusCode::kResourceExhausted, HasSubstr("test allocator")));
    }
  }
  // The files are fine: nothing was quarantined or dropped.
  EXPECT_EQ(tier->Stats().quarantined, 0u);
  EXPECT_TRUE(tier->Contains(TestBlockKey(1)));
  // Failing only one key's allocation leaves the other key's read alone.
  int calls = 0;
  std::mutex mu;
  Recorder rec(keys.size());
  auto inner = rec.Allocator();
  DiskTier::BufferAllocator fail_first = [&](size_t bytes) -> Result<BlockBuffer> {
    std::lock_guard<std::mutex> lock(mu);
    if (calls++ == 0) return Status::ResourceExhausted("test allocator: first call fails");
    return inner(bytes);
  };
  tier->LoadBuffers(keys, fail_first, rec.Callback());
  int errors = 0, hits = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(rec.at(i).calls, 1);
    if (!rec.at(i).status.ok()) {
      ++errors;
      EXPECT_THAT(rec.at(i).status, StatusIs(StatusCode::kResourceExhausted));
    } else {
      ASSERT_TRUE(rec.at(i).bytes.has_value());
      EXPECT_EQ(*rec.at(i).bytes, Bytes(MakeTestBlock(i + 1)));
      ++hits;
    }
  }
  EXPECT_EQ(errors, 1);
  EXPECT_EQ(hits, 1);
}

TEST_P(LoadBuffersTest, AllocatorReturningAnotherSizeIsInvalidArgument) {
  auto tier = OpenOrDie(Options());
  SharedBlock b = MakeTestBlock(1);
  ASSERT_THAT(tier->Store(TestBlockKey(1), b), IsOk());
  ASSERT_THAT(tier->Flush(), IsOk());
  std::vector<BlockKey> keys = {TestBlockKey(1)};
  Recorder rec(keys.size());
  rec.WrongSize();
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  EXPECT_THAT(rec.at(0).status,
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr(std::to_string(b->size() + 1) + " bytes for block")));
  EXPECT_EQ(tier->Stats().quarantined, 0u);
}

TEST_P(LoadBuffersTest, AfterCloseEveryKeyIsFailedPrecondition) {
  auto tier = OpenOrDie(Options());
  ASSERT_THAT(tier->Close(), IsOk());
  std::vector<BlockKey> keys = {TestBlockKey(1), TestBlockKey(2)};
  Recorder rec(keys.size());
  tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(rec.at(i).calls, 1);
    EXPECT_THAT(rec.at(i).status, StatusIs(StatusCode::kFailedPrecondition));
  }
  EXPECT_EQ(rec.alloc_calls(), 0);
}

// A layout of one U8 tensor of `data_bytes` bytes per block.
ModelLayout BytesLayout(uint64_t data_bytes) {
  ModelLayout l;
  l.name = "bytes";
  l.block_tokens = 1;
  LayerSpec layer;
  layer.cache_type = "raw";
  TensorSpec t;
  t.role = "bytes";
  t.dtype = DType::kU8;
  t.shape = {data_bytes};
  layer.states.push_back(t);
  l.layers.push_back(layer);
  return l;
}

TEST_P(LoadBuffersTest, BlocksOfEverySizeModuloAPageArriveIntact) {
  // File sizes on both sides of page boundaries: the O_DIRECT path reads
  // the last partial page through its bounce buffer, never past the
  // buffer's end (ASan would see it).
  std::set<uint64_t> residues;
  for (uint64_t data :
       {uint64_t{1}, uint64_t{3000}, uint64_t{4096}, uint64_t{8191}, uint64_t{65536 + 17},
        uint64_t{300'001}, uint64_t{(1 << 20) + 3}, uint64_t{2'500'001}}) {
    const ModelLayout l = BytesLayout(data);
    ASSERT_THAT(l.Validate(), IsOk());
    DiskTierOptions o = Options();
    o.layout_signature = l.Signature();
    auto tier = OpenOrDie(o);
    const BlockKey key = TestBlockKey(data);
    auto made = MakeBlockFile(l, key, BlockKey{}, BlockKey{}, 1'700'000'000);
    ASSERT_THAT(made, IsOk());
    auto block = std::make_shared<const BlockBuffer>(std::move(made).value());
    residues.insert(block->size() % 4096);
    ASSERT_THAT(tier->Store(key, block), IsOk());
    ASSERT_THAT(tier->Flush(), IsOk());
    std::vector<BlockKey> keys = {key};
    Recorder rec(keys.size());
    tier->LoadBuffers(keys, rec.Allocator(), rec.Callback());
    ASSERT_TRUE(rec.at(0).bytes.has_value()) << data;
    EXPECT_EQ(*rec.at(0).bytes, Bytes(block)) << data;
    EXPECT_THAT(CheckBlockFile(*rec.at(0).bytes, l, key), IsOk());
    EXPECT_EQ(rec.alloc_sizes(), std::vector<size_t>{block->size()});
  }
  EXPECT_GE(residues.size(), 6u);  // the sizes did fall on different page offsets
}

INSTANTIATE_TEST_SUITE_P(BufferedAndDirect, LoadBuffersTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Direct" : "Buffered"; });

}  // namespace
}  // namespace kvtier
