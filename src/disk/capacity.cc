#include "disk/capacity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/saturating_time.h"

namespace kvtier::disk {
namespace {

// MakeRoom() evicts only when free space is under twice the room asked for
// plus this much (or an eighth of what the cache could use, if more): the
// disk is full, or nearly.
constexpr uint64_t kNotFullSlackBytes = 64 * 1024;

// One transaction of EvictRows(): at most `chunk` victims.
Result<EvictOutcome> EvictChunk(DiskIndex* index, const EvictRequest& req, uint32_t chunk,
                                const UnlinkFn& unlink, const EvictHook& hook, bool* hooked) {
  EvictOutcome out;
  KVTIER_ASSIGN_OR_RETURN(DiskIndex::WriteTransaction tx, index->BeginWrite());
  KVTIER_ASSIGN_OR_RETURN(IndexTotals totals, tx.Totals(req.alloc_unit));
  uint32_t budget = chunk;

  auto remove = [&](const IndexRow& r, bool expiry) -> Status {
    Status s = unlink(r.key);
    if (!(*hooked) && hook) {
      *hooked = true;
      hook();
    }
    if (!s.ok() && !s.IsNotFound()) {
      ++out.unlink_failures;
      return Status::Ok();
    }
    KVTIER_ASSIGN_OR_RETURN(bool deleted, tx.Delete(r.key));
    if (deleted) {
      totals.entries -= std::min<uint64_t>(totals.entries, 1);
      totals.bytes -= std::min(totals.bytes, r.size);
      const uint64_t alloc = AllocatedEstimate(r.size, req.alloc_unit);
      totals.allocated -= std::min(totals.allocated, alloc);
      out.bytes_freed += r.size;
      out.allocated_freed += alloc;
      ++(expiry ? out.expired : out.evicted);
    }
    return Status::Ok();
  };

  if (req.expire_before_us > 0) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<IndexRow> rows,
                            tx.RowsCreatedBefore(req.expire_before_us, budget));
    for (const IndexRow& r : rows) {
      KVTIER_RETURN_IF_ERROR(remove(r, /*expiry=*/true));
      --budget;
    }
  }

  // Evicting moves bytes from tracked to free: the limit, a fraction of
  // their sum, is fixed for the whole transaction.
  const uint64_t limit = EffectiveLimitBytes(req.limit, totals.allocated);
  auto over = [&]() {
    bool bytes_over = totals.allocated + req.reserve_bytes > limit;
    bool entries_over =
        req.limit.max_entries != 0 && totals.entries + req.reserve_entries > req.limit.max_entries;
    return bytes_over || entries_over;
  };
  uint64_t failures_before = out.unlink_failures;
  while (budget > 0 && over()) {
    // Rows whose unlink failed stay at the head of the LRU order: skip them.
    KVTIER_ASSIGN_OR_RETURN(
        std::vector<IndexRow> rows,
        tx.LruRows(std::min<uint32_t>(budget, 64), out.unlink_failures - failures_before));
    if (rows.empty()) break;
    for (const IndexRow& r : rows) {
      if (budget == 0 || !over()) break;
      KVTIER_RETURN_IF_ERROR(remove(r, /*expiry=*/false));
      --budget;
    }
  }
  out.within_limit = !over();
  out.effective_limit = limit;
  out.after = totals;
  KVTIER_RETURN_IF_ERROR(tx.Commit());
  return out;
}

}  // namespace

std::string TooLargeMessage(uint64_t file_bytes, uint64_t blocks, uint64_t allocated, uint64_t unit,
                            uint64_t limit, bool free_disk_binds) {
  std::string what = blocks > 1 ? std::to_string(blocks) + " block files of " +
                                      std::to_string(file_bytes) + " bytes in all"
                                : "a block file of " + std::to_string(file_bytes) + " bytes";
  return what + " would take " + std::to_string(allocated) + " bytes of disk (in units of " +
         std::to_string(unit) + " bytes), which exceeds the disk tier's effective limit of " +
         std::to_string(limit) + " bytes (on allocated bytes; set by " +
         (free_disk_binds ? "free_space_fraction of the folder's disk" : "max_bytes") + ")";
}

