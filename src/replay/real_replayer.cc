// OpenSSL 3 marks the one-shot SHA256() deprecated along with the low-level
// API; core/block_key.cc uses the same functions for the same reason.
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "replay/real_replayer.h"

#include <openssl/sha.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <span>
#include <utility>

#include "synth/block_generator.h"

namespace kvtier::replay {
namespace {

constexpr char kKeyDomain[] = "kvtier-replay-v1";  // hashed with its '\0'
constexpr char kReplayModel[] = "kvtier-replay";
// Load destinations per batch, in bytes (at least one block).
constexpr uint64_t kLoadBatchBytes = uint64_t{256} << 20;

// The counter of the tier that served a hit (REQUIRES: tier != kNone).
uint64_t& CountTier(CacheTier tier, uint64_t* host, uint64_t* disk, uint64_t* remote) {
  switch (tier) {
    case CacheTier::kHost:
      return *host;
    case CacheTier::kDisk:
      return *disk;
    case CacheTier::kRemote:
    case CacheTier::kNone:
      break;
  }
  return *remote;
}

}  // namespace

Status RealReplayOptions::Validate() const {
  if (ram_blocks == 0) return Status::InvalidArgument("RealReplayOptions.ram_blocks must be > 0");
  if (ram_blocks > kMaxReplayBlocks || disk_blocks > kMaxReplayBlocks) {
    return Status::InvalidArgument(std::string("RealReplayOptions.") +
                                   (ram_blocks > kMaxReplayBlocks ? "ram_blocks" : "disk_blocks") +
                                   " must be <= " + std::to_string(kMaxReplayBlocks));
  }
  if (disk_blocks > 0 && disk_dir.empty()) {
    return Status::InvalidArgument("RealReplayOptions.disk_dir is required with disk_blocks > 0");
  }
  if (disk_blocks == 0 && !disk_dir.empty()) {
    return Status::InvalidArgument("RealReplayOptions.disk_blocks must be > 0 with a disk_dir");
  }
  Status s = layout.Validate();
  if (!s.ok()) return s.WithContext("RealReplayOptions.layout");
  if (remote.has_value()) {
    RemoteTierOptions r = *remote;
    r.layout = layout;
    s = r.Validate();
    if (!s.ok()) return s.WithContext("RealReplayOptions.remote");
  }
  return Status::Ok();
}

double RealReplayStats::LoadGBps() const {
  return load_seconds > 0 ? static_cast<double>(prefix_bytes_loaded) / load_seconds / 1e9 : 0.0;
}

BlockKey ReplayBlockKey(const BlockKey& ns, uint64_t id) {
  uint8_t msg[sizeof(kKeyDomain) + 32 + 8];
  std::memcpy(msg, kKeyDomain, sizeof(kKeyDomain));
  std::memcpy(msg + sizeof(kKeyDomain), ns.bytes.data(), 32);
  for (int i = 0; i < 8; ++i)
    msg[sizeof(kKeyDomain) + 32 + i] = static_cast<uint8_t>(id >> (8 * i));
  BlockKey key;
  SHA256(msg, sizeof(msg), key.bytes.data());
  return key;
}

Result<std::unique_ptr<RealReplayer>> RealReplayer::Create(Env* env, RealReplayOptions options) {
  KVTIER_RETURN_IF_ERROR(options.Validate());
  NamespaceOptions nso;
  nso.model_id = kReplayModel;
  nso.layout_signature = options.layout.Signature();
  nso.block_tokens = options.layout.block_tokens;
  KVTIER_ASSIGN_OR_RETURN(KeyChain chain, KeyChain::Create(nso));
  const BlockKey ns = chain.ns();

  // Every block file the replay writes has the same size (fixed-width
  // header fields but created_at, which is one value per replay): measure
  // one. A block another process wrote may carry a longer created_at: the
  // load buffers take the longest, INT64_MIN's.
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer probe, MakeBlockFile(options.layout, ReplayBlockKey(ns, 0),
                                                           ns, ns, options.created_at));
  const uint64_t file_bytes = probe.size();
  KVTIER_ASSIGN_OR_RETURN(BlockBuffer widest,
                          MakeBlockFile(options.layout, ReplayBlockKey(ns, 0), ns, ns,
                                        std::numeric_limits<int64_t>::min()));
  const uint64_t buffer_bytes = std::max(file_bytes, widest.size());

