#include "bench_pool_layers.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "bench_util.h"
#include "kvtier/env.h"
#include "kvtier/tiered_backing_store.h"
#include "raw_read.h"
#include "repeat_stats.h"

namespace kvtier::cli {
namespace {

TensorSpec Tensor(std::string role, DType dtype, std::vector<uint64_t> shape, int32_t token_dim) {
  return TensorSpec{std::move(role), dtype, std::move(shape), token_dim};
}

LayerSpec AttentionLayer(uint32_t t, uint32_t window) {
  LayerSpec l;
  l.cache_type = window == 0 ? "attention" : "sliding_window";
  l.states = {Tensor("keys", DType::kBF16, {2, t, 64}, 1),
              Tensor("values", DType::kBF16, {2, t, 64}, 1)};
  l.window = window;
  if (window != 0) l.meta_state = {"window=" + std::to_string(window)};
  return l;
}

// Forwards to the tiers and records what the pool asked for; `whole`: asks
// the tiers for whole blocks instead (the full-read baseline).
class RecordingStore final : public BlockBackingStore {
 public:
  RecordingStore(BlockBackingStore* inner, const ModelLayout& layout, bool whole)
      : inner_(inner), whole_(whole) {
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      for (const TensorSpec& s : layout.layers[l].states) {
        bytes_.push_back(s.ByteSize());
        layer_.push_back(layout.layers[l].IsRecurrent() ? static_cast<int64_t>(l) : -1);
      }
    }
  }
  size_t Match(std::span<const BlockKey> keys) override { return inner_->Match(keys); }
  Status Store(const BlockKey& key, SharedBlock block) override {
    return inner_->Store(key, std::move(block));
  }
  void Load(std::span<const BlockKey> keys, BlockArrivalCallback on_block) override {
    Tally(keys.size(), {});
    inner_->Load(keys, std::move(on_block));
  }
  void LoadTensors(std::span<const BlockKey> keys, std::span<const TensorMask> masks,
                   BlockArrivalCallback on_block) override {
    Tally(keys.size(), masks);
    if (whole_) {
      inner_->LoadTensors(keys, {}, std::move(on_block));
    } else {
      inner_->LoadTensors(keys, masks, std::move(on_block));
    }
  }

  uint64_t requested_bytes() const { return requested_bytes_; }
  // (block, recurrent layer) pairs with a state asked for.
  uint64_t recurrent_states() const { return recurrent_states_; }

 private:
  void Tally(size_t n, std::span<const TensorMask> masks) {
    for (size_t i = 0; i < n; ++i) {
      int64_t last = -1;  // one recurrent layer's states count once
      for (size_t k = 0; k < bytes_.size(); ++k) {
        if (!masks.empty() && !masks[i].empty() && !masks[i][k]) continue;
        requested_bytes_ += bytes_[k];
        if (layer_[k] >= 0 && layer_[k] != last) ++recurrent_states_;
        last = layer_[k];
      }
    }
  }

  BlockBackingStore* const inner_;
  const bool whole_;
  std::vector<uint64_t> bytes_;
  std::vector<int64_t> layer_;  // per tensor: its layer if recurrent, else -1
  // The pool calls LoadTensors from the Allocate's thread only.
  uint64_t requested_bytes_ = 0;
  uint64_t recurrent_states_ = 0;
};

// Whether a reader resuming after `blocks` blocks needs layer `l`'s states
// in block `b` (DESIGN.md §4), from the layout, independently of the
// pool's masks.
bool LayerNeeded(const ModelLayout& layout, size_t l, size_t b, size_t blocks) {
  const size_t t = layout.block_tokens, p = blocks * t;
  const LayerSpec& spec = layout.layers[l];
  if (spec.IsRecurrent()) return b + 1 == blocks;
  if (spec.window != 0) return p <= spec.window || (b + 1) * t > p - spec.window;
  return true;
}

// Tensor bytes a reader resuming after `prefix` tokens needs.
uint64_t NeededBytes(const ModelLayout& layout, size_t blocks) {
  uint64_t n = 0;
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t l = 0; l < layout.layers.size(); ++l) {
      if (!LayerNeeded(layout, l, b, blocks)) continue;
      for (const TensorSpec& s : layout.layers[l].states) n += s.ByteSize();
    }
  }
  return n;
}

