#include "engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "engine/kernels.h"
#include "kvtier/env.h"

namespace kvtier::engine {

// Buffers reused across calls (resized, never shrunk).
struct Engine::Scratch {
  std::vector<float> x, h, q, k, v, attn, proj, gate, up, act;
  std::vector<float> cos, sin, scores;
  std::vector<float> k_all, v_all;  // [kv_heads, len, head_dim]
  std::vector<std::byte> k_bytes, v_bytes;
  std::vector<float> row;  // one [n, head_dim] head slice before conversion
};

namespace {

template <typename T>
void Fit(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
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
  std::vector<StateAt> states;
  uint32_t block_tokens = 0;
  for (uint32_t l = 0; l < c.layers; ++l) {
    for (uint32_t s = 0; s < 2; ++s) {
      const SlotTensorGeometry g = pool->TensorGeometry(l, s);
      const uint64_t row = uint64_t{c.head_dim} * DTypeSize(c.kv_dtype);
      const std::string what = "pool layer " + std::to_string(l) + " state " + std::to_string(s);
      if (g.bytes == 0) {
        return Status::InvalidArgument(what +
                                       " does not exist: the pool's layout is not the "
                                       "model's attention layout");
      }
      if (g.dtype != c.kv_dtype || g.a != c.kv_heads || g.b != c.head_dim ||
          g.bytes % (g.a * row) != 0) {
        return Status::InvalidArgument(
            what + " is " + std::string(DTypeName(g.dtype)) + "[" + std::to_string(g.a) + ", T, " +
            std::to_string(g.b) + "]; the model needs " + std::string(DTypeName(c.kv_dtype)) + "[" +
            std::to_string(c.kv_heads) + ", T, " + std::to_string(c.head_dim) + "]");
      }
      const uint64_t t = g.bytes / (g.a * row);
      if (block_tokens == 0) block_tokens = static_cast<uint32_t>(t);
      if (t != block_tokens) return Status::InvalidArgument(what + " has another block size");
      states.push_back(StateAt{g.offset, g.dtype});
    }
    if (pool->TensorGeometry(l, 2).bytes != 0) {
      return Status::InvalidArgument("pool layer " + std::to_string(l) +
                                     " has more than K and V states");
    }
  }
  if (pool->TensorGeometry(c.layers, 0).bytes != 0) {
    return Status::InvalidArgument("the pool's layout has more than the model's " +
                                   std::to_string(c.layers) + " layers");
  }
  return std::unique_ptr<Engine>(new Engine(model, pool, options, block_tokens, std::move(states)));
}

Engine::Engine(const Model* model, BlockPool* pool, EngineOptions options, uint32_t block_tokens,
               std::vector<StateAt> states)
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

Status Engine::GatherKv(uint64_t seq, uint32_t layer, size_t len) {
  const ModelConfig& c = model_->config();
  const size_t a_n = c.kv_heads, d = c.head_dim, t = block_tokens_;
  Scratch& s = *scratch_;
  Fit(s.k_all, a_n * len * d);
  Fit(s.v_all, a_n * len * d);
  KVTIER_ASSIGN_OR_RETURN(std::vector<uint32_t> table, pool_->BlockTable(seq));
  if (table.size() * t < len) {
    return Status::Internal("block table of sequence " + std::to_string(seq) + " covers " +
                            std::to_string(table.size() * t) + " tokens, need " +
                            std::to_string(len));
  }
  for (size_t b = 0; b * t < len; ++b) {
    KVTIER_ASSIGN_OR_RETURN(std::byte * slot, pool_->SlotAddress(table[b]));
    const size_t rows = std::min(t, len - b * t);
    for (uint32_t st = 0; st < 2; ++st) {
      const StateAt& at = states_[layer * 2 + st];
      const size_t esize = DTypeSize(at.dtype);
      float* dst_base = st == 0 ? s.k_all.data() : s.v_all.data();
      for (size_t a = 0; a < a_n; ++a) {
        const std::byte* src = slot + at.offset + (a * t) * d * esize;
        LoadFrom(at.dtype, src, std::span<float>(dst_base + (a * len + b * t) * d, rows * d));
      }
    }
  }
  return Status::Ok();
}

Status Engine::Forward(uint64_t seq, size_t start, std::span<const uint32_t> tokens,
                       std::vector<float>* logits) {
  const ModelConfig& c = model_->config();
  const size_t hid = c.hidden, d = c.head_dim, nh = c.heads, nkv = c.kv_heads, f = c.ffn;
  const size_t qw = nh * d, kvw = nkv * d, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
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
      Fit(s.row, n * d);
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
        MatMul(w.wq.data(), qw, hid, s.h.data(), n, s.q.data());
        MatMul(w.wk.data(), kvw, hid, s.h.data(), n, s.k.data());
        MatMul(w.wv.data(), kvw, hid, s.h.data(), n, s.v.data());
        for (size_t i = 0; i < n; ++i) {
          const float* cs = s.cos.data() + i * (d / 2);
          const float* sn = s.sin.data() + i * (d / 2);
          for (size_t hh = 0; hh < nh; ++hh) ApplyRope(s.q.data() + i * qw + hh * d, d, cs, sn);
          for (size_t a = 0; a < nkv; ++a) ApplyRope(s.k.data() + i * kvw + a * d, d, cs, sn);
        }
        // New K/V into the pool as [kv_heads, n, head_dim] of the layout's dtype.
        const DType kdt = states_[l * 2].dtype, vdt = states_[l * 2 + 1].dtype;
        Fit(s.k_bytes, nkv * n * d * DTypeSize(kdt));
        Fit(s.v_bytes, nkv * n * d * DTypeSize(vdt));
        for (int st = 0; st < 2; ++st) {
          const std::vector<float>& src = st == 0 ? s.k : s.v;
          const DType dt = st == 0 ? kdt : vdt;
          std::byte* out = st == 0 ? s.k_bytes.data() : s.v_bytes.data();
          for (size_t a = 0; a < nkv; ++a) {
            for (size_t i = 0; i < n; ++i) {
              std::memcpy(s.row.data() + i * d, src.data() + i * kvw + a * d, d * sizeof(float));
            }
            StoreAs(dt, std::span<const float>(s.row.data(), n * d),
                    out + a * n * d * DTypeSize(dt));
          }
        }
        const std::span<const std::byte> kv_states[2] = {
            {s.k_bytes.data(), nkv * n * d * DTypeSize(kdt)},
            {s.v_bytes.data(), nkv * n * d * DTypeSize(vdt)}};
        KVTIER_RETURN_IF_ERROR(pool_->AppendLayer(seq, l, pos0, n, kv_states));
        // All K/V of the sequence, old and new, read back the same way.
        KVTIER_RETURN_IF_ERROR(GatherKv(seq, l, len));
        for (size_t i = 0; i < n; ++i) {
          const size_t p = pos0 + i;
          for (size_t hh = 0; hh < nh; ++hh) {
            const size_t g = hh / group;
            const float* qv = s.q.data() + i * qw + hh * d;
            const float* kg = s.k_all.data() + g * len * d;
            const float* vg = s.v_all.data() + g * len * d;
            for (size_t j = 0; j <= p; ++j) s.scores[j] = Dot(qv, kg + j * d, d) * scale;
            SoftmaxInPlace(s.scores.data(), p + 1);
            float* out = s.attn.data() + i * qw + hh * d;
            std::fill(out, out + d, 0.0f);
            for (size_t j = 0; j <= p; ++j) {
              const float wj = s.scores[j];
              const float* vj = vg + j * d;
              for (size_t e = 0; e < d; ++e) out[e] += wj * vj[e];
            }
          }
        }
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
