#include "disk/disk_tier_impl.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/saturating_time.h"
#include "disk/full_disk_open.h"
#include "disk/index_file.h"
#include "disk/reconcile.h"

namespace kvtier {

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options, Env* env) {
  if (env == nullptr) return Status::InvalidArgument("DiskTier::Open: env is null");
  KVTIER_RETURN_IF_ERROR(options.Validate());
  auto tier = std::make_unique<disk::DiskTierImpl>(options, env, disk::KillHook());
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<DiskTier>(std::move(tier));
}

namespace disk {

Result<std::unique_ptr<DiskTier>> OpenWithKillHook(const DiskTierOptions& options, Env* env,
                                                   KillHook hook) {
  if (env == nullptr) return Status::InvalidArgument("DiskTier::Open: env is null");
  KVTIER_RETURN_IF_ERROR(options.Validate());
  auto tier = std::make_unique<DiskTierImpl>(options, env, std::move(hook));
  KVTIER_RETURN_IF_ERROR(tier->Init());
  return std::unique_ptr<DiskTier>(std::move(tier));
}

namespace {

// Errors that say this process may not write the folder.
bool IsReadOnlyError(const Status& s) {
  return s.sys_errno() == EROFS || s.sys_errno() == EACCES || s.sys_errno() == EPERM;
}

uint64_t PhysicalMemoryBytes() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

}  // namespace

DiskTierImpl::DiskTierImpl(const DiskTierOptions& options, Env* env, KillHook kill_hook)
    : options_(options), env_(env), kill_hook_(std::move(kill_hook)), layout_(options.dir) {
  counters_.events.Attach(options_.info_log, env_, options_.dir);
}

DiskTierImpl::~DiskTierImpl() { (void)Close(); }

Status DiskTierImpl::CreateFolder(const std::string& path) {
  auto info = env_->Stat(path);
  if (info.ok()) {
    if (info->type == FileType::kDirectory) return Status::Ok();
    // A symlink to a folder is a folder (CreateDir follows it and succeeds
    // only if it leads to one).
    if (info->type == FileType::kSymlink && env_->CreateDir(path, options_.dir_permissions).ok()) {
      return Status::Ok();
    }
    return Status::InvalidArgument("DiskTierOptions.dir: " + path + " exists and is not a folder");
  }
  if (!info.status().IsNotFound()) return info.status();
  KVTIER_RETURN_IF_ERROR(env_->CreateDirs(path, options_.dir_permissions));
  if (NeedsChmod(options_.dir_permissions, 0700)) {
    KVTIER_RETURN_IF_ERROR(env_->Chmod(path, options_.dir_permissions));
  }
  return Status::Ok();
}

Status DiskTierImpl::ProbeWritable() {
  // A fixed name: a probe a killed process left behind is truncated and
  // removed by the next one; two at once only race on its removal.
  const std::string probe = JoinPath(options_.dir, ".kvtier-write-probe");
  WriteFileOptions wo;
  wo.permissions = options_.file_permissions;
  wo.exclusive = false;
  auto file = env_->CreateFile(probe, wo);
  if (!file.ok()) return file.status();
  Status closed = (*file)->Close();
  Status removed = env_->RemoveFile(probe);
  if (!closed.ok()) return closed;
  return removed.ok() || removed.IsNotFound() ? Status::Ok() : removed;
}

Status DiskTierImpl::OpenReadOnlyIndex() {
  IndexOptions io;
  io.busy_timeout_ms = options_.sqlite_busy_timeout_ms;
  io.read_only = true;
  // Shared, where the lock file exists and can be locked: a process that
  // rebuilds the index (which needs the folder alone) waits for this one.
  auto lock = FolderLock::Acquire(env_, layout_, FileLock::kShared, options_.file_permissions,
                                  uint64_t{options_.sqlite_busy_timeout_ms} * 1000);
  if (lock.ok()) folder_lock_ = std::move(lock).value();
  Status files = CheckIndexFiles(env_, layout_);
  auto index = files.ok() ? DiskIndex::Open(layout_.IndexPath(), io)
                          : Result<std::unique_ptr<DiskIndex>>(files);
  if (!index.ok()) {
    return NameIndexError(layout_, index.status()).WithContext("read-only folder " + options_.dir);
  }
  index_ = std::move(index).value();
  return Status::Ok();
}

Status DiskTierImpl::OpenIndex() {
  if (read_only_) return OpenReadOnlyIndex();
  const std::string path = layout_.IndexPath();
  const bool existed = env_->Stat(path).ok();
  IndexOptions io;
  io.busy_timeout_ms = options_.sqlite_busy_timeout_ms;
  io.on_corruption = [this](const Status& s) { OnIndexCorruption(s); };
  // NORMAL in both modes: a WAL commit lost to a power cut only loses rows,
  // and the files they describe (fsynced, in kFsync mode) are adopted again by
  // the reconcile. FULL would add an fsync to every commit.
  io.synchronous_full = false;
  // A rebuild elsewhere takes moments: wait for it as long as for a busy index.
  const uint64_t wait_us = uint64_t{options_.sqlite_busy_timeout_ms} * 1000;
  KVTIER_ASSIGN_OR_RETURN(folder_lock_, FolderLock::Acquire(env_, layout_, FileLock::kShared,
                                                            options_.file_permissions, wait_us));
  // A symlink, folder or FIFO in its place never reaches SQLite (which
  // would follow, fail or block on it): it is a corrupt index.
  Status files = CheckIndexFiles(env_, layout_);
  auto index = files.ok() ? DiskIndex::Open(path, io) : Result<std::unique_ptr<DiskIndex>>(files);
  if (index.ok()) {
    // The signatures' own index is read here first: damage there is damage
    // found at open.
    Result<int64_t> sig = (*index)->SignatureId(options_.layout_signature);
    if (!sig.ok() && sig.status().IsCorruption()) index = sig.status();
  }
  if (!index.ok()) index = NameIndexError(layout_, index.status());
  if (!index.ok() && index.status().IsCorruption()) {
    // Not a usable database: keep it for inspection and rebuild from files,
    // but only if no other tier has the folder open (it would go on using
    // the old file while everyone else uses the new one).
    folder_lock_.Release();
    auto sole =
        FolderLock::Acquire(env_, layout_, FileLock::kExclusive, options_.file_permissions, 0);
    if (!sole.ok()) {
      counters_.events.IndexCorrupt(index.status(), DiskEvents::IndexFoundAt::kOpen,
                                    DiskEvents::IndexOutcome::kOpenRefused);
      return Status::Unavailable(index.status().message() +
                                 "; other processes have the folder open: it is set aside and "
                                 "rebuilt by the first Open() after they close it");
    }
    KVTIER_RETURN_IF_ERROR(SetAsideIndexFiles(env_, layout_, quarantine_.get()));
    counters_.events.IndexCorrupt(index.status(), DiskEvents::IndexFoundAt::kOpen,
                                  DiskEvents::IndexOutcome::kRebuilt);
    index = DiskIndex::Open(path, io);
    rebuilt_at_open_ = index.ok();
    {
      MutexLock lock(&mu_);
      index_damage_.reset();  // what the set-aside file reported while being opened
    }
    sole->Release();
    KVTIER_ASSIGN_OR_RETURN(folder_lock_, FolderLock::Acquire(env_, layout_, FileLock::kShared,
                                                              options_.file_permissions, wait_us));
  }
  if (!index.ok() && existed && !index.status().IsCorruption() &&
      !index.status().IsNotFound() && NearlyFull(env_, options_.dir)) {
    // No room for SQLite's -shm or WAL: evict before the index can be
    // written, as a store would on a full disk (full_disk_open.h).
    Result<std::vector<BlockKey>> removed = FreeRoomToOpen(env_, layout_, io);
    if (removed.ok() && !removed->empty()) {
      auto retry = DiskIndex::Open(path, io);
      if (retry.ok()) {
        index = std::move(retry);
        // Rows left now are files gone: misses, which the reconcile drops.
        (void)(*index)->Delete(*removed);
        DiskCounters::Add(counters_.evictions, removed->size());
      }
    }
  }
  if (!index.ok()) return index.status();
  index_ = std::move(index).value();
  if (!existed) {
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::string p = path + suffix;
      if (env_->Stat(p).ok()) KVTIER_RETURN_IF_ERROR(env_->Chmod(p, options_.file_permissions));
    }
  }
  return Status::Ok();
}