// What a verifying reader of the needed tensors reads of each file (in
// block order): its header, then the needed tensors (neighbours merged);
// empty for a file needed whole. From each file's own header.
Result<std::vector<std::vector<BlockFileRange>>> NeededRanges(
    const LayerBenchSetup& s, const std::vector<std::string>& files) {
  std::vector<std::vector<BlockFileRange>> out;
  for (size_t b = 0; b < files.size(); ++b) {
    TensorMask mask;
    for (size_t l = 0; l < s.layout.layers.size(); ++l) {
      mask.insert(mask.end(), s.layout.layers[l].states.size(),
                  LayerNeeded(s.layout, l, b, files.size()));
    }
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> f,
                            s.env->OpenForRead(files[b], {}));
    const uint64_t size = f->size();
    std::vector<std::byte> head(std::min<uint64_t>(size, 8));
    KVTIER_ASSIGN_OR_RETURN(size_t n, f->ReadAt(0, head));
    KVTIER_ASSIGN_OR_RETURN(uint64_t prefix, BlockHeaderPrefixBytes(std::span(head).first(n), size));
    head.resize(prefix);
    KVTIER_ASSIGN_OR_RETURN(n, f->ReadAt(0, head));
    if (n != prefix) return Status::Internal("short header read of " + files[b]);
    KVTIER_ASSIGN_OR_RETURN(DecodedBlock header, DecodeBlockHeader(head, size, DecodeOptions{}));
    if (MaskSelectsAll(mask, header.tensors.size())) {
      out.emplace_back();
      continue;
    }
    KVTIER_ASSIGN_OR_RETURN(std::vector<BlockFileRange> ranges,
                            SelectedTensorRanges(header, mask));
    ranges.insert(ranges.begin(), BlockFileRange{0, prefix});
    out.push_back(std::move(ranges));
  }
  return out;
}

// Pattern bytes of a per-token state over the prefix, or of a recurrent
// state after block `b`.
void Pattern(std::vector<std::byte>& buf, uint64_t seed) {
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::byte>((i * 131 + seed) & 0xff);
}

// Writes the prefix into the cache through a pool and closes the cache.
Status Fill(const LayerBenchSetup& s) {
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredCache> cache, s.open_cache());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredBackingStore> tiers,
                          TieredBackingStore::Create(cache.get()));
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                            s.new_pool(tiers.get(), static_cast<uint32_t>(s.blocks + 2), false));
    KVTIER_ASSIGN_OR_RETURN(size_t m, pool->Allocate(1, s.prompt));
    if (m != 0) return Status::Internal("a fresh cache reused " + std::to_string(m) + " tokens");
    const size_t t = s.layout.block_tokens;
    for (uint32_t l = 0; l < s.layout.layers.size(); ++l) {
      const LayerSpec& spec = s.layout.layers[l];
      std::vector<std::vector<std::byte>> bufs;
      std::vector<std::span<const std::byte>> views;
      if (spec.IsRecurrent()) {
        for (size_t b = 1; b <= s.blocks; ++b) {
          bufs.clear();
          views.clear();
          for (const TensorSpec& ts : spec.states) {
            bufs.emplace_back(ts.ByteSize());
            Pattern(bufs.back(), b * 7 + l);
          }
          for (const auto& buf : bufs) views.emplace_back(buf);
          KVTIER_RETURN_IF_ERROR(pool->SetRecurrentState(1, l, b * t, views));
        }
        continue;
      }
      for (const TensorSpec& ts : spec.states) {
        bufs.emplace_back(ts.ByteSize() / t * s.prefix);
        Pattern(bufs.back(), l);
      }
      for (const auto& buf : bufs) views.emplace_back(buf);
      KVTIER_RETURN_IF_ERROR(pool->AppendLayer(1, l, 0, s.prefix, views));
    }
    KVTIER_RETURN_IF_ERROR(pool->Advance(1, std::span<const uint32_t>(s.prompt).first(s.prefix)));
  }
  tiers.reset();
  return cache->Close();
}

