#include "cache/cache_core.h"

#include <algorithm>
#include <string>
#include <utility>

namespace kvtier::cache_internal {
namespace {

constexpr TierMask kHostBit = TierBit(IndexTier::kHost);

BlockIndex::Options IndexOptions(const CacheOptions& o) {
  BlockIndex::Options io;
  io.expected_keys = static_cast<size_t>(o.index_expected_blocks);
  return io;
}

std::string Position(size_t i, const BlockKey& key) {
  return "block " + std::to_string(i) + " (" + key.Hex().substr(0, 16) + "...)";
}

}  // namespace

CacheCore::CacheCore(CacheOptions options, Env* env)
    : options_(std::move(options)), env_(env), index_(IndexOptions(options_)) {}

CacheCore::~CacheCore() { (void)Close(); }

Result<std::unique_ptr<CacheCore>> CacheCore::Open(CacheOptions options, Env* env) {
  if (env == nullptr) return Status::InvalidArgument("TieredCache::Open: env is null");
  KVTIER_RETURN_IF_ERROR(options.Validate());
  std::unique_ptr<CacheCore> core(new CacheCore(std::move(options), env));
  KVTIER_RETURN_IF_ERROR(core->Init());
  return core;
}

Status CacheCore::Init() {
  budget_ = options_.host.shared_budget;
  if (budget_ == nullptr) {
    KVTIER_ASSIGN_OR_RETURN(budget_, SharedHostBudget::Create(options_.host.capacity_bytes,
                                                              options_.host.eviction_policy));
  }
  if (options_.disk.has_value()) {
    DiskTierOptions d = *options_.disk;
    d.layout_signature = options_.layout_signature;
    KVTIER_ASSIGN_OR_RETURN(disk_, DiskTier::Open(d, env_));
  }
  HostTierOptions h;
  h.shared_budget = budget_;
  if (disk_ != nullptr) {
    h.eviction_sink = [this](const BlockKey& key, SharedBlock block) {
      return WriteBack(key, block);
    };
  }
  h.key_listener = [this](const BlockKey& key, KeyPresence change) {
    if (change == KeyPresence::kAdded) {
      index_.Add(key, IndexTier::kHost);
    } else {
      index_.Remove(key, IndexTier::kHost);
    }
  };
  KVTIER_ASSIGN_OR_RETURN(host_, HostTier::Create(std::move(h)));
  if (options_.load_threads > 0) pool_ = std::make_unique<TaskPool>(env_, options_.load_threads);
  buffers_ = BufferPool::Create(options_.read_buffer_pool_bytes);
  return Status::Ok();
}

// ---- Match ----

MatchResult CacheCore::Match(std::span<const BlockKey> chain) {
  MatchResult r;
  GateScope gate(gate_);
  if (!gate.entered()) return r;
  r.tiers.reserve(chain.size());
  const bool ask_disk = disk_ != nullptr && options_.match_asks_disk;
  for (const BlockKey& key : chain) {
    TierMask m = index_.Lookup(key);
    if (m == 0) {
      if (!ask_disk) break;
      CacheCounters::Add(counters_.match_disk_probes);
      if (!disk_->Contains(key)) break;
      index_.MarkPresent(key, IndexTier::kDisk);
    }
    if ((m & kHostBit) != 0) {
      r.tiers.push_back(CacheTier::kHost);
      ++r.host_blocks;
    } else {
      r.tiers.push_back(CacheTier::kDisk);
      ++r.disk_blocks;
    }
  }
  r.blocks = r.tiers.size();
  CacheCounters::Add(counters_.matches);
  CacheCounters::Add(counters_.match_blocks, r.blocks);
  return r;
}

// ---- Store ----

Status CacheCore::CheckHeader(const BlockKey& key, const BlockBuffer& block) const {
  constexpr size_t kLengthBytes = 8;
  std::span<const std::byte> bytes = block.span();
  if (bytes.size() < kLengthBytes) {
    return Status::InvalidArgument("block of " + std::to_string(bytes.size()) +
                                   " bytes is shorter than a block file header");
  }
  Result<uint64_t> need = BlockHeaderPrefixBytes(bytes.first(kLengthBytes), bytes.size());
  if (!need.ok()) return Status::InvalidArgument("not a block file: " + need.status().message());
  DecodeOptions opts;
  opts.expected_key = &key;
  opts.expected_signature = &options_.layout_signature;
  Result<DecodedBlock> decoded =
      DecodeBlockHeader(bytes.first(static_cast<size_t>(*need)), bytes.size(), opts);
  if (!decoded.ok()) {
    return Status::InvalidArgument("bad block file: " + decoded.status().message());
  }
  return Status::Ok();
}

Status CacheCore::WriteBack(const BlockKey& key, const SharedBlock& block) {
  Status s = disk_->Store(key, block);
  if (!s.ok()) {
    CacheCounters::Add(counters_.write_back_errors);
    return s;
  }
  index_.MarkPresent(key, IndexTier::kDisk);
  CacheCounters::Add(counters_.write_backs);
  CacheCounters::Add(counters_.bytes_written_back, block->size());
  return s;
}

Status CacheCore::StoreOne(const BlockKey& key, const SharedBlock& block, WritePolicy policy) {
  if (block == nullptr || block->size() == 0) return Status::InvalidArgument("block is empty");
  if (options_.verify_stores) KVTIER_RETURN_IF_ERROR(CheckHeader(key, *block));
  if (policy == WritePolicy::kWriteBack) {
    Status s = host_->Put(key, block, HostEntryState::kDirty);
    if (s.ok() || disk_ == nullptr || !s.IsResourceExhausted()) return s;
    // The budget cannot hold it (too large, or reservations hold the room):
    // the disk tier still can.
    CacheCounters::Add(counters_.store_bypasses);
    KVTIER_RETURN_IF_ERROR(disk_->Store(key, block));
    index_.MarkPresent(key, IndexTier::kDisk);
    CacheCounters::Add(counters_.bytes_written_through, block->size());
    return Status::Ok();
  }
  KVTIER_RETURN_IF_ERROR(disk_->Store(key, block));
  index_.MarkPresent(key, IndexTier::kDisk);
  CacheCounters::Add(counters_.bytes_written_through, block->size());
  // The disk tier has it (queued and readable): a host copy is a bonus, and
  // a refusal (budget held by reservations) is counted by the host tier.
  (void)host_->Put(key, block, HostEntryState::kClean);
  return Status::Ok();
}

Status CacheCore::Store(std::span<const BlockKey> keys, std::span<const SharedBlock> blocks,
                        const StoreOptions& options) {
  if (keys.size() != blocks.size()) {
    return Status::InvalidArgument("TieredCache::Store: " + std::to_string(keys.size()) +
                                   " keys but " + std::to_string(blocks.size()) + " blocks");
  }
  GateScope gate(gate_);
  if (!gate.entered()) return Status::FailedPrecondition("TieredCache::Store: the cache is closed");
  const WritePolicy policy = options.write_policy.value_or(options_.write_policy);
  if (policy != WritePolicy::kWriteBack && policy != WritePolicy::kWriteThrough) {
    return Status::InvalidArgument(
        "TieredCache::Store: StoreOptions.write_policy is not a known WritePolicy value");
  }
  if (policy == WritePolicy::kWriteThrough && disk_ == nullptr) {
    return Status::InvalidArgument(
        "TieredCache::Store: kWriteThrough needs a disk tier (this cache is host-only)");
  }
  const uint64_t t0 = env_->NowMicros();
  Status result;
  for (size_t i = 0; i < keys.size(); ++i) {
    Status s = StoreOne(keys[i], blocks[i], policy);
    if (!s.ok()) {
      CacheCounters::Add(counters_.store_errors);
      result = s.WithContext("TieredCache::Store: " + Position(i, keys[i]));
      break;
    }
    CacheCounters::Add(counters_.stores);
    CacheCounters::Add(counters_.bytes_stored, blocks[i]->size());
  }
  counters_.store_latency.Record(env_->NowMicros() - t0);
  return result;
}

// ---- Flush, ShrinkHost, Close ----

Status CacheCore::WriteBackDirty(uint64_t deadline_micros, uint64_t* left) {
  Status first;
  std::vector<HostTier::DirtyEntry> dirty = host_->DirtyEntries();
  size_t i = 0;
  for (; i < dirty.size(); ++i) {
    if (env_->NowMicros() > deadline_micros) break;
    Status s = WriteBack(dirty[i].key, dirty[i].block);
    if (s.ok()) {
      host_->MarkClean(dirty[i].key);
    } else if (first.ok()) {
      first = s.WithContext("TieredCache: writing back " + Position(i, dirty[i].key));
    }
  }
  *left = dirty.size() - i;
  return first;
}

Status CacheCore::Flush() {
  GateScope gate(gate_);
  if (!gate.entered()) return Status::FailedPrecondition("TieredCache::Flush: the cache is closed");
  if (disk_ == nullptr) return Status::Ok();
  uint64_t left = 0;
  Status first = WriteBackDirty(UINT64_MAX, &left);
  Status flushed = disk_->Flush();
  return first.ok() ? flushed : first;
}

uint64_t CacheCore::ShrinkHost(uint64_t target_bytes, std::span<const BlockKey> protected_keys) {
  GateScope gate(gate_);
  if (!gate.entered()) return 0;
  return host_->ShrinkTo(target_bytes, protected_keys);
}

Status CacheCore::Close() {
  std::call_once(close_once_, [this] { close_status_ = DoClose(); });
  return close_status_;
}

Status CacheCore::DoClose() {
  gate_.CloseAndWait();
  if (pool_ != nullptr) pool_->Shutdown();
  Status result;
  if (host_ == nullptr) {  // Open failed half way: nothing was stored
    if (disk_ != nullptr) result = disk_->Close();
    return result;
  }
  if (disk_ != nullptr) {
    const uint64_t deadline = options_.close_timeout_ms == 0
                                  ? UINT64_MAX
                                  : env_->NowMicros() + options_.close_timeout_ms * 1000;
    uint64_t left = 0;
    result = WriteBackDirty(deadline, &left);
    if (left > 0) {
      CacheCounters::Add(counters_.close_dropped, left);
      result = Status::Unavailable("TieredCache::Close: " + std::to_string(left) +
                                   " dirty blocks were not written within close_timeout_ms=" +
                                   std::to_string(options_.close_timeout_ms));
    }
  }
  CacheStats final_stats;
  final_stats.host = host_->Stats();
  // Dropping the tier releases its share of the budget and waits for sink
  // calls in flight (other caches' evictions of our entries).
  host_.reset();
  final_stats.host_budget = budget_->Stats();
  if (disk_ != nullptr) {
    Status closed = disk_->Close();
    if (result.ok()) result = closed;
    final_stats.disk = disk_->Stats();
  }
  counters_.CopyTo(&final_stats);
  CopyBufferStats(&final_stats);
  final_stats.index_keys = index_.KeyCount();
  final_stats.index_host_keys = index_.KeyCount(IndexTier::kHost);
  final_stats.index_disk_keys = index_.KeyCount(IndexTier::kDisk);
  final_stats.index_bytes = index_.MemoryBytes();
  std::lock_guard<std::mutex> lock(final_mu_);
  final_stats_ = std::move(final_stats);
  return result;
}

// ---- Stats ----

void CacheCore::CopyBufferStats(CacheStats* s) const {
  if (buffers_ == nullptr) return;
  const BufferPoolStats b = buffers_->Stats();
  s->read_buffers = b.takes;
  s->read_buffers_reused = b.reused;
  s->read_buffer_fresh_bytes = b.fresh_bytes;
  s->read_buffer_free_bytes = b.free_bytes;
}

CacheStats CacheCore::LiveStats() {
  CacheStats s;
  s.host = host_->Stats();
  s.host_budget = budget_->Stats();
  if (disk_ != nullptr) s.disk = disk_->Stats();
  counters_.CopyTo(&s);
  CopyBufferStats(&s);
  s.index_keys = index_.KeyCount();
  s.index_host_keys = index_.KeyCount(IndexTier::kHost);
  s.index_disk_keys = index_.KeyCount(IndexTier::kDisk);
  s.index_bytes = index_.MemoryBytes();
  return s;
}

CacheStats CacheCore::Stats() {
  {
    GateScope gate(gate_);
    if (gate.entered()) return LiveStats();
  }
  std::lock_guard<std::mutex> lock(final_mu_);
  if (final_stats_.has_value()) return *final_stats_;
  // Close is still running: counters only.
  CacheStats s;
  counters_.CopyTo(&s);
  return s;
}

}  // namespace kvtier::cache_internal
