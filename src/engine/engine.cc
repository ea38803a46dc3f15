#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "engine/engine_scratch.h"
#include "engine/kernels.h"
#include "kvtier/env.h"

namespace kvtier::engine {

namespace {

std::string ShapeText(const SlotTensorGeometry& g) {
  return std::string(DTypeName(g.dtype)) + "[" + std::to_string(g.a) + ", T, " +
         std::to_string(g.b) + "]";
}

std::string ShapeText(const TensorSpec& spec, bool per_token) {
  std::string out = std::string(DTypeName(spec.dtype)) + "[";
  for (size_t i = 0; i < spec.shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += per_token && static_cast<int32_t>(i) == spec.token_dim ? std::string("T")
                                                                  : std::to_string(spec.shape[i]);
  }
  return out + "]";
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const Model* model, BlockPool* pool,
                                               EngineOptions options) {
  if (model == nullptr || pool == nullptr) {
    return Status::InvalidArgument("Engine::Create: model and pool are required");
  }
  if (options.prefill_chunk == 0) {
    return Status::InvalidArgument("prefill_chunk must be > 0");
  }
  const ModelConfig& c = model->config();
  // The block size, from the first per-token layer's first state: its rows
  // are head_dim elements of the K/V dtype (U8 when quantized).
  uint32_t first = 0;
  while (first < c.layers && c.mixer(first) == MixerKind::kLinear) ++first;
  const DType row_dtype = c.kv_bits != 0 ? DType::kU8 : c.kv_dtype;
  const uint64_t row = uint64_t{c.head_dim} * DTypeSize(row_dtype);
  const SlotTensorGeometry g0 = pool->TensorGeometry(first, 0);
  if (g0.bytes == 0) {
    return Status::InvalidArgument("pool layer " + std::to_string(first) +
                                   " state 0 does not exist: the pool's layout is not the "
                                   "model's layout");
  }
  if (g0.dtype != row_dtype || g0.a != c.kv_heads || g0.b != c.head_dim ||
      g0.bytes % (g0.a * row) != 0) {
    return Status::InvalidArgument(
        "pool layer " + std::to_string(first) + " state 0 is " + ShapeText(g0) +
        "; the model needs " + std::string(DTypeName(row_dtype)) + "[" +
        std::to_string(c.kv_heads) + ", T, " + std::to_string(c.head_dim) + "]");
  }
  const uint32_t block_tokens = static_cast<uint32_t>(g0.bytes / (g0.a * row));
  const ModelLayout want = c.KvLayout(block_tokens);
  std::vector<std::vector<StateAt>> states(c.layers);
  for (uint32_t l = 0; l < c.layers; ++l) {
    const LayerSpec& spec = want.layers[l];
    const bool per_token = c.mixer(l) != MixerKind::kLinear;
    for (uint32_t s = 0; s <= spec.states.size(); ++s) {
      const SlotTensorGeometry g = pool->TensorGeometry(l, s);
      const std::string what = "pool layer " + std::to_string(l) + " state " + std::to_string(s);
      if (s == spec.states.size()) {
        if (g.bytes != 0) {
          return Status::InvalidArgument("pool layer " + std::to_string(l) + " has more than " +
                                         std::to_string(spec.states.size()) + " states");
        }
        break;
      }
      const TensorSpec& ts = spec.states[s];
      if (g.bytes == 0) {
        return Status::InvalidArgument(what +
                                       " does not exist: the pool's layout is not the "
                                       "model's layout");
      }
      const bool shape_ok = per_token ? g.a == ts.shape[0] && g.b == ts.shape[2] : true;
      if (g.dtype != ts.dtype || g.bytes != ts.ByteSize() || !shape_ok) {
        return Status::InvalidArgument(
            what + " is " + (per_token ? ShapeText(g) : std::string(DTypeName(g.dtype))) + " (" +
            std::to_string(g.bytes) + " bytes); the model needs " + ShapeText(ts, per_token) +
            " (" + std::to_string(ts.ByteSize()) + " bytes)" +
            (per_token ? " with T = " + std::to_string(block_tokens) : std::string()));
      }
      states[l].push_back(StateAt{g.offset, g.bytes, g.dtype});
    }
  }
  if (pool->TensorGeometry(c.layers, 0).bytes != 0) {
    return Status::InvalidArgument("the pool's layout has more than the model's " +
                                   std::to_string(c.layers) + " layers");
  }
  return std::unique_ptr<Engine>(new Engine(model, pool, options, block_tokens, std::move(states)));
}

Engine::Engine(const Model* model, BlockPool* pool, EngineOptions options, uint32_t block_tokens,
               std::vector<std::vector<StateAt>> states)
    : model_(model),
      pool_(pool),
      options_(options),
      env_(options.env != nullptr ? options.env : Env::Default()),
      block_tokens_(block_tokens),
      states_(std::move(states)),
      scratch_(std::make_unique<Scratch>()) {}

Engine::~Engine() = default;

Status Engine::CheckTokens(std::span<const uint32_t> tokens) const {
  const uint32_t vocab = model_->config().vocab;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab) {
      return Status::InvalidArgument("token " + std::to_string(tokens[i]) + " at position " +
                                     std::to_string(i) + " is not below the vocabulary size " +
                                     std::to_string(vocab));
    }
  }
  return Status::Ok();
}

