// RunDemo: the scripted session of `kvtier demo` (see demo.h).
#include "engine/demo.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "engine/demo_script.h"
#include "engine/engine.h"
#include "engine/file_tree.h"
#include "kvtier/block_pool.h"
#include "kvtier/env.h"
#include "kvtier/tiered_backing_store.h"
#include "kvtier/tiered_cache.h"

namespace kvtier::engine {

namespace {

constexpr char kMarkerName[] = "kvtier-demo.marker";
constexpr char kMarkerText[] =
    "This folder belongs to `kvtier demo`, which clears it at the start of each run "
    "(unless --keep).\n";
constexpr uint64_t kServingSeqBase = 1;  // conversation c is sequence kServingSeqBase + c
constexpr uint64_t kReferenceSeq = 1;

double Ms(uint64_t micros) { return static_cast<double>(micros) / 1000.0; }

std::string Prefix(std::string_view text, uint32_t bytes) {
  return std::string(bytes == 0 ? text : text.substr(0, std::min<size_t>(bytes, text.size())));
}

std::string UserTurn(const DemoOptions& o, uint32_t conversation, uint32_t turn) {
  const auto messages = DemoUserMessages();
  const std::string_view msg = messages[(conversation * 5 + turn * 3) % messages.size()];
  return "\nUser: " + Prefix(msg, o.user_message_bytes) + "\nAssistant: ";
}

// The serving side: cache, its adapter, the pool over it and the engine.
// Destroyed in reverse order of creation.
struct Serving {
  std::unique_ptr<TieredCache> cache;
  std::unique_ptr<TieredBackingStore> store;
  std::unique_ptr<BlockPool> pool;
  std::unique_ptr<Engine> engine;

  // Drops the engine and the pool, then closes the cache (dirty host blocks
  // go to disk). Adds the pool's and cache's traffic to `report`.
  Status Close(DemoReport* report) {
    engine.reset();
    if (pool != nullptr) report->pool_evicted_sequences += pool->GetStats().evicted_sequences;
    pool.reset();
    if (store != nullptr) report->blocks_stored += store->counters().stored_blocks;
    store.reset();
    if (cache == nullptr) return Status::Ok();
    Status s = cache->Close();
    const CacheStats st = cache->Stats();
    if (st.disk.has_value()) {
      report->disk_bytes_written += st.disk->bytes_written;
      report->disk_entries_at_end = st.disk->compatible_entries;
    }
    cache.reset();
    return s;
  }
};

// The serving pool's options (its store is set by OpenServing).
PoolOptions ServingPoolOptions(const DemoOptions& o, const ModelLayout& layout,
                               uint32_t pool_blocks, Env* env) {
  PoolOptions po;
  po.layout = layout;
  po.key_namespace.model_id = "kvtier-demo-engine/seed-" + std::to_string(o.model.seed);
  po.total_blocks = pool_blocks;
  po.chunk_blocks = std::min<uint32_t>(pool_blocks, 64);
  po.eviction = EvictionPolicy::kLru;
  po.store_policy = StorePolicy::kOnFill;
  po.env = env;
  return po;
}

Result<Serving> OpenServing(const DemoOptions& o, const Model* model, const ModelLayout& layout,
                            uint32_t pool_blocks, const std::string& cache_dir, Env* env) {
  Serving s;
  CacheOptions co;
  co.layout_signature = layout.Signature();
  co.host.capacity_bytes = o.host_bytes;
  co.write_policy = WritePolicy::kWriteBack;
  co.load_threads = 1;
  DiskTierOptions disk;
  disk.dir = cache_dir;
  disk.writer_threads = 1;
  disk.read_threads = 2;
  co.disk = std::move(disk);
  KVTIER_ASSIGN_OR_RETURN(s.cache, TieredCache::Open(std::move(co), env));
  KVTIER_ASSIGN_OR_RETURN(s.store, TieredBackingStore::Create(s.cache.get()));
  PoolOptions po = ServingPoolOptions(o, layout, pool_blocks, env);
  po.store = s.store.get();
  KVTIER_ASSIGN_OR_RETURN(s.pool, BlockPool::Create(std::move(po)));
  EngineOptions eo;
  eo.env = env;
  KVTIER_ASSIGN_OR_RETURN(s.engine, Engine::Create(model, s.pool.get(), eo));
  return s;
}

// Makes `dir` an empty demo folder (kClean) or keeps it (kKeep), and marks it.
Status PrepareFolder(Env* env, const std::string& dir, DemoStart start) {
  Result<FileInfo> info = env->Stat(dir);
  if (info.ok() && info->type != FileType::kDirectory) {
    return Status::FailedPrecondition(dir + " exists and is not a folder");
  }
  if (info.ok() && start == DemoStart::kClean) {
    KVTIER_ASSIGN_OR_RETURN(bool empty, IsEmptyDir(env, dir));
    Result<FileInfo> marker = env->Stat(JoinPath(dir, kMarkerName));
    if (!empty && !marker.ok()) {
      return Status::FailedPrecondition("refusing to clear " + dir +
                                        ": it is not empty and has no " + kMarkerName +
                                        " (not a kvtier demo folder); choose another --dir");
    }
    KVTIER_RETURN_IF_ERROR(RemoveTree(env, dir));
  } else if (!info.ok() && !info.status().IsNotFound()) {
    return info.status();
  }
  KVTIER_RETURN_IF_ERROR(env->CreateDirs(dir, 0755));
  WriteFileOptions wo;
  wo.permissions = 0644;
  return env->WriteFileAtomic(
      JoinPath(dir, kMarkerName),
      std::as_bytes(std::span<const char>(kMarkerText, std::strlen(kMarkerText))), wo);
}

std::string DescribeMismatch(std::span<const float> got, std::span<const float> want,
                             uint32_t step) {
  if (got.size() != want.size()) {
    return "step " + std::to_string(step) + ": " + std::to_string(got.size()) + " logits vs " +
           std::to_string(want.size());
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0) {
      char buf[160];
      std::snprintf(buf, sizeof(buf), "step %u logit %zu: cached %.9g, recomputed %.9g", step, i,
                    static_cast<double>(got[i]), static_cast<double>(want[i]));
      return buf;
    }
  }
  return "";
}

std::string SourceName(const DemoRequest& r) {
  std::string s;
  auto add = [&](size_t n, const char* name) {
    if (n == 0) return;
    if (!s.empty()) s += "+";
    s += name;
  };
  add(r.pool_blocks, "pool");
  add(r.host_blocks, "host");
  add(r.disk_blocks, "disk");
  return s.empty() ? "none" : s;
}

}  // namespace

