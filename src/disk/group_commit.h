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
  explicit GroupCommitter(DiskIndex* index) : index_(index) {}

  // Commits `rows` (one writer's batch, with whatever rows other threads
  // are committing) and returns the transaction's status.
  Status Commit(std::span<const IndexRow> rows);

 private:
  struct Group {
    std::vector<IndexRow> rows;
    Status status;
    bool done = false;
  };

  DiskIndex* const index_;
  Mutex mu_;
  CondVar cv_;
  std::shared_ptr<Group> open_ GUARDED_BY(mu_);  // collecting rows
  bool committing_ GUARDED_BY(mu_) = false;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_GROUP_COMMIT_H_