uint64_t EffectiveLimitBytes(const LimitSpec& spec, uint64_t tracked_bytes) {
  uint64_t limit = spec.max_bytes == 0 ? UINT64_MAX : spec.max_bytes;
  if (spec.free_bytes != UINT64_MAX) {
    // Exact integer arithmetic on the fraction in parts per million.
    using u128 = unsigned __int128;
    const u128 ppm = static_cast<u128>(std::llround(spec.free_space_fraction * 1e6));
    const u128 avail = static_cast<u128>(tracked_bytes) + spec.free_bytes;
    const u128 disk = avail * ppm / 1'000'000;
    limit = std::min<u128>(limit, disk) == disk ? static_cast<uint64_t>(disk) : limit;
  }
  return limit;
}

Result<EvictOutcome> EvictRows(DiskIndex* index, const EvictRequest& req, const UnlinkFn& unlink,
                               const EvictHook& hook) {
  constexpr uint32_t kChunk = 256;
  EvictOutcome total;
  bool hooked = false;
  uint64_t remaining = req.max_victims == 0 ? UINT64_MAX : req.max_victims;
  while (true) {
    uint32_t chunk = static_cast<uint32_t>(std::min<uint64_t>(remaining, kChunk));
    KVTIER_ASSIGN_OR_RETURN(EvictOutcome part,
                            EvictChunk(index, req, chunk, unlink, hook, &hooked));
    total.evicted += part.evicted;
    total.expired += part.expired;
    total.bytes_freed += part.bytes_freed;
    total.allocated_freed += part.allocated_freed;
    total.unlink_failures += part.unlink_failures;
    total.within_limit = part.within_limit;
    total.effective_limit = part.effective_limit;
    total.after = part.after;
    uint64_t removed = part.evicted + part.expired;
    remaining -= std::min(remaining, removed + part.unlink_failures);
    // Stop when within limit with nothing left to expire, when a chunk made
    // no progress (only failures or no rows), or when the bound is spent.
    bool more_expiry = req.expire_before_us > 0 && part.expired == chunk;
    if ((part.within_limit && !more_expiry) || removed == 0 || remaining == 0) break;
  }
  return total;
}

Capacity::Reservation& Capacity::Reservation::operator=(Reservation&& o) noexcept {
  if (this != &o) {
    Release();
    owner_ = o.owner_;
    bytes_ = o.bytes_;
    blocks_ = o.blocks_;
    o.owner_ = nullptr;
  }
  return *this;
}

void Capacity::Reservation::Release() {
  if (owner_ == nullptr) return;
  MutexLock lock(&owner_->mu_);
  owner_->inflight_bytes_ -= std::min(owner_->inflight_bytes_, bytes_);
  owner_->inflight_blocks_ -= std::min(owner_->inflight_blocks_, blocks_);
  owner_ = nullptr;
}

Capacity::Capacity(const DiskTierOptions* options, Env* env, DiskIndex* index,
                   const FolderLayout* layout, DiskCounters* counters, const KillHook* kill_hook)
    : options_(options),
      env_(env),
      index_(index),
      layout_(layout),
      counters_(counters),
      kill_hook_(kill_hook) {}

uint64_t Capacity::FreeBytes() {
  const uint64_t now = env_->NowMicros();
  {
    MutexLock lock(&mu_);
    if (free_valid_ && now - free_read_at_us_ < options_->free_space_ttl_micros) {
      uint64_t v = free_bytes_ + freed_since_;
      return v - std::min(v, written_since_);
    }
  }
  Result<uint64_t> free = env_->FreeSpace(options_->dir);
  MutexLock lock(&mu_);
  if (!free.ok()) {
    DiskCounters::Add(counters_->errors);
    return UINT64_MAX;  // unknown: the configured limit alone applies
  }
  free_valid_ = true;
  free_bytes_ = *free;
  free_read_at_us_ = now;
  written_since_ = 0;
  freed_since_ = 0;
  return free_bytes_;
}

void Capacity::InvalidateFreeSpace() {
  MutexLock lock(&mu_);
  free_valid_ = false;
}

void Capacity::NoteWritten(uint64_t bytes) {
  MutexLock lock(&mu_);
  written_since_ += bytes;
}

void Capacity::NoteFreed(uint64_t bytes) {
  MutexLock lock(&mu_);
  freed_since_ += bytes;
}

uint64_t Capacity::alloc_unit() {
  MutexLock lock(&mu_);
  return alloc_unit_;
}

