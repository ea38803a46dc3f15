// CacheCore's read side: Load and LoadShared (host part on the caller's
// thread, host deliveries and the lower part — disk, then remote — on the
// load threads), Preload, and LoadFuture.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "cache/cache_core.h"
#include "core/mutex.h"

namespace kvtier {

namespace cache_internal {
namespace {

constexpr TierMask kDiskBit = TierBit(IndexTier::kDisk);

// LoadShared hands its host hits to the load threads (instead of running
// the callbacks on the caller's thread) when they add up to at least
// kSpreadHostHitsBytes and average at least kSpreadHostHitBlockBytes: only
// then do the copies it spreads cost more than the thread hop and the
// threads' contention on what each block updates (counters, the pool's
// lock). A pool restore from the host tier on 2 cores, caller alone against
// spread over 2 load threads, medians: 2,048 blocks of 4 KiB (8 MiB) 1.3 ms
// against 3.1; 32,768 of 4 KiB 39 ms against 58; 512 of 64 KiB (32 MiB)
// 2.2 ms against 1.8; 8 of 3 MiB (24 MiB) 0.84 ms against 0.97; 16 of
// 3 MiB 1.9 ms against 1.2; 128 of 3 MiB 20 ms against 11 (docs/tiers.md).
constexpr uint64_t kSpreadHostHitsBytes = uint64_t{32} << 20;
constexpr uint64_t kSpreadHostHitBlockBytes = uint64_t{64} << 10;

// Host budget reserved by a load's disk reads, waiting for the blocks they
// promote. Any reservation pays for any block of the load: Put converts
// what it holds and evicts for (or gives back) the difference.
class ReservationBank {
 public:
  void Add(HostTier::Reservation r) {
    MutexLock lock(&mu_);
    held_.push_back(std::move(r));
  }
  HostTier::Reservation Take() {
    MutexLock lock(&mu_);
    if (held_.empty()) return {};
    HostTier::Reservation r = std::move(held_.back());
    held_.pop_back();
    return r;
  }

