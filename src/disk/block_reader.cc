#include "disk/block_reader.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "disk/header_hash.h"
#include "disk/range_plan.h"
#include "kvtier/block_file.h"

namespace kvtier::disk {
namespace {

constexpr uint64_t kPage = 4096;

// The last partial page of an O_DIRECT read lands here, not past the end of
// the caller's buffer.
std::byte* BounceBuffer() {
  alignas(kPage) thread_local std::byte page[kPage];
  return page;
}

}  // namespace

ReadOutcome BlockReader::Open(const std::string& path, const ReadFileOptions& ro,
                              std::unique_ptr<RandomAccessFile>* file, Status* error) const {
  auto opened = env_->OpenForRead(path, ro);
  if (opened.ok()) {
    *file = std::move(opened).value();
    return ReadOutcome::kOk;
  }
  if (opened.status().IsNotFound()) return ReadOutcome::kGone;
  // A symlink, FIFO or folder in a block's place is never a block.
  auto info = env_->Stat(path);
  if (info.ok() && info->type != FileType::kRegular) return ReadOutcome::kBad;
  *error = opened.status();
  return ReadOutcome::kError;
}

Status BlockReader::Verify(std::span<const std::byte> file, const BlockKey& key,
                           VerifiedBlockInfo* info) const {
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = signature_;
  opts.verify_checksum = true;
  return verifier_.Verify(file, opts, info);
}

ReadOutcome BlockReader::Read(const IndexRow& row, std::span<std::byte> dst, Status* error,
                              std::unique_ptr<RandomAccessFile> opened) const {
  const uint64_t size = row.size;
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  ro.direct_io = options_.direct_io && size >= options_.direct_io_min_bytes &&
                 reinterpret_cast<uintptr_t>(dst.data()) % kPage == 0;
  std::unique_ptr<RandomAccessFile> file;
  if (opened != nullptr && !ro.direct_io) {
    file = std::move(opened);  // buffered, as PrefetchWhole opened it
  } else if (ReadOutcome o = Open(layout_->BlockPath(row.key), ro, &file, error);
             o != ReadOutcome::kOk) {
    return o;
  }
  if (file->size() != size) return ReadOutcome::kBad;
  const uint64_t body = ro.direct_io ? size / kPage * kPage : size;
  auto n = file->ReadAt(0, dst.first(body));
  if (!n.ok()) {
    *error = n.status();
    return ReadOutcome::kError;
  }
  uint64_t got = *n;
  if (got == body && body < size) {
    std::byte* page = BounceBuffer();
    auto tail = file->ReadAt(body, std::span<std::byte>(page, kPage));
    if (!tail.ok()) {
      *error = tail.status();
      return ReadOutcome::kError;
    }
    if (*tail == size - body) std::memcpy(dst.data() + body, page, *tail);
    got += *tail;
  }
  if (got != size) return ReadOutcome::kBad;  // changed size since it was opened
  // The checksum covers the data; the row's hash covers the header.
  if (!Verify(dst.first(size), row.key, nullptr).ok() ||
      (row.header_hash != 0 && HeaderHash(dst.first(size)) != row.header_hash)) {
    return ReadOutcome::kBad;
  }
  return ReadOutcome::kOk;
}

namespace {

// The header and the ranges of `plan` (what a prefetch of it asks for).
std::vector<BlockFileRange> PlanRanges(const ReadPlanMemo::Plan& plan, uint64_t size) {
  std::vector<BlockFileRange> out;
  out.push_back({0, std::min(plan.header_bytes, size)});
  for (const BlockFileRange& r : plan.ranges) {
    if (r.begin >= out.back().end) out.push_back(r);
  }
  return out;
}

}  // namespace

std::optional<PrefetchedRead> BlockReader::PrefetchTensors(const IndexRow& row,
                                                          const TensorMask& mask) const {
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  ro.random_access = true;
  Status error;
  std::unique_ptr<RandomAccessFile> file;
  if (Open(layout_->BlockPath(row.key), ro, &file, &error) != ReadOutcome::kOk) return std::nullopt;
  if (file->size() != row.size || row.size < 8) return std::nullopt;
  ReadPlanMemo::Plan plan;
  if (std::optional<ReadPlanMemo::Plan> last = plans_.Find(mask)) {
    plan = std::move(*last);
  } else {
    plan.header_bytes = header_guess_.load(std::memory_order_relaxed);
  }
  plan.header_bytes = std::clamp<uint64_t>(plan.header_bytes, 8, row.size);
  // Advice: a failure leaves the reads to do it all (and then nothing was
  // read in vain, which ReadTensors over-counts at worst).
  for (const BlockFileRange& r : PlanRanges(plan, row.size)) {
    (void)file->Prefetch(r.begin, r.end - r.begin);
  }
  return PrefetchedRead{std::move(plan), std::move(file)};
}

std::unique_ptr<RandomAccessFile> BlockReader::PrefetchWhole(const BlockKey& key) const {
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  Status error;
  std::unique_ptr<RandomAccessFile> file;
  if (Open(layout_->BlockPath(key), ro, &file, &error) != ReadOutcome::kOk) return nullptr;
  const uint64_t size = file->size();
  if (size == 0 || (options_.direct_io && size >= options_.direct_io_min_bytes)) return nullptr;
  if (!file->Prefetch(0, size).ok()) return nullptr;
  return file;
}

ReadOutcome BlockReader::ReadTensors(const IndexRow& row, const TensorMask& mask,
                                     std::span<std::byte> dst, uint64_t* bytes_read,
                                     Status* error,
                                     PrefetchedRead* prefetched) const {
  *bytes_read = 0;
  const uint64_t size = row.size;
  ReadFileOptions ro;
  ro.follow_symlinks = false;  // ranges are not page-aligned: buffered reads
  ro.random_access = true;     // no readahead into the tensors it skips
  std::unique_ptr<RandomAccessFile> file;
  if (prefetched != nullptr && prefetched->file != nullptr) {
    file = std::move(prefetched->file);  // opened by PrefetchTensors, for this row
  } else if (ReadOutcome o = Open(layout_->BlockPath(row.key), ro, &file, error);
             o != ReadOutcome::kOk) {
    return o;
  }
  if (file->size() != size || size < 8) return ReadOutcome::kBad;
  // Reads [begin, end) of the file into the same offsets of dst.
  auto read_range = [&](uint64_t begin, uint64_t end) -> ReadOutcome {
    auto n = file->ReadAt(begin, dst.subspan(begin, end - begin));
    if (!n.ok()) {
      *error = n.status();
      return ReadOutcome::kError;
    }
    *bytes_read += *n;
    return *n == end - begin ? ReadOutcome::kOk : ReadOutcome::kBad;
  };
  // The header in one pread: its length is the last one's (blocks of a
  // layout have headers of one length), and only a longer one needs a
  // second pread for the rest. With a plan of the last read of this mask,
  // the device gets the header and the tensors at once.
  std::optional<ReadPlanMemo::Plan> plan;
  if (prefetched != nullptr) {
    plan = std::move(prefetched->plan);  // asked for already (PrefetchTensors)
  } else {
    plan = plans_.Find(mask);
    if (plan) {
      plan->header_bytes = std::clamp<uint64_t>(plan->header_bytes, 8, size);
      // Advice: a failure leaves the preads to do it all.
      for (const BlockFileRange& r : PlanRanges(*plan, size)) {
        (void)file->Prefetch(r.begin, r.end - r.begin);
      }
    }
  }
  const uint64_t guess = std::clamp<uint64_t>(
      plan ? plan->header_bytes : header_guess_.load(std::memory_order_relaxed), 8, size);
  if (ReadOutcome o = read_range(0, guess); o != ReadOutcome::kOk) return o;
  Result<uint64_t> need = BlockHeaderPrefixBytes(dst.first(8), size);
  if (!need.ok()) return ReadOutcome::kBad;
  if (*need > guess) {
    if (ReadOutcome o = read_range(guess, *need); o != ReadOutcome::kOk) return o;
  }
  header_guess_.store(*need, std::memory_order_relaxed);
  if (row.header_hash != 0 && HeaderHash(dst.first(*need)) != row.header_hash) {
    return ReadOutcome::kBad;
  }
  DecodeOptions opts;
  opts.expected_key = &row.key;
  opts.expected_signature = signature_;
  // The verifier answers a header of a shape it has seen without a JSON
  // parse (DecodeBlockHeader's verdict and result either way).
  Result<DecodedBlock> header = verifier_.DecodeHeader(dst.first(*need), size, opts);
  if (!header.ok()) return ReadOutcome::kBad;
  if (header->meta.tensor_checksums.empty() || !header->meta.meta_checksum ||
      mask.size() != header->tensors.size() || MaskSelectsAll(mask, header->tensors.size())) {
    // Written before tensor_checksums, all of it wanted, or a mask for
    // another layout (the caller's mistake, not the file's): the whole
    // file, verified by its data checksum.
    *bytes_read = size;
    return Read(row, dst, error);
  }
  Result<std::vector<BlockFileRange>> selected = SelectedTensorRanges(*header, mask);
  if (!selected.ok()) return ReadOutcome::kBad;
  const std::vector<BlockFileRange> ranges =
      CoalesceRanges(*selected, kMaxGapBytes, RangeBytes(*selected) / kGapBudgetDivisor);
  const uint64_t have = std::max(guess, *need);  // the header's pread may have read on
  std::vector<BlockFileRange> todo;
  for (const BlockFileRange& r : ranges) {
    const uint64_t begin = std::max(r.begin, have);
    if (begin < r.end) todo.push_back({begin, r.end});
  }
  if (plan) {
    // The device read what the plan asked for: what these reads do not use
    // was read in vain, and is counted as read.
    std::vector<BlockFileRange> used = {{0, have}};
    used.insert(used.end(), todo.begin(), todo.end());
    *bytes_read += BytesOutside(PlanRanges(*plan, size), used);
  } else if (todo.size() > 1) {
    // All ranges asked of the device at once, not one round trip after
    // another.
    for (const BlockFileRange& r : todo) (void)file->Prefetch(r.begin, r.end - r.begin);
  }
  plans_.Remember(mask, {*need, todo});
  for (const BlockFileRange& r : todo) {
    if (ReadOutcome o = read_range(r.begin, r.end); o != ReadOutcome::kOk) return o;
  }
  // DecodeBlockTensors' verdict without parsing the header again (a JSON
  // parse per block is a good part of a partial read's CPU): the header has
  // passed DecodeBlockHeader (meta_checksum covers tensor_checksums), so
  // what is left is each selected tensor's hash against its entry.
  for (size_t t = 0; t < mask.size(); ++t) {
    if (!mask[t]) continue;
    const TensorView& v = header->tensors[t];
    if (BlockChecksum(dst.subspan(*need + v.begin, v.end - v.begin)) !=
        header->meta.tensor_checksums[t]) {
      return ReadOutcome::kBad;
    }
  }
  return ReadOutcome::kOk;
}

ReadOutcome BlockReader::ReadUnindexed(const BlockKey& key, const DstFn& dst, uint64_t* size,
                                       Status* error,
                                       std::unique_ptr<RandomAccessFile> opened) const {
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  std::unique_ptr<RandomAccessFile> file = std::move(opened);
  if (file == nullptr) {
    if (ReadOutcome o = Open(layout_->BlockPath(key), ro, &file, error); o != ReadOutcome::kOk) {
      return o;  // kBad (not a regular file): the row decides
    }
  }
  const uint64_t n = file->size();
  const bool direct = options_.direct_io && n >= options_.direct_io_min_bytes;
  if (n == 0 || n >= kMaxUnindexedReadBytes || direct) return ReadOutcome::kBad;
  auto buf = dst(n);
  if (!buf.ok()) {
    if (buf.status().IsInvalidArgument()) return ReadOutcome::kBad;
    *error = buf.status();
    return ReadOutcome::kNoBuffer;
  }
  if (buf->size() != n) return ReadOutcome::kBad;
  auto got = file->ReadAt(0, *buf);
  if (!got.ok()) {
    *error = got.status();
    return ReadOutcome::kError;
  }
  if (*got != n) return ReadOutcome::kBad;  // changed size since it was opened
  VerifiedBlockInfo info;
  if (!Verify(*buf, key, &info).ok() || !info.has_meta_checksum) {
    return ReadOutcome::kBad;
  }
  *size = n;
  return ReadOutcome::kOk;
}

}  // namespace kvtier::disk
