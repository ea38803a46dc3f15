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
#include "kvtier/block_pool.h"
#include "kvtier/env.h"
#include "kvtier/file_tree.h"
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
    if (st.remote.has_value()) report->remote_blocks_stored += st.remote->stored;
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
  // The layout signature tells most models apart; the window and the
  // quantization are spelled out too, so no other variant's blocks are ever
  // served to this one.
  if (!o.model.IsPlainAttention()) {
    po.key_namespace.model_id += "/window-" + std::to_string(o.model.window) + "/kv-bits-" +
                                 std::to_string(o.model.kv_bits) + "-group-" +
                                 std::to_string(o.model.kv_group);
  }
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
  co.info_log = o.info_log;
  DiskTierOptions disk;
  disk.dir = cache_dir;
  disk.writer_threads = 1;
  disk.read_threads = 2;
  co.disk = std::move(disk);
  if (o.remote.has_value()) {
    co.remote = *o.remote;
    co.remote->layout = layout;
    co.remote->require_server_at_open = true;
  }
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
  add(r.remote_blocks, "remote");
  return s.empty() ? "none" : s;
}

// One prompt served: the logits after the prompt and after each decoded
// token, and the tokens decoded (each the argmax of the logits before it).
struct Served {
  std::vector<std::vector<float>> logits;
  std::vector<uint32_t> tokens;
};

// Serves `prompt` as sequence `seq` on `s` (the only active sequence),
// decoding `decode_tokens` greedy tokens, and fills r's reuse and timing
// fields.
Result<Served> Serve(Serving* s, uint64_t seq, std::span<const uint32_t> prompt,
                     uint32_t decode_tokens, uint32_t block_tokens, Env* env, DemoRequest* r) {
  const uint64_t active[1] = {seq};
  s->pool->SetActiveSequences(active);
  const TieredBackingStoreCounters before = s->store->counters();
  // Disk and remote blocks from the cache's own counters (hits_disk,
  // hits_remote), host blocks from the pool's store.
  const CacheStats cache_before = s->cache->Stats();
  const uint64_t t0 = env->NowMicros();
  KVTIER_ASSIGN_OR_RETURN(PrefillResult got, s->engine->Prefill(seq, prompt));
  Served out;
  out.tokens.push_back(Argmax(got.logits));
  r->ttft_ms = Ms(env->NowMicros() - t0);
  r->load_ms = Ms(got.allocate_micros);
  r->prefill_ms = Ms(got.compute_micros);
  const TieredBackingStoreCounters after = s->store->counters();
  const CacheStats cache_after = s->cache->Stats();
  r->prompt_tokens = prompt.size();
  r->reused_tokens = got.reused_tokens;
  r->computed_tokens = got.computed_tokens;
  r->host_blocks = after.loaded_host - before.loaded_host;
  r->disk_blocks = cache_after.hits_disk - cache_before.hits_disk;
  r->remote_blocks = cache_after.hits_remote - cache_before.hits_remote;
  if (got.continued) {
    r->pool_blocks = (got.reused_tokens + block_tokens - 1) / block_tokens;
  } else {
    r->pool_blocks = got.allocate.pool_blocks;
    // A restored sequence's partial last block, kept in host memory by the pool.
    if (got.reused_tokens >
        (r->pool_blocks + r->host_blocks + r->disk_blocks + r->remote_blocks) * block_tokens) {
      ++r->pool_blocks;
    }
  }
  r->source = got.reused_tokens == 0 ? "none" : SourceName(*r);
  out.logits.push_back(std::move(got.logits));
  for (uint32_t k = 0; k < decode_tokens; ++k) {
    KVTIER_ASSIGN_OR_RETURN(std::vector<float> a, s->engine->Decode(seq, out.tokens.back()));
    if (k + 1 < decode_tokens) out.tokens.push_back(Argmax(a));
    out.logits.push_back(std::move(a));
  }
  if (decode_tokens == 0) out.tokens.clear();
  return out;
}

// Counts `got` against `want` step by step into r's logits fields.
void CompareLogits(const std::vector<std::vector<float>>& got,
                   const std::vector<std::vector<float>>& want, DemoRequest* r) {
  for (size_t step = 0; step < std::max(got.size(), want.size()); ++step) {
    static const std::vector<float> kNone;
    const std::vector<float>& a = step < got.size() ? got[step] : kNone;
    const std::vector<float>& b = step < want.size() ? want[step] : kNone;
    ++r->logits_compared;
    if (!BitIdentical(a, b) && r->logits_mismatched++ == 0) {
      r->mismatch = DescribeMismatch(a, b, static_cast<uint32_t>(step));
    }
  }
}

