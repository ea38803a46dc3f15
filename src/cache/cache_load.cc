// CacheCore's read side: Load (host part on the caller's thread, disk part
// on the pool), Preload, and LoadFuture.
#include <string>
#include <utility>

#include "cache/cache_core.h"

namespace kvtier {

namespace cache_internal {
namespace {

constexpr TierMask kDiskBit = TierBit(IndexTier::kDisk);

}  // namespace

void CacheCore::NoteLoadError(LoadState& st, size_t pos, const Status& s) {
  CacheCounters::Add(counters_.load_errors);
  if (st.first_error.ok()) {
    st.first_error = Status::InvalidArgument("TieredCache::Load: buffer " + std::to_string(pos) +
                                             ": " + s.message());
  }
}

void CacheCore::FinishLoad(LoadState& st) {
  counters_.load_latency.Record(env_->NowMicros() - st.start_micros);
  st.Finish(st.first_error);
}

void CacheCore::NoteDiskMiss(const BlockKey& key) {
  if ((index_.Lookup(key) & kDiskBit) != 0) {
    CacheCounters::Add(counters_.stale_disk_hints);
    index_.MarkAbsent(key, IndexTier::kDisk);
  }
}

void CacheCore::Promote(const BlockKey& key, std::span<const std::byte> bytes,
                        HostTier::Reservation* r) {
  Result<BlockBuffer> copy = BlockBuffer::CopyOf(bytes);
  if (!copy.ok()) {
    CacheCounters::Add(counters_.promotion_failures);
    return;
  }
  auto block = std::make_shared<const BlockBuffer>(std::move(copy).value());
  // Clean: the disk tier has just served these bytes.
  if (host_->Put(key, std::move(block), HostEntryState::kClean, r).ok()) {
    CacheCounters::Add(counters_.promotions);
    CacheCounters::Add(counters_.bytes_promoted, bytes.size());
  } else {
    CacheCounters::Add(counters_.promotion_failures);
  }
}

Result<LoadFuture> CacheCore::Load(std::span<const BlockKey> keys,
                                   std::span<const std::span<std::byte>> dsts) {
  if (keys.size() != dsts.size()) {
    return Status::InvalidArgument("TieredCache::Load: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(dsts.size()) + " buffers");
  }
  GateScope gate(gate_);
  if (!gate.entered()) return Status::FailedPrecondition("TieredCache::Load: the cache is closed");
  auto st = std::make_shared<LoadState>();
  st->start_micros = env_->NowMicros();
  st->keys.assign(keys.begin(), keys.end());
  st->dsts.assign(dsts.begin(), dsts.end());
  st->out.resize(keys.size());
  CacheCounters::Add(counters_.lookups, keys.size());

  // Host hits are a memcpy each: done here, no thread hop, one host lock.
  std::vector<Result<SharedBlock>> host_hits = host_->GetMany(keys, dsts);
  for (size_t i = 0; i < keys.size(); ++i) {
    const Result<SharedBlock>& got = host_hits[i];
    if (!got.ok()) {
      NoteLoadError(*st, i, got.status());
      continue;
    }
    if (*got == nullptr) {
      st->disk_todo.push_back(i);
      continue;
    }
    const uint64_t n = (*got)->size();
    st->out[i] = LoadedBlock{CacheTier::kHost, n};
    CacheCounters::Add(counters_.hits_host);
    CacheCounters::Add(counters_.bytes_loaded_host, n);
  }
  if (st->disk_todo.empty() || disk_ == nullptr) {
    CacheCounters::Add(counters_.misses, st->disk_todo.size());
    FinishLoad(*st);
    return LoadFuture(st);
  }
  if (pool_ == nullptr) {
    RunDiskPart(st);
    return LoadFuture(st);
  }
  TaskPool::Task task;
  task.run = [this, st] { RunDiskPart(st); };
  // Close() cancels loads still queued; it holds the gate closed, so `this`
  // is alive while it runs this.
  task.cancel = [this, st] {
    CacheCounters::Add(counters_.loads_cancelled);
    CacheCounters::Add(counters_.misses, st->disk_todo.size());
    counters_.load_latency.Record(env_->NowMicros() - st->start_micros);
    st->Finish(Status::Unavailable("TieredCache::Load: the cache closed before the load ran"));
  };
  if (!pool_->Submit(std::move(task))) {
    // Unreachable while the gate is open (Close shuts the pool after it).
    return Status::Internal("TieredCache::Load: the load pool is stopped");
  }
  return LoadFuture(st);
}

void CacheCore::RunDiskPart(const std::shared_ptr<LoadState>& st) {
  std::vector<size_t> pos;
  std::vector<BlockKey> keys;
  std::vector<std::span<std::byte>> dsts;
  std::vector<HostTier::Reservation> reservations;
  pos.reserve(st->disk_todo.size());
  keys.reserve(st->disk_todo.size());
  dsts.reserve(st->disk_todo.size());
  reservations.reserve(st->disk_todo.size());
  uint64_t errors = 0;  // keys of disk_todo whose buffer was too small
  // Every key of disk_todo not served and not an error is a miss.
  auto count_misses = [&] {
    uint64_t unserved = 0;
    for (size_t i : st->disk_todo) unserved += st->out[i].tier == CacheTier::kNone ? 1 : 0;
    CacheCounters::Add(counters_.misses, unserved - errors);
  };

  for (size_t i : st->disk_todo) {
    if (st->cancelled.load()) break;
    const BlockKey& key = st->keys[i];
    std::optional<uint64_t> size = disk_->SizeOf(key);
    if (!size.has_value()) {
      NoteDiskMiss(key);
      continue;
    }
    if (*size > st->dsts[i].size()) {
      ++errors;
      NoteLoadError(*st, i,
                    Status::InvalidArgument("destination of " + std::to_string(st->dsts[i].size()) +
                                            " bytes is smaller than the block of " +
                                            std::to_string(*size) + " bytes"));
      continue;
    }
    HostTier::Reservation r;
    if (options_.promote_disk_hits) {
      // Budget first, read second (seed 003): concurrent promotions cannot
      // overshoot the budget, and a refusal costs no I/O.
      Result<HostTier::Reservation> got = host_->Reserve(*size);
      if (got.ok()) {
        r = std::move(got).value();
      } else {
        CacheCounters::Add(counters_.reservation_failures);
        CacheCounters::Add(counters_.promotion_failures);
      }
    }
    pos.push_back(i);
    keys.push_back(key);
    dsts.push_back(st->dsts[i]);
    reservations.push_back(std::move(r));
  }

  if (st->cancelled.load()) {
    reservations.clear();  // released before the future can see the load done
    CacheCounters::Add(counters_.loads_cancelled);
    count_misses();
    FinishLoad(*st);
    return;
  }

  std::vector<Result<std::optional<size_t>>> results = disk_->LoadMany(keys, dsts);
  const bool promote = !st->cancelled.load();
  for (size_t j = 0; j < keys.size(); ++j) {
    const size_t i = pos[j];
    Result<std::optional<size_t>>& r = results[j];
    if (!r.ok()) {
      if (r.status().IsInvalidArgument()) {
        ++errors;
        NoteLoadError(*st, i, r.status());
      } else {
        NoteDiskMiss(keys[j]);  // e.g. the tier closed under us: a miss
      }
    } else if (!r->has_value()) {
      NoteDiskMiss(keys[j]);
    } else {
      const size_t n = **r;
      st->out[i] = LoadedBlock{CacheTier::kDisk, n};
      CacheCounters::Add(counters_.hits_disk);
      CacheCounters::Add(counters_.bytes_loaded_disk, n);
      index_.MarkPresent(keys[j], IndexTier::kDisk);
      if (promote && !reservations[j].empty()) Promote(keys[j], dsts[j].first(n), &reservations[j]);
    }
    reservations[j].Release();
  }
  count_misses();
  FinishLoad(*st);
}

// ---- Preload ----

Result<size_t> CacheCore::Preload(std::span<const BlockKey> keys) {
  GateScope gate(gate_);
  if (!gate.entered())
    return Status::FailedPrecondition("TieredCache::Preload: the cache is closed");
  if (disk_ == nullptr) return size_t{0};
  const HostBudgetStats b = budget_->Stats();
  const uint64_t taken = b.used_bytes + b.reserved_bytes;
  const uint64_t free_bytes = b.capacity_bytes > taken ? b.capacity_bytes - taken : 0;

  std::vector<BlockKey> want;
  std::vector<BlockBuffer> buffers;
  std::vector<HostTier::Reservation> reservations;
  uint64_t selected = 0;
  for (const BlockKey& key : keys) {
    if (host_->Contains(key)) continue;
    std::optional<uint64_t> size = disk_->SizeOf(key);
    if (!size.has_value()) continue;
    if (selected + *size > free_bytes) break;
    Result<HostTier::Reservation> r = host_->Reserve(*size);
    if (!r.ok()) {
      CacheCounters::Add(counters_.reservation_failures);
      break;
    }
    Result<BlockBuffer> buf = BlockBuffer::Allocate(static_cast<size_t>(*size));
    if (!buf.ok()) break;
    selected += *size;
    want.push_back(key);
    buffers.push_back(std::move(buf).value());
    reservations.push_back(std::move(r).value());
  }
  if (want.empty()) return size_t{0};

  std::vector<std::span<std::byte>> dsts;
  dsts.reserve(buffers.size());
  for (BlockBuffer& b : buffers) dsts.push_back(b.mutable_span());
  std::vector<Result<std::optional<size_t>>> results = disk_->LoadMany(want, dsts);
  size_t loaded = 0;
  for (size_t j = 0; j < want.size(); ++j) {
    if (!results[j].ok() || !results[j]->has_value()) {
      NoteDiskMiss(want[j]);
      continue;
    }
    const size_t n = **results[j];
    buffers[j].Truncate(n);
    index_.MarkPresent(want[j], IndexTier::kDisk);
    auto block = std::make_shared<const BlockBuffer>(std::move(buffers[j]));
    if (host_->Put(want[j], std::move(block), HostEntryState::kClean, &reservations[j]).ok()) {
      ++loaded;
      CacheCounters::Add(counters_.preloads);
      CacheCounters::Add(counters_.promotions);
      CacheCounters::Add(counters_.bytes_promoted, n);
    } else {
      CacheCounters::Add(counters_.promotion_failures);
    }
  }
  return loaded;
}

}  // namespace cache_internal

// ---- LoadFuture ----

LoadFuture::LoadFuture(std::shared_ptr<cache_internal::LoadState> state)
    : state_(std::move(state)) {}

LoadFuture::LoadFuture(LoadFuture&& other) noexcept : state_(std::move(other.state_)) {}

LoadFuture& LoadFuture::operator=(LoadFuture&& other) noexcept {
  if (this != &other) {
    Reset();
    state_ = std::move(other.state_);
  }
  return *this;
}

LoadFuture::~LoadFuture() { Reset(); }

void LoadFuture::Reset() {
  if (state_ == nullptr) return;
  // The load may still be writing into the caller's buffers: stop what has
  // not started and wait for the rest before the caller may free them.
  state_->cancelled.store(true);
  state_->Wait();
  state_.reset();
}

bool LoadFuture::Ready() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

Result<std::vector<LoadedBlock>> LoadFuture::Get() const {
  state_->Wait();
  Status s;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    s = state_->status;
  }
  if (!s.ok()) return s;
  return state_->out;
}

void LoadFuture::Cancel() {
  if (state_ != nullptr) state_->cancelled.store(true);
}

}  // namespace kvtier
