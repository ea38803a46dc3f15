// BlockReader: reads one block file into a caller's buffer and verifies it
// once, where the bytes come off the disk.
//
// The buffer is exactly the size the index row records. The read is one
// large pread (plus one for the last partial page under O_DIRECT, through a
// small per-thread bounce buffer, so nothing is ever written past the
// buffer's end). Verification is DecodeBlock's verdict (structure, expected
// key, expected signature, data checksum; through a BlockVerifier, which
// skips the JSON parse of a header shape it has seen) plus the header hash
// the row records.
//
// Thread safety: every method may be called from any number of threads at
// once (no mutex of its own: the verifier and the plan memo are
// thread-safe, the header guess is an atomic).
#ifndef KVTIER_DISK_BLOCK_READER_H_
#define KVTIER_DISK_BLOCK_READER_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "core/block_verifier.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/range_plan.h"
#include "kvtier/block_file.h"
#include "kvtier/env.h"
#include "kvtier/status.h"

namespace kvtier::disk {

enum class ReadOutcome {
  kOk,        // `dst` holds the verified block
  kGone,      // no file at the block's path
  kBad,       // a file is there but it is not the block the row describes
  kError,     // an I/O error: the file may be fine
  kNoBuffer,  // ReadUnindexed only: `dst` failed (not InvalidArgument); its status
};

// Files at least this large are read through their index row only: the
// row's size bounds the buffer, and one lookup is nothing beside the read.
inline constexpr uint64_t kMaxUnindexedReadBytes = uint64_t{1} << 20;

struct BlockReaderOptions {
  // Read with O_DIRECT when the buffer is 4096-byte aligned and the block
  // has at least `direct_io_min_bytes` bytes (small reads gain nothing from
  // bypassing the page cache). false: always buffered.
  bool direct_io = false;
  uint64_t direct_io_min_bytes = 0;
};

// What BlockReader::PrefetchTensors asked the device for, and the file it
// opened to ask: ReadTensors reads through that file, not a second open.
struct PrefetchedRead {
  ReadPlanMemo::Plan plan;
  std::unique_ptr<RandomAccessFile> file;
};

class BlockReader {
 public:
  // REQUIRES: every pointer outlives this object.
  BlockReader(Env* env, const FolderLayout* layout, const std::string* signature,
              const BlockReaderOptions& options)
      : env_(env), layout_(layout), signature_(signature), options_(options) {}

  // Reads the file of `row` into `dst` and verifies it against `row`.
  // REQUIRES: dst.size() == row.size. On kError, `*error` says why.
  // `opened`: the file PrefetchWhole opened for this key (read through it,
  // not opened again); null: opened here.
  ReadOutcome Read(const IndexRow& row, std::span<std::byte> dst, Status* error,
                   std::unique_ptr<RandomAccessFile> opened = nullptr) const;

  // A partial read of the file of `row` into `dst` (REQUIRES: dst.size() ==
  // row.size), opened for random access (no readahead): the header (one
  // pread of the last header's length, a second only for a longer one),
  // then only the byte ranges of the tensors `mask` selects, each into its
  // own place in `dst`, small gaps between them read through
  // (CoalesceRanges: at most 1/32 more than selected); the rest of `dst` is
  // left as it was. The ranges are asked of the device at once (Prefetch),
  // together with the header when the last read of this mask left a plan
  // (ReadPlanMemo); bytes a plan prefetched that the read did not use count
  // in `*bytes_read`. kOk when the header
  // verifies (structure, key, signature, meta_checksum, the row's header
  // hash) and so does every selected tensor's tensor_checksums entry. A file
  // without tensor_checksums is read whole (Read). `*bytes_read` is what it
  // read from the file.
  // `prefetched`: what PrefetchTensors asked the device for this file (then
  // this reads through the file it opened, moved out of it, and asks for
  // nothing more ahead; what it asked and this did not use counts in
  // `*bytes_read`).
  ReadOutcome ReadTensors(const IndexRow& row, const TensorMask& mask, std::span<std::byte> dst,
                          uint64_t* bytes_read, Status* error,
                          PrefetchedRead* prefetched = nullptr) const;

  // Asks the device, without waiting, for what ReadTensors(row, mask) will
  // read: the header, and the tensors at the offsets of the last read of
  // this mask. A reader that starts this for its next block before it reads
  // the current one keeps the device busy while it waits and verifies (the
  // open moves ahead too: a cold one reads the file system's metadata).
  // Returns what it asked for and the open file (nullopt: nothing, e.g. no
  // such file), to be passed to ReadTensors.
  std::optional<PrefetchedRead> PrefetchTensors(const IndexRow& row, const TensorMask& mask) const;

  // Asks the device, without waiting, for the whole file of `key`, as
  // PrefetchTensors does for a partial read: a reader that asks for its next
  // block before it reads and verifies the current one keeps the device busy
  // meanwhile. Only for a file that Read or ReadUnindexed will read through
  // the page cache: one that direct_io will read (direct_io_min_bytes or
  // more) would be read twice. Advice: returns the file it opened to ask
  // (for Read or ReadUnindexed, so that a block costs one open, not two:
  // for blocks of a few KiB the open is most of a warm read), or null when
  // nothing was asked for.
  std::unique_ptr<RandomAccessFile> PrefetchWhole(const BlockKey& key) const;

  // Gives the buffer a block of `size` bytes is read into: exactly `size`
  // bytes, or the reason there is none.
  using DstFn = std::function<Result<std::span<std::byte>>(uint64_t size)>;

  // The small-block read, without an index row: the file's own size picks
  // the buffer (`dst`), and the file must verify on its own: structure, key,
  // signature, data checksum and a meta_checksum over the header (which
  // stands in for the row's header hash). kOk: `*size` bytes of the verified
  // block are in the buffer. kGone: no file. kBad for anything else — a file
  // that does not verify or has no meta_checksum, one of
  // kMaxUnindexedReadBytes or more or of the O_DIRECT size, a buffer `dst`
  // refused as InvalidArgument (it does not fit this file, which may be a
  // stray one), something other than a regular file — which the caller then
  // reads through its row (Read). kError: an open or read failed (as in
  // Read); kNoBuffer: `dst` failed otherwise (out of buffers: the caller's
  // error). `*error` says why. `opened` as for Read.
  ReadOutcome ReadUnindexed(const BlockKey& key, const DstFn& dst, uint64_t* size, Status* error,
                            std::unique_ptr<RandomAccessFile> opened = nullptr) const;

 private:
  // Opens a block file: kOk with `*file`, kGone, kBad (not a regular file),
  // or kError (`*error` says why).
  ReadOutcome Open(const std::string& path, const ReadFileOptions& ro,
                   std::unique_ptr<RandomAccessFile>* file, Status* error) const;
  // DecodeBlock's verdict with this reader's expectations for `key`.
  Status Verify(std::span<const std::byte> file, const BlockKey& key,
                VerifiedBlockInfo* info) const;

  Env* const env_;
  const FolderLayout* const layout_;
  const std::string* const signature_;
  const BlockReaderOptions options_;
  // Remembers the header shapes it has parsed (thread-safe): a block of a
  // known shape is checked without a JSON parse.
  mutable BlockVerifier verifier_;
  // ReadTensors' first pread: the header length of the last partial read
  // (the blocks of a layout have headers of one length); before any, the
  // 8-byte length alone (no guess reads past a header: what it reads counts).
  // A hint only (relaxed).
  mutable std::atomic<uint64_t> header_guess_{8};
  // What the last partial read of each mask read (thread-safe).
  mutable ReadPlanMemo plans_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_BLOCK_READER_H_
