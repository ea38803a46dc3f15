// DiskTierImpl: the DiskTier of include/kvtier/disk_tier.h.
//
// Parts (each its own class, each with at most one mutex):
//   PendingWrites  - write queue + readable pending buffer (byte bound)
//   GroupCommitter - batches index rows of concurrent writers
//   TouchBuffer    - last-access times flushed in batches
//   Capacity       - effective limit, in-flight reservations, what to evict
//   Reconciler     - background/explicit folder <-> index repair
//   ParallelRunner - the read threads of LoadMany and LoadBuffers
//   BlockReader    - reads and verifies one block file
//   BlockWriter    - publishes one block file (first complete file wins)
//   WritePath      - a writer's batch: lookups, reservation, files, rows
//   ReadPath       - the loads: pending buffer, file first or row, repair
// This class owns them, the writer threads and the maintenance thread; its
// own mutex guards only the maintenance thread's state. No file I/O or
// SQLite call runs under any of these mutexes.
//
// Thread safety: as DiskTier.
#ifndef KVTIER_DISK_DISK_TIER_IMPL_H_
#define KVTIER_DISK_DISK_TIER_IMPL_H_

#include <array>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "core/block_verifier.h"
#include "core/mutex.h"
#include "core/thread_annotations.h"
#include "disk/block_reader.h"
#include "disk/block_writer.h"
#include "disk/capacity.h"
#include "disk/counters.h"
#include "disk/disk_index.h"
#include "disk/folder_layout.h"
#include "disk/folder_lock.h"
#include "disk/group_commit.h"
#include "disk/kill_points.h"
#include "disk/parallel_runner.h"
#include "disk/pending_writes.h"
#include "disk/quarantine.h"
#include "disk/read_path.h"
#include "disk/touch_buffer.h"
#include "disk/write_path.h"
#include "kvtier/disk_tier.h"

namespace kvtier::disk {

class DiskTierImpl final : public DiskTier {
 public:
  DiskTierImpl(const DiskTierOptions& options, Env* env, KillHook kill_hook);
  ~DiskTierImpl() override;

  // Creates folders, opens the index, starts the threads.
  Status Init();

  bool Contains(const BlockKey& key) override;
  std::optional<uint64_t> SizeOf(const BlockKey& key) override;
  std::vector<bool> ContainsMany(std::span<const BlockKey> keys) override;
  Status ForEachKey(const std::function<void(const BlockKey&, uint64_t)>& fn) override;
  Result<std::optional<size_t>> Load(const BlockKey& key, std::span<std::byte> dst) override;
  std::vector<Result<std::optional<size_t>>> LoadMany(
      std::span<const BlockKey> keys, std::span<const std::span<std::byte>> dsts) override;
  void LoadTensorBuffers(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                         const BufferAllocator& alloc, const LoadedBufferCallback& done) override;
  void LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                   const LoadedBufferCallback& done) override;
  Status Store(const BlockKey& key, SharedBlock block) override;
  Result<bool> Erase(const BlockKey& key) override;
  Result<bool> Forget(const BlockKey& key) override;
  Result<uint64_t> Clear() override;
  Status Flush() override;
  Result<uint64_t> EnforceLimit() override;
  Result<ReconcileReport> Reconcile() override;
  void WaitForBackgroundReconcile() override;
  DiskTierStats Stats() override;
  Status Close() override;

 private:
  Status CreateFolder(const std::string& path);
  // OK if a file can be created in the folder; else why not.
  Status ProbeWritable();
  Status OpenIndex();
  // OpenIndex() of a read-only folder: the index read-only or immutable.
  Status OpenReadOnlyIndex();
  // FailedPrecondition naming `what` in a read-only folder.
  Status CheckWritable(const char* what) const;

  void WriterLoop();
  void MaintenanceLoop();
  void FlushTouches();

  // Asks the maintenance thread to flush the touch buffer now.
  void WakeTouchFlush();
  // The index reported damage (IndexOptions::on_corruption, any thread):
  // asks the maintenance thread to repair it.
  void OnIndexCorruption(const Status& s);
  // On the maintenance thread: if no other process has the folder open,
  // sets the index aside, rebuilds it and reconciles the files into it
  // (true); else logs and leaves it (false). One log line either way.
  bool RepairIndex(const Status& cause);
  Status CheckStoreHeader(const BlockKey& key, const BlockBuffer& block);

  const DiskTierOptions options_;
  Env* const env_;
  const KillHook kill_hook_;  // tests only (kill_points.h)
  const FolderLayout layout_;
  DiskCounters counters_;
  FolderLock folder_lock_;  // held shared from Open() to destruction, after index_ closes
  std::unique_ptr<DiskIndex> index_;
  std::unique_ptr<Capacity> capacity_;
  std::unique_ptr<Quarantine> quarantine_;
  std::unique_ptr<GroupCommitter> committer_;
  std::unique_ptr<PendingWrites> pending_;
  std::unique_ptr<ParallelRunner> readers_;
  std::unique_ptr<BlockReader> reader_;
  // Store()'s header check (DecodeBlock's verdict without the data
  // checksum); a header shape it has seen is checked without a JSON parse.
  BlockVerifier store_checker_;
  std::unique_ptr<BlockWriter> writer_;
  std::unique_ptr<WritePath> write_path_;
  std::unique_ptr<ReadPath> read_path_;
  TouchBuffer touches_;
  int64_t sig_id_ = 0;
  bool read_only_ = false;        // the folder cannot be written; set by Init()
  bool rebuilt_at_open_ = false;  // OpenIndex() set a damaged index aside
  std::atomic<bool> closed_{false};
  std::atomic<bool> stop_{false};  // background reconcile: stop early
  std::vector<std::thread> writers_;
  std::thread maintenance_;

  Mutex mu_;  // guards the maintenance thread's state below
  CondVar maintenance_cv_;
  bool maintenance_stop_ GUARDED_BY(mu_) = false;
  bool touch_flush_wanted_ GUARDED_BY(mu_) = false;
  // Set while a reconcile runs or an index repair is due or running.
  bool reconcile_running_ GUARDED_BY(mu_) = false;
  // The damage the index reported, until the maintenance thread acts on it.
  std::optional<Status> index_damage_ GUARDED_BY(mu_);
  CondVar reconcile_cv_;
};

}  // namespace kvtier::disk

#endif  // KVTIER_DISK_DISK_TIER_IMPL_H_