Status DiskTierImpl::Init() {
  KVTIER_RETURN_IF_ERROR(CreateFolder(options_.dir));
  if (Status probe = ProbeWritable(); !probe.ok()) {
    if (!IsReadOnlyError(probe)) return probe.WithContext("DiskTier::Open");
    read_only_ = true;
    counters_.events.ReadOnlyFolder(probe);
  }
  if (!read_only_) {
    KVTIER_RETURN_IF_ERROR(CreateFolder(layout_.BlocksDir()));
    KVTIER_RETURN_IF_ERROR(CreateFolder(layout_.QuarantineDir()));
  }
  writer_ = std::make_unique<BlockWriter>(env_, &layout_, &options_, &kill_hook_);
  if (options_.durability == Durability::kFsync && !read_only_) {
    // (kChecksum makes subfolders as needed: mkdir is all it costs.)
    KVTIER_RETURN_IF_ERROR(writer_->MakeAllSubdirs());
  }
  quarantine_ = std::make_unique<Quarantine>(env_, &layout_, options_.dir_permissions, &counters_);
  KVTIER_RETURN_IF_ERROR(OpenIndex());
  Result<int64_t> sig = index_->SignatureId(options_.layout_signature);
  if (read_only_ && sig.status().IsNotFound()) {
    sig = int64_t{0};  // no block of this layout in the folder: no row has id 0
  }
  KVTIER_ASSIGN_OR_RETURN(sig_id_, std::move(sig));
  capacity_ =
      std::make_unique<Capacity>(&options_, env_, index_.get(), &layout_, &counters_, &kill_hook_);
  committer_ = std::make_unique<GroupCommitter>(
      index_.get(), [this](const IndexRow& r) { return FileMatchesRow(env_, layout_, r); });
  uint64_t queue_bytes = options_.queue_max_bytes != 0
                             ? options_.queue_max_bytes
                             : DefaultDiskQueueBytes(PhysicalMemoryBytes());
  pending_ = std::make_unique<PendingWrites>(queue_bytes);
  WritePath::Parts wp;
  wp.options = &options_;
  wp.env = env_;
  wp.layout = &layout_;
  wp.index = index_.get();
  wp.capacity = capacity_.get();
  wp.quarantine = quarantine_.get();
  wp.committer = committer_.get();
  wp.pending = pending_.get();
  wp.writer = writer_.get();
  wp.counters = &counters_;
  wp.kill_hook = &kill_hook_;
  wp.sig_id = sig_id_;
  write_path_ = std::make_unique<WritePath>(wp);
  readers_ = std::make_unique<ParallelRunner>(env_, options_.read_threads);
  BlockReaderOptions ro;
  ro.direct_io = options_.direct_io_reads;
  ro.direct_io_min_bytes = options_.direct_io_min_bytes;
  reader_ = std::make_unique<BlockReader>(env_, &layout_, &options_.layout_signature, ro);
  ReadPath::Parts rp;
  rp.options = &options_;
  rp.env = env_;
  rp.layout = &layout_;
  rp.index = index_.get();
  rp.quarantine = quarantine_.get();
  rp.pending = pending_.get();
  rp.reader = reader_.get();
  rp.runner = readers_.get();
  rp.touches = &touches_;
  rp.counters = &counters_;
  rp.closed = &closed_;
  rp.sig_id = sig_id_;
  rp.touches_due = [this] { WakeTouchFlush(); };
  read_path_ = std::make_unique<ReadPath>(std::move(rp));
  for (uint32_t i = 0; i < options_.writer_threads && !read_only_; ++i) {
    writers_.push_back(env_->StartThread([this] { WriterLoop(); }));
  }
  if (!options_.reconcile_on_open && options_.open_reconcile_entries > 0 && !read_only_) {
    // A bounded share of the reconcile, from a subfolder that differs from
    // open to open, so that every writer adopts some of what killed writers
    // left behind. Its failures are the full reconcile's to report.
    const uint64_t mix = (static_cast<uint64_t>(env_->NowUnixMicros()) ^
                          (static_cast<uint64_t>(env_->ProcessId()) << 20)) *
                         0x9e3779b97f4a7c15ull;
    Reconciler::Parts parts{&options_,       env_,      &layout_, index_.get(), quarantine_.get(),
                            capacity_.get(), &counters_};
    (void)Reconciler(parts).RunBounded(static_cast<uint8_t>(mix >> 56),
                                       options_.open_reconcile_entries);
  }
  {
    MutexLock lock(&mu_);
    // A rebuilt index learns the files from the reconcile, asked for or not.
    reconcile_running_ = ((options_.reconcile_on_open || rebuilt_at_open_) && !read_only_) ||
                         index_damage_.has_value();
  }
  maintenance_ = env_->StartThread([this] { MaintenanceLoop(); });
  return Status::Ok();
}