Status DemoOptions::Validate() const {
  if (dir.empty()) return Status::InvalidArgument("dir must not be empty");
  KVTIER_RETURN_IF_ERROR(model.Validate());
  if (model.vocab < 256) {
    return Status::InvalidArgument("model.vocab must be at least 256 (tokens are bytes), got " +
                                   std::to_string(model.vocab));
  }
  if (block_tokens == 0 || block_tokens > 4096) {
    return Status::InvalidArgument("block_tokens must be in 1..4096");
  }
  if (conversations == 0 || conversations > 64) {
    return Status::InvalidArgument("conversations must be in 1..64");
  }
  if (turns_before_restart == 0 || turns_before_restart > 16 || turns_after_restart > 16) {
    return Status::InvalidArgument(
        "turns_before_restart must be in 1..16 and turns_after_restart in 0..16");
  }
  if (decode_tokens > 256) return Status::InvalidArgument("decode_tokens must be at most 256");
  if (host_bytes == 0) return Status::InvalidArgument("host_bytes must be > 0");
  return Status::Ok();
}

DemoOptions QuickDemoOptions(std::string dir) {
  DemoOptions o;
  o.dir = std::move(dir);
  o.model.layers = 2;
  o.model.heads = 2;
  o.model.kv_heads = 1;
  o.model.head_dim = 16;
  o.model.hidden = 32;
  o.model.ffn = 64;
  o.block_tokens = 8;
  o.conversations = 3;
  o.decode_tokens = 3;
  o.system_prompt_bytes = 256;
  o.user_message_bytes = 40;
  o.host_bytes = 16ull << 20;
  return o;
}