  if (!options.disk_dir.empty()) {
    Result<FileInfo> info = env->Stat(options.disk_dir);
    if (info.ok()) {
      if (info->type != FileType::kDirectory) {
        return Status::InvalidArgument("--disk-dir " + options.disk_dir + " is not a folder");
      }
      KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> names, env->ListDir(options.disk_dir));
      if (!names.empty()) {
        return Status::InvalidArgument("--disk-dir " + options.disk_dir +
                                       " is not empty (a replay needs a fresh folder: blocks of "
                                       "an earlier run would count as hits)");
      }
    } else if (!info.status().IsNotFound()) {
      return info.status().WithContext("--disk-dir");
    }
  }

  if (options.ram_blocks > UINT64_MAX / file_bytes) {
    return Status::InvalidArgument(
        "RealReplayOptions.ram_blocks: " + std::to_string(options.ram_blocks) + " blocks of " +
        std::to_string(file_bytes) + " bytes overflow 64 bits");
  }
  CacheOptions co;
  co.layout_signature = nso.layout_signature;
  co.host.capacity_bytes = options.ram_blocks * file_bytes;
  co.host.eviction_policy = options.policy;
  co.load_threads = options.load_threads;
  co.index_expected_blocks = options.ram_blocks + options.disk_blocks;
  co.info_log = options.info_log;
  if (options.disk_blocks > 0) {
    DiskTierOptions d;
    d.dir = options.disk_dir;
    d.max_entries = options.disk_blocks;
    d.max_bytes = 0;  // the entry count bounds it (free disk still does)
    co.disk = d;
  }
  if (options.remote.has_value()) {
    co.remote = *options.remote;
    co.remote->layout = options.layout;
  }
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredCache> cache, TieredCache::Open(co, env));
  return std::unique_ptr<RealReplayer>(
      new RealReplayer(env, std::move(options), ns, file_bytes, buffer_bytes, std::move(cache)));
}

RealReplayer::RealReplayer(Env* env, RealReplayOptions options, BlockKey ns,
                           uint64_t block_file_bytes, uint64_t buffer_bytes,
                           std::unique_ptr<TieredCache> cache)
    : env_(env),
      options_(std::move(options)),
      ns_(ns),
      buffer_bytes_(buffer_bytes),
      cache_(std::move(cache)) {
  stats_.block_file_bytes = block_file_bytes;
  batch_blocks_ = static_cast<size_t>(std::max<uint64_t>(1, kLoadBatchBytes / buffer_bytes));
}

RealReplayer::~RealReplayer() { (void)Finish(); }

Status RealReplayer::LoadRange(const TraceRequest& r, size_t begin, size_t end, Phase phase,
                               bool* in_prefix, std::vector<size_t>* misses) {
  for (size_t b = begin; b < end; b += batch_blocks_) {
    KVTIER_RETURN_IF_ERROR(
        LoadBatch(r, b, std::min(end, b + batch_blocks_), phase, in_prefix, misses));
  }
  return Status::Ok();
}

Status RealReplayer::LoadBatch(const TraceRequest& r, size_t begin, size_t end, Phase phase,
                               bool* in_prefix, std::vector<size_t>* misses) {
  const size_t n = end - begin;
  while (buffers_.size() < n) {
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer b, BlockBuffer::Allocate(buffer_bytes_));
    buffers_.push_back(std::move(b));
  }
  std::vector<std::span<std::byte>> dsts;
  dsts.reserve(n);
  for (size_t i = 0; i < n; ++i) dsts.emplace_back(buffers_[i].data(), buffers_[i].size());

  const uint64_t t0 = env_->NowMicros();
  KVTIER_ASSIGN_OR_RETURN(LoadFuture future,
                          cache_->Load(std::span<const BlockKey>(keys_).subspan(begin, n), dsts));
  KVTIER_ASSIGN_OR_RETURN(std::vector<LoadedBlock> loaded, future.Get());
  const uint64_t t1 = env_->NowMicros();
  const bool timed = phase == Phase::kPrefix;
  if (timed) stats_.load_seconds += static_cast<double>(t1 - t0) / 1e6;

  ReplayCounts& c = stats_.counts;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = begin + i;
    const LoadedBlock& lb = loaded[i];
    if (lb.tier == CacheTier::kNone) {
      *in_prefix = false;
      ++c.inserts;
      misses->push_back(index);
      continue;
    }
    stats_.bytes_loaded += lb.bytes;
    if (timed) stats_.prefix_bytes_loaded += lb.bytes;
    CountTier(lb.tier, &c.ram_hits, &c.disk_hits, &c.remote_hits) += 1;
    Status check = CheckBlockFile(std::span<const std::byte>(buffers_[i].data(), lb.bytes),
                                  options_.layout, keys_[index]);
    if (!check.ok()) {
      // Never usable: it ends the prefix, and the engine would recompute
      // and store it again.
      ++stats_.wrong;
      *in_prefix = false;
      misses->push_back(index);
      continue;
    }
    ++stats_.verified;
    if (*in_prefix) {
      const uint64_t tokens = BlockHitTokens(r, index);
      c.hit_tokens += tokens;
      CountTier(lb.tier, &c.hit_tokens_ram, &c.hit_tokens_disk, &c.hit_tokens_remote) += tokens;
    }
  }
  return Status::Ok();
}