void DiskTierImpl::WriterLoop() {
  // A batch of at least one block, at most commit_batch_bytes (and a count
  // that keeps one transaction short).
  constexpr size_t kMaxBatchBlocks = 256;
  while (true) {
    std::vector<std::shared_ptr<PendingBlock>> batch =
        pending_->NextBatchForWriter(capacity_->BatchBytes(options_.commit_batch_bytes),
                                     kMaxBatchBlocks);
    if (batch.empty()) return;
    (void)write_path_->Write(batch);
  }
}

Status DiskTierImpl::CheckStoreHeader(const BlockKey& key, const BlockBuffer& block) {
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &options_.layout_signature;
  opts.verify_checksum = false;
  Status checked = store_checker_.Verify(block.span(), opts);
  if (!checked.ok()) {
    return Status::InvalidArgument("DiskTier::Store: block " + key.Hex() +
                                   " is not a block file of this tier: " + checked.message());
  }
  return Status::Ok();
}

Status DiskTierImpl::Store(const BlockKey& key, SharedBlock block) {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::Store: the tier is closed");
  }
  if (block == nullptr || block->size() == 0) {
    return Status::InvalidArgument("DiskTier::Store: block " + key.Hex() + " is empty");
  }
  KVTIER_RETURN_IF_ERROR(CheckStoreHeader(key, *block));
  if (read_only_) {
    DiskCounters::Add(counters_.read_only_skips);
    if (options_.write_failure_listener) options_.write_failure_listener(key);
    return Status::Ok();
  }
  if (options_.writer_threads > 0) {
    switch (pending_->Enqueue(key, block, options_.queue_wait_micros)) {
      case PendingWrites::AddOutcome::kQueued:
        DiskCounters::Add(counters_.saves);
        return Status::Ok();
      case PendingWrites::AddOutcome::kDuplicate:
        DiskCounters::Add(counters_.saves_deduplicated);
        return Status::Ok();
      case PendingWrites::AddOutcome::kClosed:
        return Status::FailedPrecondition("DiskTier::Store: the tier is closed");
      case PendingWrites::AddOutcome::kFull:
        break;
    }
    if (options_.on_pressure == OnPressure::kDrop) {
      DiskCounters::Add(counters_.drops);
      counters_.events.QueueFull(pending_->max_bytes(), /*dropped=*/true);
      return Status::ResourceExhausted("DiskTier::Store: write queue full (" +
                                       std::to_string(pending_->max_bytes()) + " bytes); block " +
                                       key.Hex() + " dropped (on_pressure=drop)");
    }
  }
  bool closed = false;
  std::shared_ptr<PendingBlock> p = pending_->AddUnqueued(key, std::move(block), &closed);
  if (p == nullptr) {
    if (closed) return Status::FailedPrecondition("DiskTier::Store: the tier is closed");
    DiskCounters::Add(counters_.saves_deduplicated);
    return Status::Ok();
  }
  DiskCounters::Add(counters_.saves);
  if (options_.writer_threads > 0) {
    DiskCounters::Add(counters_.inline_writes);
    counters_.events.QueueFull(pending_->max_bytes(), /*dropped=*/false);
  }
  return write_path_->Write(std::span<const std::shared_ptr<PendingBlock>>(&p, 1))[0];
}

