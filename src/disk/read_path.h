// ReadPath: serves the disk tier's loads (Load, LoadMany, LoadBuffers).
//
// For a load of some keys it
//   1. finds each key in the pending buffer (a block not yet on disk is
//      served from memory);
//   2. reads the rest file first (BlockReader::ReadUnindexed: a small block
//      that verifies on its own needs no index lookup), or, when retention
//      needs the row's creation time anyway, looks them all up in the index
//      in one query and reads the file each row describes;
//   3. judges a file found gone or bad by its row as it is now, not as it
//      was when the load looked it up (another process may have replaced
//      the block since): it reads a newer file once, drops the row of a file
//      that is gone, and quarantines a damaged one;
//   4. counts each load (hit, miss, bytes, latency) and notes each hit's
//      access time in the touch buffer.
// LoadMany and LoadBuffers read on the ParallelRunner's threads; LoadBuffers
// runs in lanes (one per thread and the caller) that each ask the device for
// their next block before they read the one they have.
//
// The parts belong to the DiskTierImpl; this class only borrows them and
// holds no state of its own, so it has no mutex.
//
// Thread safety: every method may be called from any number of threads at
// once.
#ifndef KVTIER_DISK_READ_PATH_H_
#define KVTIER_DISK_READ_PATH_H_

#include <atomic>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "disk/block_reader.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/parallel_runner.h"
#include "disk/pending_writes.h"
#include "disk/quarantine.h"
#include "disk/touch_buffer.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

class ReadPath {
 public:
  // Every pointer must outlive the ReadPath.
  struct Parts {
    const DiskTierOptions* options = nullptr;
    Env* env = nullptr;
    const FolderLayout* layout = nullptr;
    DiskIndex* index = nullptr;
    Quarantine* quarantine = nullptr;
    PendingWrites* pending = nullptr;
    BlockReader* reader = nullptr;
    ParallelRunner* runner = nullptr;  // the read threads of LoadMany and LoadBuffers
    TouchBuffer* touches = nullptr;
    DiskCounters* counters = nullptr;
    const std::atomic<bool>* closed = nullptr;  // set by Close(): loads fail
    int64_t sig_id = 0;
    // Called when the touch buffer holds enough access times to be flushed
    // (wakes the maintenance thread).
    std::function<void()> touches_due;
  };
  explicit ReadPath(Parts parts) : p_(std::move(parts)) {}

  // As DiskTier::Load, LoadMany and LoadBuffers.
  Result<std::optional<size_t>> Load(const BlockKey& key, std::span<std::byte> dst);
  std::vector<Result<std::optional<size_t>>> LoadMany(std::span<const BlockKey> keys,
                                                      std::span<const std::span<std::byte>> dsts);
  void LoadBuffers(std::span<const BlockKey> keys, const DiskTier::BufferAllocator& alloc,
                   const DiskTier::LoadedBufferCallback& done);
  // As DiskTier::LoadTensorBuffers: LoadBuffers reading only the tensors
  // masks[i] selects (BlockReader::ReadTensors) of keys looked up in the
  // index (a partial read needs the row's size and header hash first).
  void LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                         const DiskTier::BufferAllocator& alloc,
                         const DiskTier::LoadedBufferCallback& done);

 private:
  // Where a key of a load is: its pending block, else its file read without
  // a row first (`unindexed`), else its index row.
  struct Located {
    SharedBlock pending;
    bool unindexed = false;
    std::optional<IndexRow> row;
  };
  using DstFn = BlockReader::DstFn;

  bool closed() const { return p_.closed->load(std::memory_order_acquire); }
  // Finds every key in the pending buffer; the rest are read file first
  // (ReadFileFirst) or, when loads need the row anyway (retention: the row's
  // created_at), looked up in the index (one batched lookup). An index error
  // leaves the row empty (a miss).
  // `need_rows`: look every key up in the index (partial reads need the row).
  std::vector<Located> Locate(std::span<const BlockKey> keys, bool need_rows = false);
  // Serves `key` from where Locate() found it into the buffer `dst` gives,
  // counting the load. Its size, nullopt on a miss, or dst's error.
  // `mask` (null = whole): a partial read of the tensors it selects.
  // `prefetched`: what PrefetchAhead asked the device for (BlockReader::
  // ReadTensors).
  Result<std::optional<size_t>> LoadLocated(const BlockKey& key, Located where, const DstFn& dst,
                                            const TensorMask* mask = nullptr,
                                            PrefetchedRead* prefetched = nullptr);
  // For a read of a file that LoadLocated will read: asks the device for it
  // now. A partial read of a row's file (BlockReader::PrefetchTensors) gives
  // what it asked for; a whole read asks for the file
  // (BlockReader::PrefetchWhole) and gives the file it opened (no plan), so
  // that the read does not open it again. nullopt also when
  // nothing was asked (a pending block, a partial read without a row, an
  // incompatible or expired one, no file).
  std::optional<PrefetchedRead> PrefetchAhead(const BlockKey& key, const Located& where,
                                              const TensorMask* mask);
  // Reads and verifies the file `row` describes. A file found gone or bad
  // makes it look at the row again first: if another process replaced the
  // block meanwhile it reads the new one (once); only a file that disagrees
  // with the current row is dropped (gone) or quarantined (bad).
  // With `mask`, reads only what it selects and adds what it read to
  // `*bytes_read` (else the row's size).
  Result<std::optional<size_t>> ReadFromDisk(const BlockKey& key, IndexRow row, const DstFn& dst,
                                             const TensorMask* mask = nullptr,
                                             uint64_t* bytes_read = nullptr,
                                             PrefetchedRead* prefetched = nullptr);
  // The small-block hit without an index lookup: a file that verifies on its
  // own (BlockReader::ReadUnindexed) is served; anything else — no file, a
  // bad one, a large one — is judged by its row as ReadFromDisk does (a stale
  // row of a gone file is dropped, a damaged file quarantined).
  // `prefetched`: PrefetchAhead's file for the first read.
  Result<std::optional<size_t>> ReadFileFirst(const BlockKey& key, const DstFn& dst,
                                              PrefetchedRead* prefetched = nullptr);
  bool Expired(const IndexRow& row);
  // A miss for the block `row` describes, whose file failed verification.
  void QuarantineBlock(const IndexRow& row);
  void NoteTouch(const BlockKey& key);

  const Parts p_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_READ_PATH_H_
