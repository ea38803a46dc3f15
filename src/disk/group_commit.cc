#include "disk/group_commit.h"

namespace kvtier::disk {

Status GroupCommitter::Commit(std::span<const IndexRow> rows) {
  MutexLock lock(&mu_);
  if (open_ == nullptr) open_ = std::make_shared<Group>();
  std::shared_ptr<Group> mine = open_;
  mine->rows.insert(mine->rows.end(), rows.begin(), rows.end());
  while (!mine->done) {
    if (!committing_ && open_ == mine) {
      // Lead: close the group to newcomers and commit it without the lock.
      committing_ = true;
      open_ = nullptr;
      lock.Unlock();
      Status s = index_->Upsert(mine->rows);
      lock.Lock();
      mine->status = std::move(s);
      mine->done = true;
      committing_ = false;
      cv_.SignalAll();
    } else {
      cv_.Wait(&lock);
    }
  }
  return mine->status;
}

}  // namespace kvtier::disk