void DiskTierImpl::OnIndexCorruption(const Status& s) {
  DiskCounters::Add(counters_.errors);
  MutexLock lock(&mu_);
  if (index_damage_.has_value()) return;  // a repair is due already
  index_damage_ = s;
  // WaitForBackgroundReconcile() waits for the repair's outcome.
  reconcile_running_ = true;
  maintenance_cv_.Signal();
}

bool DiskTierImpl::RepairIndex(const Status& cause) {
  const uint64_t wait_us = uint64_t{options_.sqlite_busy_timeout_ms} * 1000;
  // As at Open(): only with the folder to ourselves, or the others would go
  // on using the old file while we use the new one.
  folder_lock_.Release();
  auto sole =
      FolderLock::Acquire(env_, layout_, FileLock::kExclusive, options_.file_permissions, 0);
  Status rebuilt =
      sole.ok()
          ? index_->Rebuild([this] { return SetAsideIndexFiles(env_, layout_, quarantine_.get()); })
          : sole.status();
  if (sole.ok()) sole->Release();
  auto shared =
      FolderLock::Acquire(env_, layout_, FileLock::kShared, options_.file_permissions, wait_us);
  if (shared.ok()) folder_lock_ = std::move(shared).value();
  if (!sole.ok()) {
    // Another process may rebuild it first: our next calls open whatever
    // file is at the path then.
    index_->DropConnections();
    counters_.events.IndexCorrupt(cause, DiskEvents::IndexFoundAt::kServing,
                                  DiskEvents::IndexOutcome::kServing);
    return false;
  }
  if (!rebuilt.ok()) {
    DiskCounters::Add(counters_.errors);
    counters_.events.IndexCorrupt(cause, DiskEvents::IndexFoundAt::kServing,
                                  DiskEvents::IndexOutcome::kRebuildFailed, rebuilt.message());
    return false;
  }
  counters_.events.IndexCorrupt(cause, DiskEvents::IndexFoundAt::kServing,
                                DiskEvents::IndexOutcome::kRebuilt);
  Reconciler::Parts parts{&options_,       env_,      &layout_, index_.get(), quarantine_.get(),
                          capacity_.get(), &counters_};
  if (Result<ReconcileReport> r = Reconciler(parts).Run(stop_); !r.ok()) {
    DiskCounters::Add(counters_.errors);
    counters_.events.ReconcileFailed(r.status());
  }
  return true;
}