// A conversation's last request on the first host: what the second host
// serves again and must answer identically.
struct LastTurn {
  std::vector<uint32_t> prompt;
  std::vector<std::vector<float>> logits;
  double recompute_ttft_ms = 0;
};

void AddToTotals(const DemoRequest& r, DemoReport* report) {
  report->reused_tokens += r.reused_tokens;
  report->computed_tokens += r.computed_tokens;
  report->pool_blocks_hit += r.pool_blocks;
  report->host_blocks_hit += r.host_blocks;
  report->disk_blocks_hit += r.disk_blocks;
  report->remote_blocks_hit += r.remote_blocks;
  if (r.after_restart) report->disk_blocks_after_restart += r.disk_blocks;
  if (r.host == 2) report->second_host_remote_blocks += r.remote_blocks;
  report->ttft_ms += r.ttft_ms;
  report->recompute_ttft_ms += r.recompute_ttft_ms;
  if (r.logits_mismatched != 0) {
    report->bit_exact = false;
    ++report->mismatched_requests;
  }
}

// The second host (--remote): its own empty cache folder and host tier, the
// same model and Redis; serves every conversation's last prompt again.
Status RunSecondHost(const DemoOptions& o, const Model* model, const ModelLayout& layout,
                     const std::vector<LastTurn>& last, Env* env,
                     const std::function<void(const DemoEvent&)>& progress, DemoReport* report) {
  const std::string dir = JoinPath(report->dir, "host2");
  const std::string cache_dir = JoinPath(dir, "cache");
  // Left by an earlier run inside the demo folder, which PrepareFolder
  // cleared unless --keep: an empty folder is part of the point.
  KVTIER_RETURN_IF_ERROR(RemoveTree(env, dir));
  KVTIER_ASSIGN_OR_RETURN(Serving host2,
                          OpenServing(o, model, layout, report->pool_blocks, cache_dir, env));
  const uint32_t total = static_cast<uint32_t>(report->requests.size() + last.size());
  if (progress) {
    DemoEvent e;
    e.kind = DemoEvent::Kind::kSecondHost;
    e.total_requests = total;
    e.message =
        "second host: a new engine, pool and cache with an empty host tier and an empty "
        "folder (" +
        cache_dir +
        "), sharing only the Redis server with the first; it "
        "serves each conversation's last prompt again";
    progress(e);
  }
  for (uint32_t c = 0; c < last.size(); ++c) {
    DemoRequest r;
    r.index = static_cast<uint32_t>(report->requests.size());
    r.host = 2;
    r.conversation = c;
    r.turn = o.turns_before_restart + o.turns_after_restart - 1;
    r.after_restart = false;
    KVTIER_ASSIGN_OR_RETURN(Served got, Serve(&host2, kServingSeqBase + c, last[c].prompt,
                                              o.decode_tokens, o.block_tokens, env, &r));
    r.recompute_ttft_ms = last[c].recompute_ttft_ms;
    CompareLogits(got.logits, last[c].logits, &r);
    AddToTotals(r, report);
    report->requests.push_back(std::move(r));
    if (progress) {
      DemoEvent e;
      e.kind = DemoEvent::Kind::kRequest;
      e.request = &report->requests.back();
      e.total_requests = total;
      progress(e);
    }
  }
  // The table's "blocks on disk at the end" stays the first host's folder.
  const uint64_t entries = report->disk_entries_at_end;
  Status s = host2.Close(report);
  report->disk_entries_at_end = entries;
  return s;
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
  if (remote.has_value() && remote->url.empty()) {
    return Status::InvalidArgument("remote.url must not be empty");
  }
  return Status::Ok();
}