Result<PrefillResult> Engine::Prefill(uint64_t seq, std::span<const uint32_t> tokens) {
  if (tokens.empty()) return Status::InvalidArgument("Prefill: the prompt is empty");
  KVTIER_RETURN_IF_ERROR(CheckTokens(tokens));
  PrefillResult r;
  r.prompt_tokens = tokens.size();
  r.continued = pool_->HasSequence(seq);
  const uint64_t t0 = env_->NowMicros();
  KVTIER_ASSIGN_OR_RETURN(r.allocate, pool_->AllocateAsync(seq, tokens));
  size_t reused = r.allocate.matched_tokens;
  if (r.allocate.load_pending) {
    KVTIER_ASSIGN_OR_RETURN(reused, pool_->WaitLoaded(seq));
    r.allocate.matched_tokens = reused;
    r.allocate.load_pending = false;
  }
  const uint64_t t1 = env_->NowMicros();
  r.reused_tokens = reused;
  r.computed_tokens = tokens.size() - reused;
  KVTIER_RETURN_IF_ERROR(Forward(seq, reused, tokens.subspan(reused), &r.logits));
  r.allocate_micros = t1 - t0;
  r.compute_micros = env_->NowMicros() - t1;
  return r;
}

Result<std::vector<float>> Engine::Decode(uint64_t seq, uint32_t token) {
  const uint32_t one[1] = {token};
  KVTIER_RETURN_IF_ERROR(CheckTokens(one));
  KVTIER_ASSIGN_OR_RETURN(size_t len, pool_->Length(seq));
  std::vector<float> logits;
  KVTIER_RETURN_IF_ERROR(Forward(seq, len, one, &logits));
  return logits;
}

Status Engine::Forward(uint64_t seq, size_t start, std::span<const uint32_t> tokens,
                       std::vector<float>* logits) {
  const ModelConfig& c = model_->config();
  const size_t hid = c.hidden, d = c.head_dim, nh = c.heads, nkv = c.kv_heads, f = c.ffn;
  const size_t qw = nh * d, kvw = nkv * d;
  Scratch& s = *scratch_;
  try {
    for (size_t done = 0; done < tokens.size();) {
      const size_t n = std::min<size_t>(options_.prefill_chunk, tokens.size() - done);
      const size_t pos0 = start + done;
      const size_t len = pos0 + n;
      Fit(s.x, n * hid);
      Fit(s.h, n * hid);
      Fit(s.q, n * qw);
      Fit(s.k, n * kvw);
      Fit(s.v, n * kvw);
      Fit(s.attn, n * qw);
      Fit(s.proj, n * std::max(hid, f));
      Fit(s.gate, n * f);
      Fit(s.up, n * f);
      Fit(s.act, n * f);
      Fit(s.cos, n * (d / 2));
      Fit(s.sin, n * (d / 2));
      Fit(s.scores, len);
      for (size_t i = 0; i < n; ++i) {
        const float* e = model_->embedding().data() + size_t{tokens[done + i]} * hid;
        std::memcpy(s.x.data() + i * hid, e, hid * sizeof(float));
        RopeAngles(pos0 + i, d, c.rope_theta, s.cos.data() + i * (d / 2),
                   s.sin.data() + i * (d / 2));
      }
      for (uint32_t l = 0; l < c.layers; ++l) {
        const LayerWeights& w = model_->layer(l);
        for (size_t i = 0; i < n; ++i) {
          RmsNorm(s.x.data() + i * hid, w.attn_norm.data(), hid, c.norm_eps, s.h.data() + i * hid);
        }
        KVTIER_RETURN_IF_ERROR(c.mixer(l) == MixerKind::kLinear ? LinearMixer(seq, l, pos0, n)
                                                                : AttentionMixer(seq, l, pos0, n));
        MatMul(w.wo.data(), hid, qw, s.attn.data(), n, s.proj.data());
        for (size_t i = 0; i < n * hid; ++i) s.x[i] += s.proj[i];
        for (size_t i = 0; i < n; ++i) {
          RmsNorm(s.x.data() + i * hid, w.mlp_norm.data(), hid, c.norm_eps, s.h.data() + i * hid);
        }
        MatMul(w.w_gate.data(), f, hid, s.h.data(), n, s.gate.data());
        MatMul(w.w_up.data(), f, hid, s.h.data(), n, s.up.data());
        for (size_t i = 0; i < n * f; ++i) s.act[i] = Silu(s.gate[i]) * s.up[i];
        MatMul(w.w_down.data(), hid, f, s.act.data(), n, s.proj.data());
        for (size_t i = 0; i < n * hid; ++i) s.x[i] += s.proj[i];
      }
      KVTIER_RETURN_IF_ERROR(pool_->Advance(seq, tokens.subspan(done, n)));
      done += n;
      if (done == tokens.size() && logits != nullptr) {
        RmsNorm(s.x.data() + (n - 1) * hid, model_->final_norm().data(), hid, c.norm_eps,
                s.h.data());
        logits->assign(c.vocab, 0.0f);
        MatMul(model_->embedding().data(), c.vocab, hid, s.h.data(), 1, logits->data());
      }
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("engine scratch memory for " + std::to_string(tokens.size()) +
                                     " tokens at position " + std::to_string(start));
  }
  return Status::Ok();
}

uint32_t Argmax(std::span<const float> logits) {
  uint32_t best = 0;
  for (uint32_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

bool BitIdentical(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

}  // namespace kvtier::engine