void DiskTierImpl::WakeTouchFlush() {
  MutexLock lock(&mu_);
  touch_flush_wanted_ = true;
  maintenance_cv_.Signal();
}

Result<std::optional<size_t>> DiskTierImpl::Load(const BlockKey& key, std::span<std::byte> dst) {
  return read_path_->Load(key, dst);
}

std::vector<Result<std::optional<size_t>>> DiskTierImpl::LoadMany(
    std::span<const BlockKey> keys, std::span<const std::span<std::byte>> dsts) {
  return read_path_->LoadMany(keys, dsts);
}

void DiskTierImpl::LoadTensorBuffers(std::span<const BlockKey> keys,
                                     std::span<const TensorMask> masks,
                                     const BufferAllocator& alloc,
                                     const LoadedBufferCallback& done) {
  read_path_->LoadTensorBuffers(keys, masks, alloc, done);
}

void DiskTierImpl::LoadBuffers(std::span<const BlockKey> keys, const BufferAllocator& alloc,
                               const LoadedBufferCallback& done) {
  read_path_->LoadBuffers(keys, alloc, done);
}

std::optional<uint64_t> DiskTierImpl::SizeOf(const BlockKey& key) {
  if (closed_.load(std::memory_order_acquire)) return std::nullopt;
  if (SharedBlock b = pending_->Find(key)) return b->size();
  auto row = index_->Lookup(key);
  if (!row.ok() || !row->has_value() || (*row)->sig_id != sig_id_) return std::nullopt;
  return (*row)->size;
}

