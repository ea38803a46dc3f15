#include "disk/group_commit.h"

namespace kvtier::disk {

Result<std::vector<bool>> GroupCommitter::Commit(std::span<const IndexRow> rows) {
  MutexLock lock(&mu_);
  if (open_ == nullptr) open_ = std::make_shared<Group>();
  std::shared_ptr<Group> mine = open_;
  const size_t first = mine->rows.size();
  mine->rows.insert(mine->rows.end(), rows.begin(), rows.end());
  while (!mine->done) {
    if (!committing_ && open_ == mine) {
      // Lead: close the group to newcomers and commit it without the lock.
      committing_ = true;
      open_ = nullptr;
      lock.Unlock();
      Result<std::vector<bool>> written =
          index_->UpsertIf(mine->rows, describes_file_, AccessTimes::kFresh);
      lock.Lock();
      mine->written = std::move(written);
      mine->done = true;
      committing_ = false;
      cv_.SignalAll();
    } else {
      cv_.Wait(&lock);
    }
  }
  if (!mine->written.ok()) return mine->written.status();
  const std::vector<bool>& all = *mine->written;
  return std::vector<bool>(all.begin() + static_cast<ptrdiff_t>(first),
                           all.begin() + static_cast<ptrdiff_t>(first + rows.size()));
}

}  // namespace kvtier::disk