 private:
  Mutex mu_;
  std::vector<HostTier::Reservation> held_ GUARDED_BY(mu_);
};

}  // namespace

void CacheCore::NoteLoadError(LoadState& st, size_t pos, const Status& s) {
  CacheCounters::Add(counters_.load_errors);
  MutexLock lock(&st.mu);
  if (st.first_error.ok()) {
    st.first_error = Status::InvalidArgument("TieredCache::Load: buffer " + std::to_string(pos) +
                                             ": " + s.message());
  }
}

void CacheCore::FinishPart(LoadState& st) {
  if (st.parts_left.fetch_sub(1) != 1) return;
  counters_.load_latency.Record(env_->NowMicros() - st.start_micros);
  Status s;
  {
    MutexLock lock(&st.mu);
    s = st.closed.ok() ? st.first_error : st.closed;
  }
  st.Finish(std::move(s));
}

void CacheCore::NoteDiskMiss(const BlockKey& key) {
  if ((index_.Lookup(key) & kDiskBit) != 0) {
    CacheCounters::Add(counters_.stale_disk_hints);
    index_.MarkAbsent(key, IndexTier::kDisk);
  }
}

void CacheCore::HandOut(LoadState& st, size_t i, CacheTier tier, const SharedBlock& block) {
  const uint64_t n = block->size();
  if (st.mode == LoadState::Mode::kCopy && st.dsts[i].size() < n) {
    NoteLoadError(st, i,
                  Status::InvalidArgument("destination of " + std::to_string(st.dsts[i].size()) +
                                          " bytes is smaller than the block of " +
                                          std::to_string(n) + " bytes"));
    return;
  }
  // Counted before the caller sees the block: whoever it wakes reads
  // counters that include it.
  switch (st.uncounted ? CacheTier::kNone : tier) {
    case CacheTier::kNone:
      break;
    case CacheTier::kHost:
      CacheCounters::Add(counters_.hits_host);
      CacheCounters::Add(counters_.bytes_loaded_host, n);
      break;
    case CacheTier::kDisk:
      CacheCounters::Add(counters_.hits_disk);
      CacheCounters::Add(counters_.bytes_loaded_disk, n);
      break;
    default:
      CacheCounters::Add(counters_.hits_remote);
      CacheCounters::Add(counters_.bytes_loaded_remote, n);
      break;
  }
  if (st.mode == LoadState::Mode::kCopy) {
    std::memcpy(st.dsts[i].data(), block->data(), n);
    st.out[i] = LoadedBlock{tier, n, nullptr};
  } else if (st.on_block) {
    st.out[i] = LoadedBlock{tier, n, nullptr};
    st.on_block(i, LoadedBlock{tier, n, block});
  } else {
    st.out[i] = LoadedBlock{tier, n, block};
  }
}

void CacheCore::HandOutMiss(LoadState& st, size_t i) {
  // Before the caller hears of it, as in HandOut.
  if (!st.uncounted) CacheCounters::Add(counters_.misses);
  if (st.mode == LoadState::Mode::kShare && st.on_block) st.on_block(i, LoadedBlock{});
}

void CacheCore::Promote(const BlockKey& key, const SharedBlock& block, HostTier::Reservation* r,
                        CacheTier from) {
  // Clean: a lower tier has just served these bytes. The read buffer
  // itself becomes the entry: no copy.
  if (host_->Put(key, block, HostEntryState::kClean, r).ok()) {
    CacheCounters::Add(counters_.promotions);
    if (from == CacheTier::kRemote) CacheCounters::Add(counters_.remote_promotions);
    CacheCounters::Add(counters_.bytes_promoted, block->size());
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
  auto st = std::make_shared<LoadState>();
  st->mode = LoadState::Mode::kCopy;
  st->dsts.assign(dsts.begin(), dsts.end());
  return StartLoad(std::move(st), keys, "TieredCache::Load");
}

Result<LoadFuture> CacheCore::LoadShared(std::span<const BlockKey> keys,
                                         SharedLoadOptions options) {
  auto st = std::make_shared<LoadState>();
  st->mode = LoadState::Mode::kShare;
  st->on_block = std::move(options.on_block);
  st->uncounted = options.uncounted;
  st->masks = std::move(options.tensor_masks);
  return StartLoad(std::move(st), keys, "TieredCache::LoadShared");
}

Result<LoadFuture> CacheCore::StartLoad(std::shared_ptr<LoadState> st,
                                        std::span<const BlockKey> keys, const char* what) {
  GateScope gate(gate_);
  if (!gate.entered()) {
    return Status::FailedPrecondition(std::string(what) + ": the cache is closed");
  }
  st->start_micros = env_->NowMicros();
  st->keys.assign(keys.begin(), keys.end());
  st->out.resize(keys.size());
  if (!st->uncounted) CacheCounters::Add(counters_.lookups, keys.size());

  // One host lock for the batch; the blocks are shared, not copied, here.
  std::vector<Result<SharedBlock>> found = host_->GetMany(keys);
  std::vector<std::pair<size_t, SharedBlock>> hits;
  uint64_t hit_bytes = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!found[i].ok() || *found[i] == nullptr) {
      st->lower_todo.push_back(i);
      continue;
    }
    hit_bytes += (*found[i])->size();
    hits.emplace_back(i, *std::move(found[i]));
  }
  found.clear();

  const bool lower_part = !st->lower_todo.empty() && (disk_ != nullptr || remote_ != nullptr);
  uint32_t spread = 0;  // load threads the host hits go to (0: this thread)
  if (st->mode == LoadState::Mode::kShare && st->on_block && pool_ != nullptr && hits.size() > 1 &&
      hit_bytes >= kSpreadHostHitsBytes && hit_bytes / hits.size() >= kSpreadHostHitBlockBytes) {
    spread = static_cast<uint32_t>(std::min<size_t>(options_.load_threads, hits.size()));
  }
  // This thread's part, plus the ones handed to the pool.
  st->parts_left.store(1 + spread + (lower_part && pool_ != nullptr ? 1 : 0));