bool DiskTierImpl::Contains(const BlockKey& key) { return SizeOf(key).has_value(); }

std::vector<bool> DiskTierImpl::ContainsMany(std::span<const BlockKey> keys) {
  std::vector<bool> out(keys.size(), false);
  if (closed_.load(std::memory_order_acquire)) return out;
  std::vector<BlockKey> ask;
  std::vector<size_t> at;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (pending_->Find(keys[i]) != nullptr) {
      out[i] = true;
    } else {
      ask.push_back(keys[i]);
      at.push_back(i);
    }
  }
  if (ask.empty()) return out;
  auto rows = index_->LookupMany(ask);
  if (!rows.ok()) return out;
  for (size_t j = 0; j < ask.size(); ++j) {
    const std::optional<IndexRow>& row = (*rows)[j];
    out[at[j]] = row.has_value() && row->sig_id == sig_id_;
  }
  return out;
}

Status DiskTierImpl::ForEachKey(const std::function<void(const BlockKey&, uint64_t)>& fn) {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::ForEachKey: the tier is closed");
  }
  return index_->ForEachRow([&](const IndexRow& r) {
    if (r.sig_id == sig_id_) fn(r.key, r.size);
  });
}

Status DiskTierImpl::CheckWritable(const char* what) const {
  if (!read_only_) return Status::Ok();
  return Status::FailedPrecondition(std::string(what) + ": the folder " + options_.dir +
                                    " is read-only");
}

Result<bool> DiskTierImpl::Erase(const BlockKey& key) {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::Erase: the tier is closed");
  }
  KVTIER_RETURN_IF_ERROR(CheckWritable("DiskTier::Erase"));
  // A write of `key` in progress is finished (its file and row removed by
  // its writer) before this goes on: else a load between that write's
  // commit and its clean-up would read the block erased.
  bool removed = pending_->CancelAndWait(key);
  touches_.Forget(key);
  // File first: a crash in between leaves a row without a file (a miss),
  // never a file the reconcile would bring back.
  Status rm = env_->RemoveFile(layout_.BlockPath(key));
  if (rm.ok()) {
    removed = true;
  } else if (!rm.IsNotFound()) {
    return rm.WithContext("DiskTier::Erase");
  }
  KVTIER_ASSIGN_OR_RETURN(uint64_t rows, index_->Delete(std::span<const BlockKey>(&key, 1)));
  return removed || rows > 0;
}

Result<bool> DiskTierImpl::Forget(const BlockKey& key) {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::Forget: the tier is closed");
  }
  KVTIER_RETURN_IF_ERROR(CheckWritable("DiskTier::Forget"));
  bool removed = pending_->Cancel(key);
  touches_.Forget(key);
  KVTIER_ASSIGN_OR_RETURN(uint64_t rows, index_->Delete(std::span<const BlockKey>(&key, 1)));
  return removed || rows > 0;
}