void UseHybridModel(DemoOptions* o) {
  o->model.layers = o->model.layers >= 4 ? 6 : 3;
  o->model.mixers = HybridMixers(o->model.layers);
  o->model.window = 3 * o->block_tokens;
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
  if (o.block_tokens > system.size()) {
    // Refused before anything runs: no prompt would fill a block the tiers
    // could serve after the restart, and the demo would show nothing.
    return Status::InvalidArgument(
        "block_tokens " + std::to_string(o.block_tokens) + ": more than the " +
        std::to_string(system.size()) +
        "-token system prompt every conversation shares, so no block would be cached; give 1.." +
        std::to_string(system.size()));
  }
  const uint32_t turns = o.turns_before_restart + o.turns_after_restart;
  size_t longest = 0;
  for (uint32_t c = 0; c < o.conversations; ++c) {
    size_t len = system.size();
    for (uint32_t t = 0; t < turns; ++t) len += UserTurn(o, c, t).size() + o.decode_tokens;
    longest = std::max(longest, len);
  }
  const uint32_t seq_blocks =
      static_cast<uint32_t>((longest + o.block_tokens - 1) / o.block_tokens);
  if (o.pool_blocks != 0 && o.pool_blocks < seq_blocks) {
    // Refused before anything runs: the first long request would fail.
    return Status::InvalidArgument(
        "pool_blocks " + std::to_string(o.pool_blocks) + ": the longest conversation needs " +
        std::to_string(seq_blocks) + " blocks of " + std::to_string(o.block_tokens) +
        " tokens; give 0 (sized for it) or at least " + std::to_string(seq_blocks));
  }
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

  report.remote = o.remote.has_value();
  const uint32_t total = o.conversations * (turns + (report.remote ? 1 : 0));
  {
    DemoEvent e;
    e.kind = DemoEvent::Kind::kStart;
    e.total_requests = total;
    e.message = "model: " + std::to_string(o.model.layers) + " layers (" + DescribeMixers(o.model) +
                "), hidden " + std::to_string(o.model.hidden) + ", " +
                std::to_string(o.model.heads) + " heads / " + std::to_string(o.model.kv_heads) +
                " KV heads of " + std::to_string(o.model.head_dim) + ", " +
                std::to_string(report.parameters) + " weights (seed " +
                std::to_string(o.model.seed) + "); blocks of " + std::to_string(o.block_tokens) +
                " tokens (" + std::to_string(report.block_bytes) + " bytes); pool " +
                std::to_string(report.pool_blocks) + " blocks; cache " + report.cache_dir + "; " +
                std::to_string(o.conversations) + " conversations sharing a " +
                std::to_string(system.size()) + "-token system prompt, " + std::to_string(total) +
                " requests";
    emit(e);
  }

  std::vector<std::vector<uint32_t>> history(o.conversations, ByteTokens(system));
  std::vector<LastTurn> last(o.conversations);  // what the second host serves again
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

      // Serving: only this conversation is active; the others may be evicted.
      KVTIER_ASSIGN_OR_RETURN(Served got, Serve(&serving, kServingSeqBase + c, hist,
                                                o.decode_tokens, o.block_tokens, env, &r));

      // The same request with no cache, following the serving engine's
      // tokens so that every step's logits can be compared.
      const uint64_t t1 = env->NowMicros();
      KVTIER_ASSIGN_OR_RETURN(PrefillResult want, reference->Prefill(kReferenceSeq, hist));
      (void)Argmax(want.logits);
      r.recompute_ttft_ms = Ms(env->NowMicros() - t1);
      std::vector<std::vector<float>> want_logits;
      want_logits.push_back(std::move(want.logits));
      for (uint32_t token : got.tokens) {
        KVTIER_ASSIGN_OR_RETURN(std::vector<float> b, reference->Decode(kReferenceSeq, token));
        want_logits.push_back(std::move(b));
      }
      KVTIER_RETURN_IF_ERROR(ref_pool->Remove(kReferenceSeq));
      CompareLogits(got.logits, want_logits, &r);
      if (t + 1 == turns) last[c] = LastTurn{hist, std::move(got.logits), r.recompute_ttft_ms};
      hist.insert(hist.end(), got.tokens.begin(), got.tokens.end());

      AddToTotals(r, &report);
      report.requests.push_back(std::move(r));
      DemoEvent e;
      e.kind = DemoEvent::Kind::kRequest;
      e.request = &report.requests.back();
      e.total_requests = total;
      emit(e);
    }
  }
  KVTIER_RETURN_IF_ERROR(serving.Close(&report));
  if (o.remote.has_value()) {
    KVTIER_RETURN_IF_ERROR(RunSecondHost(o, model.get(), layout, last, env, progress, &report)
                               .WithContext("second host"));
  }
  report.wall_s = static_cast<double>(env->NowMicros() - run_start) / 1e6;
  return report;
}

}  // namespace kvtier::engine