  if (spread > 0) {
    // Thread t hands out hits t, t + spread, ...: early blocks land first
    // on every thread, so a consumer waiting for a prefix sees it grow.
    auto shared_hits =
        std::make_shared<std::vector<std::pair<size_t, SharedBlock>>>(std::move(hits));
    for (uint32_t t = 0; t < spread; ++t) {
      auto deliver = [this, st, shared_hits, t, spread] {
        for (size_t k = t; k < shared_hits->size(); k += spread) {
          auto& [i, block] = (*shared_hits)[k];
          HandOut(*st, i, CacheTier::kHost, block);
          block.reset();
        }
        FinishPart(*st);
      };
      TaskPool::Task task;
      task.run = deliver;
      // Closing: the blocks are in hand, so they are still handed out.
      task.cancel = deliver;
      (void)pool_->Submit(std::move(task));  // cannot fail while the gate is open
    }
  } else {
    for (auto& [i, block] : hits) HandOut(*st, i, CacheTier::kHost, block);
    hits.clear();
  }

  if (!lower_part) {
    for (size_t i : st->lower_todo) HandOutMiss(*st, i);
  } else if (pool_ == nullptr) {
    RunLowerPart(st);
  } else {
    TaskPool::Task task;
    task.run = [this, st] {
      RunLowerPart(st);
      FinishPart(*st);
    };
    // Close() cancels loads still queued; it holds the gate closed, so
    // `this` is alive while it runs this.
    task.cancel = [this, st] {
      CacheCounters::Add(counters_.loads_cancelled);
      for (size_t i : st->lower_todo) HandOutMiss(*st, i);
      {
        MutexLock lock(&st->mu);
        st->closed = Status::Unavailable("TieredCache: the cache closed before the load ran");
      }
      FinishPart(*st);
    };
    (void)pool_->Submit(std::move(task));  // cannot fail while the gate is open
  }
  FinishPart(*st);
  return LoadFuture(std::move(st));
}

void CacheCore::RunLowerPart(const std::shared_ptr<LoadState>& st) {
  const std::vector<size_t>& todo = st->lower_todo;
  if (st->cancelled.load()) {
    CacheCounters::Add(counters_.loads_cancelled);
    for (size_t i : todo) HandOutMiss(*st, i);
    return;
  }
  if (disk_ == nullptr) {
    RunRemotePart(*st, todo);
    return;
  }
  // Disk misses wait here for the remote tier (disk read threads report
  // them, possibly at once).
  Mutex remote_mu;
  std::vector<size_t> remote_todo;
  // A disk miss goes on to Redis, or out as a miss without one (whole and
  // partial reads alike).
  auto disk_miss = [&](size_t i, const BlockKey& key) {
    if (!st->cancelled.load()) NoteDiskMiss(key);
    if (remote_ != nullptr) {
      MutexLock lock(&remote_mu);
      remote_todo.push_back(i);
    } else {
      HandOutMiss(*st, i);
    }
  };
  // Keys whose mask selects a subset: read partially, never promoted (the
  // buffer is only partly valid).
  std::vector<size_t> whole_todo;
  std::vector<size_t> partial_todo;
  for (size_t i : todo) (IsPartial(*st, i) ? partial_todo : whole_todo).push_back(i);
  std::vector<BlockKey> pkeys;
  std::vector<TensorMask> pmasks;
  for (size_t i : partial_todo) {
    pkeys.push_back(st->keys[i]);
    pmasks.push_back(st->masks[i]);
  }
  DiskTier::BufferAllocator palloc = [&](size_t bytes) -> Result<BlockBuffer> {
    if (st->cancelled.load()) return Status::Unavailable("TieredCache: the load was cancelled");
    return buffers_->Take(bytes);
  };
  DiskTier::LoadedBufferCallback pdone = [&](size_t j, Result<std::optional<BlockBuffer>> r) {
    const size_t i = partial_todo[j];
    if (!r.ok() || !r->has_value()) {
      disk_miss(i, pkeys[j]);
      return;
    }
    index_.MarkPresent(pkeys[j], IndexTier::kDisk);
    HandOut(*st, i, CacheTier::kDisk, std::make_shared<const BlockBuffer>(std::move(**r)));
  };
  auto run_partial = [&] { disk_->LoadTensorBuffers(pkeys, pmasks, palloc, pdone); };
  // A load with both (a restore: the blocks a sliding window or a recurrent
  // state needs whole after the many it reads in part) reads both at once on
  // the disk's read threads, the partial part from a thread of its own:
  // one after the other, the few whole blocks would wait for the last
  // partial read and then leave the read threads half idle.
  std::thread partial_thread;
  struct Joiner {  // also when what follows throws (its lambdas' captures die with this frame)
    std::thread* t;
    ~Joiner() {
      if (t->joinable()) t->join();
    }
  } joiner{&partial_thread};
  if (!partial_todo.empty() && !whole_todo.empty()) {
    try {
      partial_thread = env_->StartThread(run_partial);
    } catch (const std::system_error&) {
      run_partial();  // no thread to be had: one after the other
    }
  } else if (!partial_todo.empty()) {
    run_partial();
  }
  const std::vector<size_t>& whole = whole_todo;
  std::vector<BlockKey> keys;
  keys.reserve(whole.size());
  for (size_t i : whole) keys.push_back(st->keys[i]);
  const bool promote = options_.promote_disk_hits;
  ReservationBank bank;

  // Sizes come from the disk tier as it asks for each buffer (a small
  // block's own file once opened, a large block's index row): budget first,
  // read second (seed 003), so concurrent promotions cannot overshoot the
  // budget, and a refusal costs no read.
  // Each block reaches HandOut (and the caller) on the read thread that
  // verified it, as soon as it lands.
  DiskTier::BufferAllocator alloc = [&](size_t bytes) -> Result<BlockBuffer> {
    if (st->cancelled.load()) return Status::Unavailable("TieredCache: the load was cancelled");
    if (promote) {
      Result<HostTier::Reservation> r = host_->Reserve(bytes);
      if (r.ok()) {
        bank.Add(std::move(r).value());
      } else {
        CacheCounters::Add(counters_.reservation_failures);
        CacheCounters::Add(counters_.promotion_failures);
      }
    }
    return buffers_->Take(bytes);
  };
  DiskTier::LoadedBufferCallback done = [&](size_t j, Result<std::optional<BlockBuffer>> r) {
    const size_t i = whole[j];
    if (!r.ok() || !r->has_value()) {
      disk_miss(i, keys[j]);
      return;
    }
    auto block = std::make_shared<const BlockBuffer>(std::move(**r));
    index_.MarkPresent(keys[j], IndexTier::kDisk);
    // Promoted before it is handed out: once the caller has the block, a
    // second load of the key finds it in RAM.
    if (promote && !st->cancelled.load()) {
      HostTier::Reservation res = bank.Take();
      if (!res.empty()) Promote(keys[j], block, &res, CacheTier::kDisk);
    }
    HandOut(*st, i, CacheTier::kDisk, block);
  };
  if (!keys.empty()) disk_->LoadBuffers(keys, alloc, done);
  if (partial_thread.joinable()) partial_thread.join();
  if (remote_ == nullptr) return;
  // Both disk calls have returned: no read thread touches remote_todo any
  // more.
  std::vector<size_t> rest;
  {
    MutexLock lock(&remote_mu);
    rest.swap(remote_todo);
  }
  std::sort(rest.begin(), rest.end());  // the callbacks came in any order
  RunRemotePart(*st, rest);
}

bool CacheCore::IsPartial(const LoadState& st, size_t i) {
  return i < st.masks.size() && !st.masks[i].empty() &&
         !MaskSelectsAll(st.masks[i], st.masks[i].size());
}

void CacheCore::RunRemotePart(LoadState& st, const std::vector<size_t>& all) {
  if (all.empty()) return;
  if (st.cancelled.load()) {
    for (size_t i : all) HandOutMiss(st, i);
    return;
  }
  CacheCounters::Add(counters_.remote_lookups, all.size());
  // Misses are handed out after the remote calls return: the remote tier
  // deletes bad values after its callbacks, and a caller that hears of a
  // miss recomputes and stores the block, whose Put must not race with
  // that delete (skip_existing would see the bad value, or the delete
  // would remove the good one).
  std::vector<size_t> misses;
  std::vector<size_t> todo;
  std::vector<size_t> partial;
  for (size_t i : all) (IsPartial(st, i) ? partial : todo).push_back(i);
  if (!partial.empty()) {
    // Only the selected tensors' ranges are read (and verified); the
    // buffer is only partly valid, so it is never promoted.
    std::vector<BlockKey> pkeys;
    std::vector<TensorMask> pmasks;
    for (size_t i : partial) {
      pkeys.push_back(st.keys[i]);
      pmasks.push_back(st.masks[i]);
    }
    RemoteTier::BufferAllocator palloc = [&](size_t bytes) -> Result<BlockBuffer> {
      if (st.cancelled.load()) return Status::Unavailable("TieredCache: the load was cancelled");
      return buffers_->Take(bytes);
    };
    RemoteTier::LoadedBufferCallback pdone = [&](size_t j, Result<std::optional<BlockBuffer>> r) {
      const size_t i = partial[j];
      if (!r.ok() || !r->has_value()) {
        CacheCounters::Add(counters_.remote_misses);
        misses.push_back(i);
        return;
      }
      HandOut(st, i, CacheTier::kRemote, std::make_shared<const BlockBuffer>(std::move(**r)));
    };
    remote_->LoadTensorBuffers(pkeys, pmasks, palloc, pdone);
  }
  std::vector<BlockKey> keys;
  keys.reserve(todo.size());
  for (size_t i : todo) keys.push_back(st.keys[i]);
  const bool promote = options_.promote_remote_hits;
  ReservationBank bank;
  // As on disk: budget first (the reply's length is known before its
  // bytes are read), read second, so that promotions cannot overshoot it.
  RemoteTier::BufferAllocator alloc = [&](size_t bytes) -> Result<BlockBuffer> {
    if (st.cancelled.load()) return Status::Unavailable("TieredCache: the load was cancelled");
    if (promote) {
      Result<HostTier::Reservation> r = host_->Reserve(bytes);
      if (r.ok()) {
        bank.Add(std::move(r).value());
      } else {
        CacheCounters::Add(counters_.reservation_failures);
        CacheCounters::Add(counters_.promotion_failures);
      }
    }
    return buffers_->Take(bytes);
  };
  RemoteTier::LoadedBufferCallback done = [&](size_t j, Result<std::optional<BlockBuffer>> r) {
    const size_t i = todo[j];
    if (!r.ok() || !r->has_value()) {
      CacheCounters::Add(counters_.remote_misses);
      misses.push_back(i);
      return;
    }
    auto block = std::make_shared<const BlockBuffer>(std::move(**r));
    if (promote && !st.cancelled.load()) {
      HostTier::Reservation res = bank.Take();
      if (!res.empty()) Promote(keys[j], block, &res, CacheTier::kRemote);
    }
    HandOut(st, i, CacheTier::kRemote, block);
  };
  if (!keys.empty()) remote_->LoadBuffers(keys, alloc, done);
  std::sort(misses.begin(), misses.end());
  for (size_t i : misses) HandOutMiss(st, i);
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
    Result<BlockBuffer> buf = buffers_->Take(static_cast<size_t>(*size));
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
  // The load may still be writing into the caller's buffers or running its
  // callback: stop what has not started and wait for the rest before the
  // caller may free what they use.
  state_->cancelled.store(true);
  state_->Wait();
  state_.reset();
}

bool LoadFuture::Ready() const {
  MutexLock lock(&state_->mu);
  return state_->done;
}

Result<std::vector<LoadedBlock>> LoadFuture::Get() const {
  state_->Wait();
  Status s;
  {
    MutexLock lock(&state_->mu);
    s = state_->status;
  }
  if (!s.ok()) return s;
  return state_->out;
}

void LoadFuture::Cancel() {
  if (state_ != nullptr) state_->cancelled.store(true);
}

}  // namespace kvtier