bool Capacity::alloc_unit_known() {
  MutexLock lock(&mu_);
  return alloc_unit_known_;
}

void Capacity::NoteAllocation(const FileInfo& info) {
  if (info.type != FileType::kRegular || info.size == 0 || info.allocated_bytes == 0) return;
  // The smallest power of two (a sector at least, 1 MiB at most) that
  // rounds the length up to what was allocated; 1 where nothing is rounded
  // (compression, inline data).
  uint64_t unit = 1;
  if (info.allocated_bytes > info.size) {
    unit = 512;
    while (unit < (uint64_t{1} << 20) && AllocatedEstimate(info.size, unit) < info.allocated_bytes) {
      unit *= 2;
    }
  }
  MutexLock lock(&mu_);
  alloc_unit_ = unit;
  alloc_unit_known_ = true;
}

uint64_t Capacity::BatchBytes(uint64_t configured) {
  uint64_t limit;
  {
    MutexLock lock(&mu_);
    limit = last_limit_;
  }
  if (limit == UINT64_MAX) {
    // No store yet: the first batches of every writer must be bounded too.
    auto totals = index_->Totals(alloc_unit());
    if (totals.ok()) {
      limit = EffectiveLimit(totals->allocated);
      MutexLock lock(&mu_);
      if (last_limit_ == UINT64_MAX) last_limit_ = limit;
    }
  }
  return std::min(configured, limit / 32);
}

uint64_t Capacity::inflight_bytes() {
  MutexLock lock(&mu_);
  return inflight_bytes_;
}

LimitSpec Capacity::Spec() {
  LimitSpec spec;
  spec.max_bytes = options_->max_bytes;
  spec.max_entries = options_->max_entries;
  spec.free_space_fraction = options_->free_space_fraction;
  spec.free_bytes = FreeBytes();
  return spec;
}

uint64_t Capacity::EffectiveLimit(uint64_t tracked_bytes) {
  return EffectiveLimitBytes(Spec(), tracked_bytes);
}

Status Capacity::UnlinkBlock(const BlockKey& key) {
  return env_->RemoveFile(layout_->BlockPath(key));
}

EvictRequest Capacity::MakeRequest(const LimitSpec& spec, uint64_t reserve_bytes,
                                   uint64_t reserve_entries, uint32_t max_victims) {
  EvictRequest req;
  req.limit = spec;
  req.alloc_unit = alloc_unit();
  req.reserve_bytes = reserve_bytes;
  req.reserve_entries = reserve_entries;
  req.max_victims = max_victims;
  if (options_->retention_seconds > 0) {
    req.expire_before_us =
        CutoffBefore(env_->NowUnixMicros(), SecondsToMicros(options_->retention_seconds));
  }
  return req;
}

void Capacity::Account(const EvictOutcome& out) {
  DiskCounters::Add(counters_->evictions, out.evicted);
  DiskCounters::Add(counters_->expired, out.expired);
  DiskCounters::Add(counters_->unlink_failures, out.unlink_failures);
  if (out.allocated_freed > 0) NoteFreed(out.allocated_freed);
}