Result<uint64_t> DiskTierImpl::Clear() {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::Clear: the tier is closed");
  }
  KVTIER_RETURN_IF_ERROR(CheckWritable("DiskTier::Clear"));
  pending_->CancelAll();
  touches_.Clear();
  uint64_t removed = 0;
  for (int prefix = 0; prefix < 256; ++prefix) {
    const std::string sub = layout_.Subdir(static_cast<uint8_t>(prefix));
    auto names = env_->ListDir(sub);
    if (names.ok()) {
      for (const std::string& name : *names) {
        if (ParseBlockDirEntry(name, static_cast<uint8_t>(prefix)).kind != EntryKind::kBlock) {
          continue;
        }
        Status s = env_->RemoveFile(JoinPath(sub, name));
        if (s.ok()) {
          ++removed;
        } else if (!s.IsNotFound()) {
          return s.WithContext("DiskTier::Clear");
        }
      }
    } else if (!names.status().IsNotFound()) {
      return names.status().WithContext("DiskTier::Clear");
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<IndexRow> rows,
                            index_->RowsWithPrefix(static_cast<uint8_t>(prefix)));
    std::vector<BlockKey> keys;
    keys.reserve(rows.size());
    for (const IndexRow& r : rows) keys.push_back(r.key);
    KVTIER_RETURN_IF_ERROR(index_->Delete(keys).status());
  }
  return removed;
}

void DiskTierImpl::FlushTouches() {
  std::vector<std::pair<BlockKey, int64_t>> batch = touches_.Drain();
  if (batch.empty() || read_only_) return;  // a read-only index records no access
  if (!index_->Touch(batch).ok()) DiskCounters::Add(counters_.errors);
}

Status DiskTierImpl::Flush() {
  if (closed_.load(std::memory_order_acquire)) return Status::Ok();  // Close() drained
  pending_->WaitForAllBefore(pending_->NextSeq());
  FlushTouches();
  return Status::Ok();
}

Result<uint64_t> DiskTierImpl::EnforceLimit() {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::EnforceLimit: the tier is closed");
  }
  KVTIER_RETURN_IF_ERROR(CheckWritable("DiskTier::EnforceLimit"));
  KVTIER_ASSIGN_OR_RETURN(EvictOutcome out, capacity_->EnforceLimit());
  return out.bytes_freed;
}

Result<ReconcileReport> DiskTierImpl::Reconcile() {
  if (closed_.load(std::memory_order_acquire)) {
    return Status::FailedPrecondition("DiskTier::Reconcile: the tier is closed");
  }
  KVTIER_RETURN_IF_ERROR(CheckWritable("DiskTier::Reconcile"));
  Reconciler::Parts parts{&options_,       env_,      &layout_, index_.get(), quarantine_.get(),
                          capacity_.get(), &counters_};
  return Reconciler(parts).Run(stop_);
}

void DiskTierImpl::WaitForBackgroundReconcile() {
  MutexLock lock(&mu_);
  while (reconcile_running_) reconcile_cv_.Wait(&lock);
}

