// GroupCommitter: commits index rows of many writer threads in shared
// transactions.
//
// A writer calls Commit(rows) after its files are in place and blocks until
// the transaction holding its rows has committed. Rows that arrive while a
// transaction is running join the next one; one of their writers runs it (no
// dedicated thread, no SQLite call under the mutex). Each writer therefore
// has at most one batch on disk that other processes cannot yet see in the
// index, which keeps the shared size accounting within one batch per writer.
//
// Each row is written only if the committer's FileCheck, asked inside the
// transaction, finds the file it describes at its path (DiskIndex::UpsertIf):
// what a writer read or wrote a moment ago may have been evicted and
// replaced by another process's file since.
//
// Thread safety: Commit() is safe from any number of threads.
#ifndef KVTIER_DISK_GROUP_COMMIT_H_
#define KVTIER_DISK_GROUP_COMMIT_H_

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "disk/disk_index.h"

namespace kvtier::disk {

class GroupCommitter {
 public:
  // No `describes_file`: every row is written.
  explicit GroupCommitter(DiskIndex* index, DiskIndex::FileCheck describes_file = {})
      : index_(index), describes_file_(std::move(describes_file)) {}

  // Commits `rows` (one writer's batch, with whatever rows other threads
  // are committing). Result i is whether rows[i] was written; an error is
  // the transaction's.
  Result<std::vector<bool>> Commit(std::span<const IndexRow> rows);

 private:
  struct Group {
    std::vector<IndexRow> rows;
    Result<std::vector<bool>> written = std::vector<bool>();
    bool done = false;
  };

  DiskIndex* const index_;
  const DiskIndex::FileCheck describes_file_;
  Mutex mu_;
  CondVar cv_;
  std::shared_ptr<Group> open_ GUARDED_BY(mu_);  // collecting rows
  bool committing_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_GROUP_COMMIT_H_