Result<Capacity::Reservation> Capacity::Reserve(uint64_t file_bytes, uint64_t blocks) {
  const uint64_t unit = alloc_unit();
  const uint64_t bytes = AllocatedEstimate(std::max<uint64_t>(blocks, 1), file_bytes, unit);
  uint64_t reserve_bytes, reserve_blocks;
  {
    MutexLock lock(&mu_);
    inflight_bytes_ += bytes;
    inflight_blocks_ += blocks;
    reserve_bytes = inflight_bytes_;
    reserve_blocks = inflight_blocks_;
  }
  Reservation reservation(this, bytes, blocks);

  KVTIER_ASSIGN_OR_RETURN(IndexTotals totals, index_->Totals(unit));
  LimitSpec spec = Spec();
  uint64_t limit = EffectiveLimitBytes(spec, totals.allocated);
  const uint64_t configured = spec.max_bytes == 0 ? UINT64_MAX : spec.max_bytes;
  if (limit < configured && totals.allocated + reserve_bytes > limit) {
    // Free disk space is what binds: never evict on a cached reading (the
    // disk may have emptied since); read it again first.
    InvalidateFreeSpace();
    spec = Spec();
    limit = EffectiveLimitBytes(spec, totals.allocated);
  }
  {
    MutexLock lock(&mu_);
    last_limit_ = limit;
  }
  // Like with like: the limit is on allocated bytes, as are the reserved
  // ones (file lengths would keep small blocks, which take a whole unit
  // each, from ever reaching it).
  if (limit < configured && totals.allocated + reserve_bytes > limit) {
    counters_->events.Pressure(totals.allocated, limit, spec.max_bytes);
  }
  if (bytes > limit) {
    // A reading taken while the disk was full must not block stores until
    // it expires: read it again next time.
    InvalidateFreeSpace();
    return Status::ResourceExhausted(
        TooLargeMessage(file_bytes, blocks, bytes, unit, limit, limit < configured));
  }
  bool bytes_over = totals.allocated + reserve_bytes > limit;
  bool entries_over = spec.max_entries != 0 && totals.entries + reserve_blocks > spec.max_entries;
  if (bytes_over || entries_over) {
    const uint64_t victims = std::min<uint64_t>(
        uint64_t{options_->max_unlinks_per_store} * std::max<uint64_t>(blocks, 1), UINT32_MAX);
    EvictRequest req =
        MakeRequest(spec, reserve_bytes, reserve_blocks, static_cast<uint32_t>(victims));
    EvictHook hook;
    if (*kill_hook_) {
      hook = [this] { (*kill_hook_)(DiskKillPoint::kMidEviction); };
    }
    KVTIER_ASSIGN_OR_RETURN(
        EvictOutcome out,
        EvictRows(
            index_, req, [this](const BlockKey& k) { return UnlinkBlock(k); }, hook));
    Account(out);
  }
  return reservation;
}

Result<EvictOutcome> Capacity::MakeRoom(uint64_t bytes) {
  InvalidateFreeSpace();
  const uint64_t unit = alloc_unit();
  KVTIER_ASSIGN_OR_RETURN(IndexTotals totals, index_->Totals(unit));
  LimitSpec spec = Spec();
  const uint64_t need = AllocatedEstimate(bytes, unit);
  // Free space moves fast on a small disk shared by writers (their batches
  // come and go): call it full below an eighth of what the cache could use.
  const uint64_t slack = std::max<uint64_t>(
      kNotFullSlackBytes,
      spec.free_bytes == UINT64_MAX ? 0 : (totals.allocated + spec.free_bytes) / 8);
  if (spec.free_bytes != UINT64_MAX && spec.free_bytes / 2 >= need + slack) {
    // The file system says there is room: this refusal is not one that
    // evicting blocks could cure (a quota, no inodes left, a fault).
    return Status::FailedPrecondition("the disk is not full (" + std::to_string(spec.free_bytes) +
                                      " bytes free): nothing to evict for");
  }
  // The disk refused the write although the accounting let it in (blocks
  // other processes have in flight, data that is not ours, index growth):
  // free this block's room below what the index holds now, and at least
  // what the limit asks for.
  const uint64_t limit = EffectiveLimitBytes(spec, totals.allocated);
  const uint64_t target =
      std::min(limit, totals.allocated > need ? totals.allocated - need : uint64_t{0});
  spec.max_bytes = std::max<uint64_t>(target, 1);  // 0 would mean no limit
  EvictRequest req = MakeRequest(spec, 0, 0, options_->max_unlinks_per_store);
  EvictHook hook;
  if (*kill_hook_) hook = [this] { (*kill_hook_)(DiskKillPoint::kMidEviction); };
  KVTIER_ASSIGN_OR_RETURN(
      EvictOutcome out,
      EvictRows(
          index_, req, [this](const BlockKey& k) { return UnlinkBlock(k); }, hook));
  Account(out);
  InvalidateFreeSpace();
  return out;
}

Result<EvictOutcome> Capacity::EnforceLimit() {
  // The indexed blocks only (see the header): a writer's block between its
  // row's commit and the end of its reservation would count twice.
  EvictRequest req = MakeRequest(Spec(), /*reserve_bytes=*/0, /*reserve_blocks=*/0,
                                 /*max_victims=*/0);
  KVTIER_ASSIGN_OR_RETURN(EvictOutcome out, EvictRows(index_, req, [this](const BlockKey& k) {
                            return UnlinkBlock(k);
                          }));
  Account(out);
  return out;
}

}  // namespace kvtier::disk