void DiskTierImpl::MaintenanceLoop() {
  bool run_reconcile;
  {
    MutexLock lock(&mu_);
    run_reconcile = reconcile_running_;
  }
  if (run_reconcile) {
    Reconciler::Parts parts{&options_,       env_,      &layout_, index_.get(), quarantine_.get(),
                            capacity_.get(), &counters_};
    if (Result<ReconcileReport> r = Reconciler(parts).Run(stop_); !r.ok()) {
      DiskCounters::Add(counters_.errors);
      counters_.events.ReconcileFailed(r.status());
    }
    MutexLock lock(&mu_);
    reconcile_running_ = index_damage_.has_value();
    reconcile_cv_.SignalAll();
  }
  // Retention is applied a few times per retention period (at most every
  // minute); quarantine leftovers once an hour.
  const uint64_t expiry_every_us =
      options_.retention_seconds > 0
          ? static_cast<uint64_t>(std::clamp<int64_t>(
                SaturatingMul(options_.retention_seconds, 250'000), 1'000'000, 60'000'000))
          : 0;
  constexpr uint64_t kQuarantineEveryUs = 3600ull * 1'000'000;
  uint64_t last_expiry = env_->NowMicros();
  uint64_t last_quarantine = last_expiry;
  while (true) {
    std::optional<Status> damage;
    {
      MutexLock lock(&mu_);
      // One timed wait: an early wake-up only flushes the touches sooner.
      if (!maintenance_stop_ && !touch_flush_wanted_ && !index_damage_.has_value()) {
        maintenance_cv_.WaitFor(&lock, SaturatingMul(options_.touch_flush_interval_ms, 1000));
      }
      if (maintenance_stop_) return;
      touch_flush_wanted_ = false;
      damage = index_damage_;
    }
    if (damage.has_value()) {
      const bool repaired = RepairIndex(*damage);
      MutexLock lock(&mu_);
      // Not repaired (others hold the folder): the next call that finds the
      // damage asks again, at most once per wait above.
      index_damage_.reset();
      reconcile_running_ = false;
      reconcile_cv_.SignalAll();
      if (!repaired && !maintenance_stop_) {
        maintenance_cv_.WaitFor(&lock, SaturatingMul(options_.touch_flush_interval_ms, 1000));
      }
      continue;
    }
    FlushTouches();
    if (read_only_) continue;
    const uint64_t now = env_->NowMicros();
    if (expiry_every_us > 0 && now - last_expiry >= expiry_every_us) {
      last_expiry = now;
      if (!capacity_->EnforceLimit().ok()) DiskCounters::Add(counters_.errors);
    }
    if (options_.quarantine_retention_seconds > 0 && now - last_quarantine >= kQuarantineEveryUs) {
      last_quarantine = now;
      quarantine_->RemoveOlderThan(CutoffBefore(env_->NowUnixMicros() / kMicrosPerSecond,
                                                options_.quarantine_retention_seconds));
    }
  }
}

DiskTierStats DiskTierImpl::Stats() {
  DiskTierStats s;
  counters_.CopyTo(&s);
  s.write_failures = counters_.events.WriteFailures();
  s.configured_max_bytes = options_.max_bytes;
  if (pending_ != nullptr) {
    s.queue_bytes = pending_->bytes();
    s.queue_blocks = pending_->blocks();
  }
  {
    MutexLock lock(&mu_);
    s.reconcile_running = reconcile_running_;
  }
  if (index_ == nullptr) return s;
  auto per = index_->PerSignature();
  if (per.ok()) {
    for (const SignatureTotals& t : *per) {
      SignatureUsage u;
      u.signature = t.signature;
      u.blocks = t.blocks;
      u.bytes = t.bytes;
      u.compatible = t.signature == options_.layout_signature;
      s.entries += t.blocks;
      s.bytes += t.bytes;
      s.allocated_bytes += AllocatedEstimate(t.blocks, t.bytes, capacity_->alloc_unit());
      if (u.compatible) {
        s.compatible_entries += t.blocks;
        s.compatible_bytes += t.bytes;
      }
      s.per_signature.push_back(std::move(u));
    }
  }
  s.effective_max_bytes = capacity_->EffectiveLimit(s.allocated_bytes);
  s.quarantine_files = quarantine_->Count();
  return s;
}

Status DiskTierImpl::Close() {
  if (closed_.exchange(true)) return Status::Ok();
  stop_.store(true);
  if (pending_ != nullptr) pending_->Close();
  for (std::thread& t : writers_) {
    if (t.joinable()) t.join();
  }
  {
    MutexLock lock(&mu_);
    maintenance_stop_ = true;
  }
  maintenance_cv_.SignalAll();
  if (maintenance_.joinable()) maintenance_.join();
  {
    MutexLock lock(&mu_);
    reconcile_running_ = false;
    reconcile_cv_.SignalAll();
  }
  if (index_ != nullptr) FlushTouches();
  return Status::Ok();
}

}  // namespace disk
}  // namespace kvtier