Result<DemoReport> RunDemo(const DemoOptions& o,
                           const std::function<void(const DemoEvent&)>& progress) {
  KVTIER_RETURN_IF_ERROR(o.Validate());
  Env* env = o.env != nullptr ? o.env : Env::Default();
  const uint64_t run_start = env->NowMicros();
  auto emit = [&](DemoEvent e) {
    if (progress) progress(e);
  };

  DemoReport report;
  report.dir = o.dir;
  report.cache_dir = JoinPath(o.dir, "cache");
  report.model = o.model;
  report.parameters = o.model.ParameterCount();
  report.block_tokens = o.block_tokens;
  const ModelLayout layout = o.model.KvLayout(o.block_tokens);
  KVTIER_RETURN_IF_ERROR(layout.Validate());
  report.block_bytes = layout.BlockBytes();

  // The script, and how long its longest conversation gets.
  const std::string system = Prefix(DemoSystemPrompt(), o.system_prompt_bytes);
  report.system_prompt_tokens = system.size();
  const uint32_t turns = o.turns_before_restart + o.turns_after_restart;
  size_t longest = 0;
  for (uint32_t c = 0; c < o.conversations; ++c) {
    size_t len = system.size();
    for (uint32_t t = 0; t < turns; ++t) len += UserTurn(o, c, t).size() + o.decode_tokens;
    longest = std::max(longest, len);
  }
  const uint32_t seq_blocks =
      static_cast<uint32_t>((longest + o.block_tokens - 1) / o.block_tokens);
  report.pool_blocks = o.pool_blocks != 0 ? o.pool_blocks : seq_blocks + seq_blocks / 16 + 2;
  // A pool this machine cannot hold is bad input: refused here, before the
  // folder is touched or anything is allocated.
  KVTIER_RETURN_IF_ERROR(ServingPoolOptions(o, layout, report.pool_blocks, env)
                             .Validate()
                             .WithContext("pool_blocks " + std::to_string(report.pool_blocks)));

  KVTIER_RETURN_IF_ERROR(PrepareFolder(env, o.dir, o.start));
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<const Model> model, Model::Create(o.model));

  // The reference: no tiers, and no block outlives its sequence, so every
  // request is computed from its first token.
  PoolOptions ro;
  ro.layout = layout;
  ro.key_namespace.model_id = "kvtier-demo-reference";
  ro.total_blocks = seq_blocks + 2;
  ro.chunk_blocks = std::min<uint32_t>(ro.total_blocks, 64);
  ro.eviction = EvictionPolicy::kNone;
  ro.store_policy = StorePolicy::kNever;
  ro.retain_freed_blocks = false;
  ro.env = env;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<BlockPool> ref_pool, BlockPool::Create(std::move(ro)));
  EngineOptions eo;
  eo.env = env;
  KVTIER_ASSIGN_OR_RETURN(std::unique_ptr<Engine> reference,
                          Engine::Create(model.get(), ref_pool.get(), eo));

  KVTIER_ASSIGN_OR_RETURN(Serving serving, OpenServing(o, model.get(), layout, report.pool_blocks,
                                                       report.cache_dir, env));

  const uint32_t total = o.conversations * turns;
  {
    DemoEvent e;
    e.kind = DemoEvent::Kind::kStart;
    e.total_requests = total;
    e.message = "model: " + std::to_string(o.model.layers) + " layers, hidden " +
                std::to_string(o.model.hidden) + ", " + std::to_string(o.model.heads) +
                " heads / " + std::to_string(o.model.kv_heads) + " KV heads of " +
                std::to_string(o.model.head_dim) + ", " + std::to_string(report.parameters) +
                " weights (seed " + std::to_string(o.model.seed) + "), K/V " +
                std::string(DTypeName(o.model.kv_dtype)) + "; blocks of " +
                std::to_string(o.block_tokens) + " tokens (" + std::to_string(report.block_bytes) +
                " bytes); pool " + std::to_string(report.pool_blocks) + " blocks; cache " +
                report.cache_dir + "; " + std::to_string(o.conversations) +
                " conversations sharing a " + std::to_string(system.size()) +
                "-token system prompt, " + std::to_string(total) + " requests";
    emit(e);
  }

  std::vector<std::vector<uint32_t>> history(o.conversations, ByteTokens(system));
  for (uint32_t t = 0; t < turns; ++t) {
    const bool after = t >= o.turns_before_restart;
    if (t == o.turns_before_restart) {
      const uint64_t stored_before =
          report.blocks_stored + (serving.store ? serving.store->counters().stored_blocks : 0);
      KVTIER_RETURN_IF_ERROR(serving.Close(&report));
      KVTIER_ASSIGN_OR_RETURN(
          serving, OpenServing(o, model.get(), layout, report.pool_blocks, report.cache_dir, env));
      const CacheStats st = serving.cache->Stats();
      DemoEvent e;
      e.kind = DemoEvent::Kind::kRestart;
      e.total_requests = total;
      e.message = "restart: closed the engine, the pool and the cache (" +
                  std::to_string(stored_before) +
                  " blocks stored so far, dirty ones written to disk); reopened from " +
                  report.cache_dir + ": the disk tier holds " +
                  std::to_string(st.disk.has_value() ? st.disk->compatible_entries : 0) +
                  " blocks, the pool and the host tier are empty";
      emit(e);
    }
    for (uint32_t c = 0; c < o.conversations; ++c) {
      DemoRequest r;
      r.index = static_cast<uint32_t>(report.requests.size());
      r.conversation = c;
      r.turn = t;
      r.after_restart = after;
      std::vector<uint32_t>& hist = history[c];
      const std::vector<uint32_t> turn_tokens = ByteTokens(UserTurn(o, c, t));
      hist.insert(hist.end(), turn_tokens.begin(), turn_tokens.end());
      r.prompt_tokens = hist.size();

      // Serving: only this conversation is active; the others may be evicted.
      const uint64_t seq = kServingSeqBase + c;
      const uint64_t active[1] = {seq};
      serving.pool->SetActiveSequences(active);
      const TieredBackingStoreCounters before = serving.store->counters();
      const uint64_t t0 = env->NowMicros();
      KVTIER_ASSIGN_OR_RETURN(PrefillResult got, serving.engine->Prefill(seq, hist));
      uint32_t token = Argmax(got.logits);
      r.ttft_ms = Ms(env->NowMicros() - t0);
      r.load_ms = Ms(got.allocate_micros);
      r.prefill_ms = Ms(got.compute_micros);
      const TieredBackingStoreCounters after_c = serving.store->counters();
      r.reused_tokens = got.reused_tokens;
      r.computed_tokens = got.computed_tokens;
      const size_t bt = o.block_tokens;
      r.host_blocks = after_c.loaded_host - before.loaded_host;
      r.disk_blocks = after_c.loaded_disk - before.loaded_disk;
      if (got.continued) {
        r.pool_blocks = (got.reused_tokens + bt - 1) / bt;
      } else {
        r.pool_blocks = got.allocate.pool_blocks;
        // A restored sequence's partial last block, kept in host memory by the pool.
        if (got.reused_tokens > (r.pool_blocks + r.host_blocks + r.disk_blocks) * bt) {
          ++r.pool_blocks;
        }
      }
      r.source = got.reused_tokens == 0 ? "none" : SourceName(r);

      // The same request with no cache.
      const uint64_t t1 = env->NowMicros();
      KVTIER_ASSIGN_OR_RETURN(PrefillResult want, reference->Prefill(kReferenceSeq, hist));
      const uint32_t want_token = Argmax(want.logits);
      r.recompute_ttft_ms = Ms(env->NowMicros() - t1);
      (void)want_token;

      auto compare = [&](std::span<const float> a, std::span<const float> b, uint32_t step) {
        ++r.logits_compared;
        if (!BitIdentical(a, b)) {
          if (r.logits_mismatched++ == 0) r.mismatch = DescribeMismatch(a, b, step);
        }
      };
      compare(got.logits, want.logits, 0);
      // Decode: the serving engine picks the tokens; the reference follows
      // the same tokens so every step's logits can be compared.
      for (uint32_t k = 0; k < o.decode_tokens; ++k) {
        hist.push_back(token);
        KVTIER_ASSIGN_OR_RETURN(std::vector<float> a, serving.engine->Decode(seq, token));
        KVTIER_ASSIGN_OR_RETURN(std::vector<float> b, reference->Decode(kReferenceSeq, token));
        compare(a, b, k + 1);
        token = Argmax(a);
      }
      KVTIER_RETURN_IF_ERROR(ref_pool->Remove(kReferenceSeq));

      report.reused_tokens += r.reused_tokens;
      report.computed_tokens += r.computed_tokens;
      report.pool_blocks_hit += r.pool_blocks;
      report.host_blocks_hit += r.host_blocks;
      report.disk_blocks_hit += r.disk_blocks;
      if (after) report.disk_blocks_after_restart += r.disk_blocks;
      report.ttft_ms += r.ttft_ms;
      report.recompute_ttft_ms += r.recompute_ttft_ms;
      if (r.logits_mismatched != 0) {
        report.bit_exact = false;
        ++report.mismatched_requests;
      }
      report.requests.push_back(std::move(r));
      DemoEvent e;
      e.kind = DemoEvent::Kind::kRequest;
      e.request = &report.requests.back();
      e.total_requests = total;
      emit(e);
    }
  }
  KVTIER_RETURN_IF_ERROR(serving.Close(&report));
  report.wall_s = static_cast<double>(env->NowMicros() - run_start) / 1e6;
  return report;
}

}  // namespace kvtier::engine