struct RunResult {
  double ms = 0;
  uint64_t requested = 0;       // what the pool asked the tiers for (RecordingStore)
  uint64_t pool_requested = 0;  // the pool's own load_tensor_bytes
  uint64_t recurrent_states = 0;
  uint64_t disk_read = 0;  // the disk tier's bytes_read
  uint64_t disk_hits = 0;
};

// One cold restore into a fresh pool; `whole`: asking for whole blocks.
Result<RunResult> Restore(const LayerBenchSetup& s, bool whole) {
  if (s.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredCache> cache, s.open_cache());
  KVTIER_ASSIGN_OR_RETURN(uint64_t prefaulted, cache->PrefaultReadBuffers(s.layout, s.blocks));
  if (prefaulted != s.blocks) return Status::Internal("read buffers not prefaulted");
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<TieredBackingStore> tiers,
                          TieredBackingStore::Create(cache.get()));
  RecordingStore store(tiers.get(), s.layout, whole);
  RunResult r;
  {
    KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> pool,
                            s.new_pool(&store, static_cast<uint32_t>(s.blocks + 2), true));
    const CacheStats before = cache->Stats();
    if (s.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    const uint64_t t0 = s.env->NowMicros();
    KVTIER_ASSIGN_OR_RETURN(size_t m, pool->Allocate(1, s.prompt));
    const uint64_t t1 = s.env->NowMicros();
    if (m != s.prefix) {
      return Status::Internal("the restore reused " + std::to_string(m) + " of " +
                              std::to_string(s.prefix) + " tokens");
    }
    r.ms = static_cast<double>(t1 - t0) / 1000.0;
    const CacheStats after = cache->Stats();
    r.disk_read = after.disk->bytes_read - before.disk->bytes_read;
    r.disk_hits = after.hits_disk - before.hits_disk;
    r.pool_requested = pool->GetStats().load_tensor_bytes;
    // The state it resumes from is block n's snapshot.
    for (uint32_t l = 0; l < s.layout.layers.size(); ++l) {
      if (!s.layout.layers[l].IsRecurrent()) continue;
      KVTIER_ASSIGN_OR_RETURN(auto view, pool->RecurrentState(1, l));
      std::vector<std::byte> want(view->states[0].data.size());
      Pattern(want, s.blocks * 7 + l);
      if (view->length != s.prefix ||
          std::memcmp(want.data(), view->states[0].data.data(), want.size()) != 0) {
        return Status::Internal("layer " + std::to_string(l) + ": wrong recurrent state restored");
      }
    }
  }
  r.requested = store.requested_bytes();
  r.recurrent_states = store.recurrent_states();
  tiers.reset();
  KVTIER_RETURN_IF_ERROR(cache->Close());
  return r;
}

}  // namespace

Result<ModelLayout> SyntheticLayout(std::string_view name, uint32_t block_tokens) {
  const uint32_t t = block_tokens == 0 ? 256 : block_tokens;
  ModelLayout m;
  m.block_tokens = t;
  if (name == "sliding") {
    m.name = "synthetic-sliding";
    for (uint32_t i = 0; i < 12; ++i) m.layers.push_back(AttentionLayer(t, i % 6 == 5 ? 0 : 1024));
  } else if (name == "hybrid") {
    m.name = "synthetic-hybrid";
    for (uint32_t i = 0; i < 12; ++i) {
      if (i % 4 == 3) {
        m.layers.push_back(AttentionLayer(t, 0));
        continue;
      }
      LayerSpec rec;
      rec.cache_type = "linear_attention";
      rec.states = {Tensor("state", DType::kF32, {4, 64, 64}, -1),
                    Tensor("conv", DType::kBF16, {3, 512}, -1)};
      m.layers.push_back(rec);
    }
  } else {
    return Status::InvalidArgument("--synthetic-layout must be sliding or hybrid, not '" +
                                   std::string(name) + "'");
  }
  KVTIER_RETURN_IF_ERROR(m.Validate());
  return m;
}

