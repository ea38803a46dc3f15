// WritePath: turns a batch of pending blocks into block files and index
// rows, with the index work done once per batch.
//
// For a batch (what one writer takes from the queue: up to
// DiskTierOptions::commit_batch_bytes, at least one block) it
//   1. looks up every key in one query;
//   2. confirms the blocks already on disk (another process, an earlier
//      store) in one write transaction (DiskIndex::TouchIfPresentMany): an
//      eviction in progress holds that lock, so a block it is removing is
//      never counted as stored;
//   3. reserves room for the rest at once (Capacity::Reserve: one totals
//      query, evicting if needed);
//   4. publishes each block file (BlockWriter: first complete file wins; a
//      row read from the file's own header when another file won);
//   5. commits all their rows in one transaction, shared with the other
//      writers' batches (GroupCommitter), each only if its file is still in
//      place (an eviction in another process may have removed it since,
//      and a third process put its own file there);
//   6. finishes each block in the pending buffer.
// Other processes see the batch's files when its rows commit, so a writer
// has at most one batch on disk that the shared accounting does not count
// yet: the folder stays within its limit plus one batch per writer.
//
// Thread safety: Write() may be called from any number of threads at once
// (the writer threads and inline stores).
#ifndef KVTIER_DISK_WRITE_PATH_H_
#define KVTIER_DISK_WRITE_PATH_H_

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "disk/block_writer.h"
#include "disk/capacity.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/group_commit.h"
#include "disk/kill_points.h"
#include "disk/pending_writes.h"
#include "disk/quarantine.h"
#include "disk/touch_buffer.h"
#include "kvtier/disk_tier.h"
#include "kvtier/env.h"

namespace kvtier::disk {

class WritePath {
 public:
  // Every pointer must outlive the WritePath.
  struct Parts {
    const DiskTierOptions* options = nullptr;
    Env* env = nullptr;
    const FolderLayout* layout = nullptr;
    DiskIndex* index = nullptr;
    Capacity* capacity = nullptr;
    Quarantine* quarantine = nullptr;
    GroupCommitter* committer = nullptr;
    PendingWrites* pending = nullptr;
    BlockWriter* writer = nullptr;
    DiskCounters* counters = nullptr;
    const KillHook* kill_hook = nullptr;
    int64_t sig_id = 0;
  };
  explicit WritePath(const Parts& parts) : p_(parts) {}

  // Writes and indexes every block of `batch` (a cancelled one is skipped),
  // then finishes each in the pending buffer. Returns each block's status.
  std::vector<Status> Write(std::span<const std::shared_ptr<PendingBlock>> batch);

 private:
  // One block of a batch on its way to the index.
  struct Item {
    const PendingBlock* block = nullptr;
    Status status;
    bool done = false;  // finished before the commit (deduplicated, failed)
    std::optional<PublishOutcome> outcome;
    IndexRow row;  // what its index row will say
  };

  void Hook(DiskKillPoint point) const;
  // Steps 1-2: marks blocks already on disk done (deduplicated).
  void SkipBlocksOnDisk(std::vector<Item>* items);
  // Step 3: a reservation for every item not done yet (one for the lot, or
  // one each if the lot does not fit); an item that cannot get one fails.
  std::vector<Capacity::Reservation> Reserve(std::vector<Item>* items);
  // Step 4 for one item.
  void Publish(Item* item);
  // The row for the block file now at `key`'s path, read from its header;
  // nullopt if it is not a valid block file for `key`.
  Result<std::optional<IndexRow>> RowOfExistingFile(const BlockKey& key);
  void Finish(const std::shared_ptr<PendingBlock>& p, const Status& status, uint64_t t0);

  Parts p_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_WRITE_PATH_H_
