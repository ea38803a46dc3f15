#include "cache/cache_core.h"

#include <algorithm>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/mutex.h"

namespace kvtier::cache_internal {
namespace {

constexpr TierMask kHostBit = TierBit(IndexTier::kHost);

// The Match index is sized up front for at most this many keys (~80 MB of
// slots) and grows past it on demand: a huge index_expected_blocks (Validate
// allows 2^32) must not commit memory for keys the cache never sees.
constexpr uint64_t kMaxReservedIndexKeys = uint64_t{1} << 20;

BlockIndex::Options IndexOptions(const CacheOptions& o) {
  BlockIndex::Options io;
  io.expected_keys = static_cast<size_t>(std::min(o.index_expected_blocks, kMaxReservedIndexKeys));
  return io;
}

// The kernel's MemAvailable (/proc/meminfo, read through `env`) in bytes;
// nullopt where there is none to read (not Linux, a test Env without it).
std::optional<uint64_t> MemAvailableBytes(Env* env) {
  Result<std::unique_ptr<RandomAccessFile>> f = env->OpenForRead("/proc/meminfo", {});
  if (!f.ok()) return std::nullopt;
  std::string text(16 << 10, '\0');  // /proc files say size 0: read what comes
  Result<size_t> n = (*f)->ReadAt(0, std::as_writable_bytes(std::span(text)));
  if (!n.ok()) return std::nullopt;
  text.resize(*n);
  constexpr std::string_view kName = "MemAvailable:";
  const size_t at = text.find(kName);
  if (at == std::string::npos) return std::nullopt;
  size_t i = text.find_first_not_of(' ', at + kName.size());
  uint64_t kib = 0;
  size_t digits = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9' && digits < 16; ++i, ++digits) {
    kib = kib * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (digits == 0 || text.compare(i, 3, " kB") != 0) return std::nullopt;
  return kib * 1024;
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
  std::unique_ptr<CacheCore> core;
  try {
    core.reset(new CacheCore(std::move(options), env));  // sizes the Match index
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("TieredCache::Open: out of memory sizing the Match index");
  }
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
    if (d.info_log == nullptr) d.info_log = options_.info_log;
    d.layout_signature = options_.layout_signature;
    // A block the disk tier accepted but could not write (full disk) is not
    // on disk: the hint WriteBack or StoreOne left must not make Match claim
    // it (issue 31).
    d.write_failure_listener = [this](const BlockKey& key) { NoteDiskMiss(key); };
    KVTIER_ASSIGN_OR_RETURN(disk_, DiskTier::Open(d, env_));
  }
  if (options_.remote.has_value()) {
    RemoteTierOptions r = *options_.remote;
    if (r.info_log == nullptr) r.info_log = options_.info_log;
    Result<std::unique_ptr<RemoteTier>> remote = RemoteTier::Open(r, env_);
    if (!remote.ok()) return remote.status().WithContext("TieredCache::Open: remote tier");
    remote_ = std::move(remote).value();
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

namespace {
// Keys per disk probe of Match, batch after batch (then the last size).
constexpr size_t kDiskProbeBatches[] = {8, 32, 256};
}  // namespace

MatchResult CacheCore::Match(std::span<const BlockKey> chain) {
  MatchResult r;
  size_t disk_batches = 0;
  GateScope gate(gate_);
  if (!gate.entered()) return r;
  r.tiers.reserve(chain.size());
  const bool ask_disk = disk_ != nullptr && options_.match_asks_disk;
  // Whether the local tiers hold `key` (learning disk blocks as it asks).
  auto local = [&](const BlockKey& key) -> CacheTier {
    TierMask m = index_.Lookup(key);
    if (m == 0) {
      if (!ask_disk) return CacheTier::kNone;
      CacheCounters::Add(counters_.match_disk_probes);
      if (!disk_->Contains(key)) return CacheTier::kNone;
      index_.MarkPresent(key, IndexTier::kDisk);
    }
    return (m & kHostBit) != 0 ? CacheTier::kHost : CacheTier::kDisk;
  };
  auto add = [&r](CacheTier tier) {
    r.tiers.push_back(tier);
    if (tier == CacheTier::kHost) ++r.host_blocks;
    if (tier == CacheTier::kDisk) ++r.disk_blocks;
    if (tier == CacheTier::kRemote) ++r.remote_blocks;
  };
  size_t k = 0;
  while (k < chain.size()) {
    TierMask m = index_.Lookup(chain[k]);
    if (m != 0) {
      add((m & kHostBit) != 0 ? CacheTier::kHost : CacheTier::kDisk);
      ++k;
      continue;
    }
    if (!ask_disk) break;
    // Keys the index does not know are asked of the disk tier in batches
    // of 8, 32, then 256 (one index query each, not one per key: after a
    // restart the whole prefix is asked), learning the blocks it holds.
    const size_t size_at = std::min(disk_batches++, std::size(kDiskProbeBatches) - 1);
    std::span<const BlockKey> ask =
        chain.subspan(k, std::min(chain.size() - k, kDiskProbeBatches[size_at]));
    CacheCounters::Add(counters_.match_disk_probes, ask.size());
    const std::vector<bool> on_disk = disk_->ContainsMany(ask);
    size_t j = 0;
    for (; j < ask.size(); ++j) {
      // A key past the first that the index knows (a host entry) counts
      // as the index says.
      const TierMask known = j == 0 ? 0 : index_.Lookup(ask[j]);
      if (known != 0) {
        add((known & kHostBit) != 0 ? CacheTier::kHost : CacheTier::kDisk);
        continue;
      }
      if (!on_disk[j]) break;
      index_.MarkPresent(ask[j], IndexTier::kDisk);
      add(CacheTier::kDisk);
    }
    k += j;
    if (j < ask.size()) break;
  }
  if (k < chain.size() && remote_ != nullptr && options_.match_asks_remote) {
    // One Exists call for the rest of the chain (one round trip per node),
    // leaving out the keys the index knows are local. Keys on disk that the
    // index does not know yet are asked too: probing the disk for all of
    // them first would cost more than their place in the pipeline.
    std::vector<size_t> ask;
    std::vector<BlockKey> ask_keys;
    for (size_t j = k; j < chain.size(); ++j) {
      if (j == k || index_.Lookup(chain[j]) == 0) {
        ask.push_back(j);
        ask_keys.push_back(chain[j]);
      }
    }
    CacheCounters::Add(counters_.match_remote_probes, ask_keys.size());
    std::vector<bool> found = remote_->Exists(ask_keys);
    size_t a = 0;  // next position in `ask`
    for (size_t j = k; j < chain.size(); ++j) {
      const bool asked = a < ask.size() && ask[a] == j;
      const bool in_remote = asked && a < found.size() && found[a];
      if (asked) ++a;
      if (in_remote) {
        CacheCounters::Add(counters_.match_remote_found);
        add(CacheTier::kRemote);
        continue;
      }
      // Not in the remote tier (or not asked): a local tier, or the end.
      CacheTier tier = j == k ? CacheTier::kNone : local(chain[j]);
      if (tier == CacheTier::kNone) break;
      add(tier);
    }
  }
  r.blocks = r.tiers.size();
  CacheCounters::Add(counters_.matches);
  CacheCounters::Add(counters_.match_blocks, r.blocks);
  return r;
}

void CacheCore::HintDiskKeys(std::span<const BlockKey> keys) {
  GateScope gate(gate_);
  if (!gate.entered() || disk_ == nullptr) return;
  for (const BlockKey& key : keys) index_.MarkPresent(key, IndexTier::kDisk);
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
  Status verdict;
  if (options_.verify_store_checksums) {
    opts.verify_checksum = true;
    verdict = store_verifier_.Verify(bytes, opts);
  } else {
    verdict = store_verifier_.DecodeHeader(bytes.first(static_cast<size_t>(*need)), bytes.size(), opts)
                  .status();
  }
  if (!verdict.ok()) return Status::InvalidArgument("bad block file: " + verdict.message());
  return Status::Ok();
}

Status CacheCore::StoreOnDisk(const BlockKey& key, const SharedBlock& block) {
  // The hint goes in before the disk tier has the block: a writer thread
  // that fails the write at once drops it (write_failure_listener), and
  // must not find it set only afterwards. A refused store drops a hint it
  // set itself.
  const bool hinted = (index_.Lookup(key) & TierBit(IndexTier::kDisk)) != 0;
  index_.MarkPresent(key, IndexTier::kDisk);
  Status s = disk_->Store(key, block);
  if (!s.ok() && !hinted) index_.MarkAbsent(key, IndexTier::kDisk);
  return s;
}

Status CacheCore::WriteBack(const BlockKey& key, const SharedBlock& block) {
  Status s = StoreOnDisk(key, block);
  if (!s.ok()) {
    CacheCounters::Add(counters_.write_back_errors);
    return s;
  }
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
    KVTIER_RETURN_IF_ERROR(StoreOnDisk(key, block));
    CacheCounters::Add(counters_.bytes_written_through, block->size());
    return Status::Ok();
  }
  KVTIER_RETURN_IF_ERROR(StoreOnDisk(key, block));
  CacheCounters::Add(counters_.bytes_written_through, block->size());
  // The disk tier has it (queued and readable): a host copy is a bonus, and
  // a refusal (budget held by reservations) is counted by the host tier.
  (void)host_->Put(key, block, HostEntryState::kClean);
  return Status::Ok();
}

void CacheCore::PutRemote(const BlockKey& key, const SharedBlock& block) {
  if (remote_ == nullptr || options_.remote_write != RemoteWritePolicy::kEveryStore) return;
  // Never waits: a full queue or a node that is down drops this copy (the
  // local tiers hold the block); RemoteTier::Stats says why.
  if (remote_->Put(key, block).ok()) {
    CacheCounters::Add(counters_.remote_puts_queued);
  } else {
    CacheCounters::Add(counters_.remote_puts_dropped);
  }
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
    PutRemote(keys[i], blocks[i]);
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
  Status result;
  if (disk_ != nullptr) {
    uint64_t left = 0;
    Status first = WriteBackDirty(UINT64_MAX, &left);
    Status flushed = disk_->Flush();
    result = first.ok() ? flushed : first;
  }
  // Copies the remote tier drops on the way are counted there, not errors
  // of the cache (the local tiers hold the blocks).
  if (remote_ != nullptr) (void)remote_->Flush();
  return result;
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
    if (remote_ != nullptr) (void)remote_->Close();
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
  if (remote_ != nullptr) {
    // Drains the queue within RemoteTierOptions::close_timeout_ms; what is
    // left is dropped and counted there, not an error of the cache.
    (void)remote_->Close();
    final_stats.remote = remote_->Stats();
  }
  counters_.CopyTo(&final_stats);
  CopyBufferStats(&final_stats);
  final_stats.index_keys = index_.KeyCount();
  final_stats.index_host_keys = index_.KeyCount(IndexTier::kHost);
  final_stats.index_disk_keys = index_.KeyCount(IndexTier::kDisk);
  final_stats.index_bytes = index_.MemoryBytes();
  MutexLock lock(&final_mu_);
  final_stats_ = std::move(final_stats);
  return result;
}

// ---- Read buffers ----

Result<uint64_t> CacheCore::PrefaultReadBuffers(const ModelLayout& layout, uint64_t count) {
  GateScope gate(gate_);
  if (!gate.entered()) {
    return Status::FailedPrecondition("TieredCache::PrefaultReadBuffers: the cache is closed");
  }
  KVTIER_RETURN_IF_ERROR(layout.Validate().WithContext("TieredCache::PrefaultReadBuffers"));
  if (layout.Signature() != options_.layout_signature) {
    return Status::InvalidArgument(
        "TieredCache::PrefaultReadBuffers: the layout's signature is not the cache's");
  }
  // The size of this layout's block file as EncodeBlock writes it, with the
  // widest numbers its header can hold (other writers' headers differ by a
  // few bytes, which the pool's fit rule absorbs).
  std::vector<std::vector<std::byte>> tensors;
  std::vector<std::span<const std::byte>> views;
  for (const LayerSpec& l : layout.layers) {
    for (const TensorSpec& t : l.states) {
      tensors.emplace_back(static_cast<size_t>(t.ByteSize()));
      views.emplace_back(tensors.back());
    }
  }
  EncodeRequest req;
  req.layout = &layout;
  req.created_at = INT64_MIN;
  req.tensors = views;
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer sample, EncodeBlock(req));
  tensors.clear();
  // Refused up front, as `kvtier bench` refuses what RAM cannot hold:
  // faulting in more than the kernel has ends in its OOM killer, not in an
  // error. The pool keeps at most read_buffer_pool_bytes, so no more is
  // faulted in.
  const uint64_t wanted = count > UINT64_MAX / sample.size() ? UINT64_MAX : count * sample.size();
  const uint64_t needed = std::min(wanted, options_.read_buffer_pool_bytes);
  if (std::optional<uint64_t> available = MemAvailableBytes(env_);
      available.has_value() && needed > *available) {
    return Status::ResourceExhausted(
        "TieredCache::PrefaultReadBuffers: " + std::to_string(count) + " read buffers of " +
        std::to_string(sample.size()) + " bytes need " + std::to_string(needed) +
        " bytes of RAM; " + std::to_string(*available) + " are available (MemAvailable)");
  }
  Result<uint64_t> added = buffers_->Prefault(sample.size(), count);
  if (!added.ok()) return added.status().WithContext("TieredCache::PrefaultReadBuffers");
  return added;
}

// ---- Stats ----

void CacheCore::CopyBufferStats(CacheStats* s) const {
  if (buffers_ == nullptr) return;
  const BufferPoolStats b = buffers_->Stats();
  s->read_buffers = b.takes;
  s->read_buffers_reused = b.reused;
  s->read_buffer_fresh_bytes = b.fresh_bytes;
  s->read_buffer_free_bytes = b.free_bytes;
  s->read_buffers_prefaulted = b.prefaulted;
}

CacheStats CacheCore::LiveStats() {
  CacheStats s;
  s.host = host_->Stats();
  s.host_budget = budget_->Stats();
  if (disk_ != nullptr) s.disk = disk_->Stats();
  if (remote_ != nullptr) s.remote = remote_->Stats();
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
  MutexLock lock(&final_mu_);
  if (final_stats_.has_value()) return *final_stats_;
  // Close is still running: counters only.
  CacheStats s;
  counters_.CopyTo(&s);
  return s;
}

}  // namespace kvtier::cache_internal