Status RunLayerBench(const LayerBenchSetup& s, nlohmann::json* out) {
  KVTIER_RETURN_IF_ERROR(Fill(s));
  KVTIER_ASSIGN_OR_RETURN(std::vector<std::string> files, s.block_files());
  KVTIER_ASSIGN_OR_RETURN(auto needed_ranges, NeededRanges(s, files));
  std::vector<double> part_ms, whole_ms, raw_part_ms, raw_whole_ms;
  // Cold only: the same reads with O_DIRECT at queue depth kRawReadThreads
  // (without a dropped page cache they would read other things than the
  // buffered loops). A repeat's limit is the faster loop of each pattern.
  std::vector<double> direct_part_ms, direct_whole_ms;
  RunResult part, whole;
  for (uint32_t r = 0; r < s.repeats; ++r) {
    if (s.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    KVTIER_ASSIGN_OR_RETURN(double raw, RawRead(s.env, files, needed_ranges, kRawReadThreads));
    raw_part_ms.push_back(raw * 1e3);
    if (s.drop_caches) KVTIER_RETURN_IF_ERROR(DropCaches());
    KVTIER_ASSIGN_OR_RETURN(raw, RawRead(s.env, files, {}, kRawReadThreads));
    raw_whole_ms.push_back(raw * 1e3);
    if (s.drop_caches) {
      KVTIER_RETURN_IF_ERROR(DropCaches());
      KVTIER_ASSIGN_OR_RETURN(
          raw, RawRead(s.env, files, needed_ranges, kRawReadThreads, RawReadMode::kDirect));
      direct_part_ms.push_back(raw * 1e3);
      KVTIER_RETURN_IF_ERROR(DropCaches());
      KVTIER_ASSIGN_OR_RETURN(raw,
                              RawRead(s.env, files, {}, kRawReadThreads, RawReadMode::kDirect));
      direct_whole_ms.push_back(raw * 1e3);
    }
    KVTIER_ASSIGN_OR_RETURN(part, Restore(s, false));
    part_ms.push_back(part.ms);
    KVTIER_ASSIGN_OR_RETURN(whole, Restore(s, true));
    whole_ms.push_back(whole.ms);
    if (part.disk_hits == 0 || whole.disk_hits != part.disk_hits) {
      return Status::Internal(
          "expected both restores from disk: " + std::to_string(part.disk_hits) + " and " +
          std::to_string(whole.disk_hits) + " disk hits");
    }
  }
  const uint64_t needed = NeededBytes(s.layout, s.blocks);
  const uint64_t full = s.blocks * s.layout.BlockBytes();
  const double pm = Median(part_ms), wm = Median(whole_ms);
  const double rpm = Median(raw_part_ms), rwm = Median(raw_whole_ms);
  uint64_t raw_part_bytes = 0;
  for (size_t b = 0; b < files.size(); ++b) {
    if (needed_ranges[b].empty()) {  // read whole
      KVTIER_ASSIGN_OR_RETURN(FileInfo info, s.env->Stat(files[b]));
      raw_part_bytes += info.size;
    }
    for (const BlockFileRange& r : needed_ranges[b]) raw_part_bytes += r.end - r.begin;
  }
  uint64_t recurrent_layers = 0;
  for (const LayerSpec& l : s.layout.layers) recurrent_layers += l.IsRecurrent() ? 1 : 0;
  auto& o = *out;
  o["layout"] = s.layout.name;
  o["block_tokens"] = s.layout.block_tokens;
  o["block_bytes"] = s.layout.BlockBytes();
  o["prefix_tokens"] = s.prefix;
  o["prefix_blocks"] = s.blocks;
  o["needed_bytes"] = needed;
  o["full_bytes"] = full;
  o["requested_bytes"] = part.requested;
  o["pool_load_tensor_bytes"] = part.pool_requested;
  o["disk_bytes_read"] = {{"needed", part.disk_read}, {"whole", whole.disk_read}};
  o["disk_hits"] = {{"needed", part.disk_hits}, {"whole", whole.disk_hits}};
  o["requested_vs_needed"] = static_cast<double>(part.requested) / static_cast<double>(needed);
  o["disk_read_vs_needed"] = static_cast<double>(part.disk_read) / static_cast<double>(needed);
  o["disk_read_vs_full"] = static_cast<double>(part.disk_read) / static_cast<double>(full);
  o["needed_vs_full"] = static_cast<double>(needed) / static_cast<double>(full);
  o["recurrent_layers"] = recurrent_layers;
  o["recurrent_states_requested"] = part.recurrent_states;
  o["restore_ms"] = {
      {"needed", pm}, {"whole", wm}, {"needed_runs", part_ms}, {"whole_runs", whole_ms}};
  o["time_vs_whole"] = pm / wm;
  o["raw_read"] = {{"threads", kRawReadThreads},
                   {"needed_bytes", raw_part_bytes},
                   {"needed_ms", rpm},
                   {"whole_ms", rwm},
                   {"needed_runs", raw_part_ms},
                   {"whole_runs", raw_whole_ms},
                   {"time_vs_whole", rpm / rwm}};
  o["restore_vs_raw"] = {{"needed", pm / rpm}, {"whole", wm / rwm}};
  o["time_target"] = 1.3 * static_cast<double>(needed) / static_cast<double>(full);
  // Per repeat, against the same repeat's whole-block restore and raw
  // reads (issue 32's targets): time <= 1.1 x (needed / full) of the
  // whole-block time; each restore >= 0.8 x the raw reads' speed.
  // The raw limits are the faster of the buffered and O_DIRECT loops where
  // both ran. `needed_read_vs_whole`: the fastest raw read of the needed
  // bytes alone against the same repeat's whole-block restore, a floor
  // under time_vs_whole that no restore of them goes below on this device.
  std::vector<double> vs_whole, needed_speed, whole_speed, floor_vs_whole;
  for (size_t r = 0; r < part_ms.size(); ++r) {
    const double lim_part =
        r < direct_part_ms.size() ? std::min(raw_part_ms[r], direct_part_ms[r]) : raw_part_ms[r];
    const double lim_whole = r < direct_whole_ms.size()
                                 ? std::min(raw_whole_ms[r], direct_whole_ms[r])
                                 : raw_whole_ms[r];
    vs_whole.push_back(part_ms[r] / whole_ms[r]);
    needed_speed.push_back(lim_part / part_ms[r]);
    whole_speed.push_back(lim_whole / whole_ms[r]);
    floor_vs_whole.push_back(lim_part / whole_ms[r]);
  }
  o["raw_read"]["direct_needed_runs"] = direct_part_ms;
  o["raw_read"]["direct_whole_runs"] = direct_whole_ms;
  if (!direct_part_ms.empty()) {
    o["raw_read"]["direct_needed_ms"] = Median(direct_part_ms);
    o["raw_read"]["direct_whole_ms"] = Median(direct_whole_ms);
  }
  o["needed_read_vs_whole"] = {{"median", Median(floor_vs_whole)}, {"runs", floor_vs_whole}};
  o["ratios"] = {
      {"time_vs_whole", RatioJson(vs_whole, Better::kLower,
                                  1.1 * static_cast<double>(needed) / static_cast<double>(full))},
      {"needed_vs_raw", RatioJson(needed_speed, Better::kHigher, 0.8)},
      {"whole_vs_raw", RatioJson(whole_speed, Better::kHigher, 0.8)}};
  o["drop_caches"] = s.drop_caches;
  o["repeats"] = s.repeats;
  return Status::Ok();
}

void PrintLayerBench(const nlohmann::json& o) {
  std::printf("layout %s: %llu-token prefix = %llu blocks of %llu bytes (cold from disk: %s)\n",
              o["layout"].get<std::string>().c_str(),
              static_cast<unsigned long long>(o["prefix_tokens"].get<uint64_t>()),
              static_cast<unsigned long long>(o["prefix_blocks"].get<uint64_t>()),
              static_cast<unsigned long long>(o["block_bytes"].get<uint64_t>()),
              o["drop_caches"].get<bool>() ? "page cache dropped" : "page cache may hit");
  std::printf("bytes: needed %llu  full %llu (needed = %.3f x full)\n",
              static_cast<unsigned long long>(o["needed_bytes"].get<uint64_t>()),
              static_cast<unsigned long long>(o["full_bytes"].get<uint64_t>()),
              o["needed_vs_full"].get<double>());
  std::printf(
      "pool asked for %llu = %.3f x needed; disk tier read %llu = %.3f x needed = %.3f x "
      "full (whole-block restore: %llu)\n",
      static_cast<unsigned long long>(o["requested_bytes"].get<uint64_t>()),
      o["requested_vs_needed"].get<double>(),
      static_cast<unsigned long long>(o["disk_bytes_read"]["needed"].get<uint64_t>()),
      o["disk_read_vs_needed"].get<double>(), o["disk_read_vs_full"].get<double>(),
      static_cast<unsigned long long>(o["disk_bytes_read"]["whole"].get<uint64_t>()));
  std::printf("recurrent layer states asked for: %llu (%llu recurrent layers)\n",
              static_cast<unsigned long long>(o["recurrent_states_requested"].get<uint64_t>()),
              static_cast<unsigned long long>(o["recurrent_layers"].get<uint64_t>()));
  std::printf("restore: needed %.2f ms   whole blocks %.2f ms   ratio %.3f (target <= %.3f)\n",
              o["restore_ms"]["needed"].get<double>(), o["restore_ms"]["whole"].get<double>(),
              o["time_vs_whole"].get<double>(), o["time_target"].get<double>());
  const auto& raw = o["raw_read"];
  std::printf(
      "raw preads (%u threads, the same files; needed = headers + needed tensors, %llu bytes): "
      "needed %.2f ms   whole %.2f ms   ratio %.3f\n",
      raw["threads"].get<uint32_t>(),
      static_cast<unsigned long long>(raw["needed_bytes"].get<uint64_t>()),
      raw["needed_ms"].get<double>(), raw["whole_ms"].get<double>(),
      raw["time_vs_whole"].get<double>());
  std::printf("restore / raw: needed %.2f x   whole %.2f x\n",
              o["restore_vs_raw"]["needed"].get<double>(),
              o["restore_vs_raw"]["whole"].get<double>());
  if (raw.contains("direct_needed_ms")) {
    std::printf("O_DIRECT preads (queue depth %u): needed %.2f ms   whole %.2f ms\n",
                raw["threads"].get<uint32_t>(), raw["direct_needed_ms"].get<double>(),
                raw["direct_whole_ms"].get<double>());
  }
  std::printf(
      "the fastest raw read of the needed bytes = %.3f x the whole-block restore (time_vs_whole "
      "goes no lower on this device)\n",
      o["needed_read_vs_whole"]["median"].get<double>());
  for (const auto& [name, r] : o["ratios"].items()) {
    std::printf("%s: median %.3f  worst %.3f  (target %s %.3f) over %zu repeats\n", name.c_str(),
                r["median"].get<double>(), r["worst"].get<double>(),
                r["better"] == "higher" ? ">=" : "<=", r["target"].get<double>(), r["runs"].size());
  }
}

}  // namespace kvtier::cli
