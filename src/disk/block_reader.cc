#include "disk/block_reader.h"

#include <cstdint>
#include <cstring>

#include "disk/header_hash.h"
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

ReadOutcome BlockReader::Read(const IndexRow& row, std::span<std::byte> dst, Status* error) const {
  const std::string path = layout_->BlockPath(row.key);
  const uint64_t size = row.size;
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  ro.direct_io = options_.direct_io && size >= options_.direct_io_min_bytes &&
                 reinterpret_cast<uintptr_t>(dst.data()) % kPage == 0;
  std::unique_ptr<RandomAccessFile> file;
  if (ReadOutcome o = Open(path, ro, &file, error); o != ReadOutcome::kOk) return o;
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

ReadOutcome BlockReader::ReadTensors(const IndexRow& row, const TensorMask& mask,
                                     std::span<std::byte> dst, uint64_t* bytes_read,
                                     Status* error) const {
  *bytes_read = 0;
  const uint64_t size = row.size;
  ReadFileOptions ro;
  ro.follow_symlinks = false;  // ranges are not page-aligned: buffered reads
  std::unique_ptr<RandomAccessFile> file;
  if (ReadOutcome o = Open(layout_->BlockPath(row.key), ro, &file, error); o != ReadOutcome::kOk) {
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
  if (ReadOutcome o = read_range(0, 8); o != ReadOutcome::kOk) return o;
  Result<uint64_t> need = BlockHeaderPrefixBytes(dst.first(8), size);
  if (!need.ok()) return ReadOutcome::kBad;
  if (ReadOutcome o = read_range(8, *need); o != ReadOutcome::kOk) return o;
  if (row.header_hash != 0 && HeaderHash(dst.first(*need)) != row.header_hash) {
    return ReadOutcome::kBad;
  }
  DecodeOptions opts;
  opts.expected_key = &row.key;
  opts.expected_signature = signature_;
  Result<DecodedBlock> header = DecodeBlockHeader(dst.first(*need), size, opts);
  if (!header.ok()) return ReadOutcome::kBad;
  if (header->meta.tensor_checksums.empty() || !header->meta.meta_checksum ||
      mask.size() != header->tensors.size() || MaskSelectsAll(mask, header->tensors.size())) {
    // Written before tensor_checksums, all of it wanted, or a mask for
    // another layout (the caller's mistake, not the file's): the whole
    // file, verified by its data checksum.
    *bytes_read = size;
    return Read(row, dst, error);
  }
  Result<std::vector<BlockFileRange>> ranges = SelectedTensorRanges(*header, mask);
  if (!ranges.ok()) return ReadOutcome::kBad;
  for (const BlockFileRange& r : *ranges) {
    if (ReadOutcome o = read_range(r.begin, r.end); o != ReadOutcome::kOk) return o;
  }
  if (!DecodeBlockTensors(dst.first(size), mask, opts).ok()) return ReadOutcome::kBad;
  return ReadOutcome::kOk;
}

ReadOutcome BlockReader::ReadUnindexed(const BlockKey& key, const DstFn& dst, uint64_t* size,
                                       Status* error) const {
  ReadFileOptions ro;
  ro.follow_symlinks = false;
  std::unique_ptr<RandomAccessFile> file;
  if (ReadOutcome o = Open(layout_->BlockPath(key), ro, &file, error); o != ReadOutcome::kOk) {
    return o;  // kBad (not a regular file): the row decides
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