Status RealReplayer::Replay(const TraceRequest& r) {
  if (finished_) return Status::FailedPrecondition("RealReplayer::Replay after Finish");
  ReplayCounts& c = stats_.counts;
  ++c.requests;
  c.input_tokens += r.input_length;
  c.blocks += r.hash_ids.size();
  keys_.clear();
  for (uint64_t id : r.hash_ids) keys_.push_back(ReplayBlockKey(ns_, id));

  const MatchResult match = cache_->Match(keys_);
  bool in_prefix = true;
  std::vector<size_t> misses;
  KVTIER_RETURN_IF_ERROR(LoadRange(r, 0, match.blocks, Phase::kPrefix, &in_prefix, &misses));
  KVTIER_RETURN_IF_ERROR(StoreBlocks(misses));  // stale disk hints, wrong blocks
  // The rest one block at a time, as §6 orders it: a store may evict a
  // later block of the same request before its turn.
  in_prefix = false;
  for (size_t i = match.blocks; i < keys_.size(); ++i) {
    misses.clear();
    KVTIER_RETURN_IF_ERROR(LoadRange(r, i, i + 1, Phase::kRest, &in_prefix, &misses));
    KVTIER_RETURN_IF_ERROR(StoreBlocks(misses));
  }
  return Status::Ok();
}

Status RealReplayer::StoreBlocks(const std::vector<size_t>& positions) {
  if (positions.empty()) return Status::Ok();
  std::vector<BlockKey> store_keys;
  std::vector<SharedBlock> blocks;
  store_keys.reserve(positions.size());
  blocks.reserve(positions.size());
  for (size_t index : positions) {
    const BlockKey& parent = index == 0 ? ns_ : keys_[index - 1];
    KVTIER_ASSIGN_OR_RETURN(BlockBuffer file, MakeBlockFile(options_.layout, keys_[index], parent,
                                                            ns_, options_.created_at));
    stats_.bytes_stored += file.size();
    store_keys.push_back(keys_[index]);
    blocks.push_back(std::make_shared<const BlockBuffer>(std::move(file)));
  }
  return cache_->Store(store_keys, blocks);
}

void RealReplayer::CollectCacheStats() {
  const CacheStats s = cache_->Stats();
  stats_.counts.ram_evictions = s.host.evictions;
  stats_.counts.ghost_hits = s.host_budget.ghost_hits;
  stats_.counts.disk_evictions = s.disk.has_value() ? s.disk->evictions : 0;
  stats_.bytes_to_disk = s.bytes_written_back + s.bytes_written_through;
  stats_.bytes_from_disk = s.bytes_loaded_disk;
  stats_.bytes_from_remote = s.bytes_loaded_remote;
}

Status RealReplayer::Finish() {
  if (finished_) return Status::Ok();
  finished_ = true;
  // Counters first: Close() writes the dirty entries still in RAM down,
  // which is shutdown work, not replay traffic.
  CollectCacheStats();
  Status s = cache_->Close();
  // After Close: it drains the remote write queue, and what it dropped
  // then is part of what the next replay will miss.
  if (options_.remote.has_value()) stats_.remote = cache_->Stats().remote;
  return s;
}

}  // namespace kvtier::replay
