// The engine's token mixers: attention (full or over a sliding window, K/V
// through the pool's slots, plain or 8-bit quantized) and gated linear
// attention (a recurrent state resumed from and handed to the pool).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "engine/engine.h"
#include "engine/engine_scratch.h"
#include "engine/kernels.h"

namespace kvtier::engine {

Status Engine::AppendKv(uint64_t seq, uint32_t l, size_t pos0, size_t n) {
  const ModelConfig& c = model_->config();
  const size_t d = c.head_dim, nkv = c.kv_heads, kvw = nkv * d;
  Scratch& s = *scratch_;
  const std::vector<StateAt>& at = states_[l];
  // The states' bytes for n tokens, back to back: each is [kv_heads, n, B].
  std::vector<size_t> begin(at.size() + 1, 0);
  for (size_t k = 0; k < at.size(); ++k) {
    begin[k + 1] = begin[k] + at[k].bytes / block_tokens_ * n;
  }
  Fit(s.bytes, begin.back());
  Fit(s.row, n * d);
  const size_t groups = c.kv_bits != 0 ? d / c.kv_group : 0;
  if (c.kv_bits != 0) {
    Fit(s.quant, n * d);
    Fit(s.scales, n * groups);
    Fit(s.biases, n * groups);
  }
  for (size_t kv = 0; kv < 2; ++kv) {
    const std::vector<float>& src = kv == 0 ? s.k : s.v;
    for (size_t a = 0; a < nkv; ++a) {
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(s.row.data() + i * d, src.data() + i * kvw + a * d, d * sizeof(float));
      }
      if (c.kv_bits == 0) {
        const DType dt = at[kv].dtype;
        StoreAs(dt, std::span<const float>(s.row.data(), n * d),
                s.bytes.data() + begin[kv] + a * n * d * DTypeSize(dt));
        continue;
      }
      // Groups lie within a head's row (kv_group divides head_dim), so one
      // call over [n, d] quantizes each token on its own.
      QuantizeAffine8(s.row.data(), n * d, c.kv_group, s.quant.data(), s.scales.data(),
                      s.biases.data());
      const size_t k0 = kv * 3;
      std::memcpy(s.bytes.data() + begin[k0] + a * n * d, s.quant.data(), n * d);
      std::memcpy(s.bytes.data() + begin[k0 + 1] + a * n * groups * 2, s.scales.data(),
                  n * groups * 2);
      std::memcpy(s.bytes.data() + begin[k0 + 2] + a * n * groups * 2, s.biases.data(),
                  n * groups * 2);
    }
  }
  std::vector<std::span<const std::byte>> spans;
  for (size_t k = 0; k < at.size(); ++k) {
    spans.emplace_back(s.bytes.data() + begin[k], begin[k + 1] - begin[k]);
  }
  return pool_->AppendLayer(seq, l, pos0, n, spans);
}

Status Engine::GatherKv(uint64_t seq, uint32_t layer, size_t first, size_t len) {
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
  const std::vector<StateAt>& at = states_[layer];
  const size_t groups = c.kv_bits != 0 ? d / c.kv_group : 0;
  if (c.kv_bits != 0) {
    Fit(s.scales, t * groups);
    Fit(s.biases, t * groups);
  }
  for (size_t b = first / t; b * t < len; ++b) {
    KVTIER_ASSIGN_OR_RETURN(std::byte * slot, pool_->SlotAddress(table[b]));
    // Rows [lo, hi) of this block: none before `first`, none past `len`.
    const size_t lo = std::max(first, b * t) - b * t;
    const size_t rows = std::min(t, len - b * t) - lo;
    for (size_t kv = 0; kv < 2; ++kv) {
      float* dst_base = kv == 0 ? s.k_all.data() : s.v_all.data();
      for (size_t a = 0; a < a_n; ++a) {
        float* dst = dst_base + (a * len + b * t + lo) * d;
        if (c.kv_bits == 0) {
          const StateAt& st = at[kv];
          const size_t esize = DTypeSize(st.dtype);
          LoadFrom(st.dtype, slot + st.offset + (a * t + lo) * d * esize,
                   std::span<float>(dst, rows * d));
          continue;
        }
        const StateAt& data = at[kv * 3];
        const StateAt& scales = at[kv * 3 + 1];
        const StateAt& biases = at[kv * 3 + 2];
        std::memcpy(s.scales.data(), slot + scales.offset + (a * t + lo) * groups * 2,
                    rows * groups * 2);
        std::memcpy(s.biases.data(), slot + biases.offset + (a * t + lo) * groups * 2,
                    rows * groups * 2);
        DequantizeAffine8(reinterpret_cast<const uint8_t*>(slot + data.offset + (a * t + lo) * d),
                          s.scales.data(), s.biases.data(), rows * d, c.kv_group, dst);
      }
    }
  }
  return Status::Ok();
}

Status Engine::AttentionMixer(uint64_t seq, uint32_t l, size_t pos0, size_t n) {
  const ModelConfig& c = model_->config();
  const LayerWeights& w = model_->layer(l);
  const size_t hid = c.hidden, d = c.head_dim, nh = c.heads, nkv = c.kv_heads;
  const size_t qw = nh * d, kvw = nkv * d, group = nh / nkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  Scratch& s = *scratch_;
  MatMul(w.wq.data(), qw, hid, s.h.data(), n, s.q.data());
  MatMul(w.wk.data(), kvw, hid, s.h.data(), n, s.k.data());
  MatMul(w.wv.data(), kvw, hid, s.h.data(), n, s.v.data());
  for (size_t i = 0; i < n; ++i) {
    const float* cs = s.cos.data() + i * (d / 2);
    const float* sn = s.sin.data() + i * (d / 2);
    for (size_t hh = 0; hh < nh; ++hh) ApplyRope(s.q.data() + i * qw + hh * d, d, cs, sn);
    for (size_t a = 0; a < nkv; ++a) ApplyRope(s.k.data() + i * kvw + a * d, d, cs, sn);
  }
  KVTIER_RETURN_IF_ERROR(AppendKv(seq, l, pos0, n));
  // What the chunk attends to, old and new, read back the same way: every
  // position, or for a sliding layer only the window of its first token on.
  const size_t len = pos0 + n;
  const size_t window = c.mixer(l) == MixerKind::kSliding ? c.window : 0;
  auto first_of = [window](size_t p) {
    return window == 0 || p + 1 <= window ? 0 : p + 1 - window;
  };
  KVTIER_RETURN_IF_ERROR(GatherKv(seq, l, first_of(pos0), len));
  for (size_t i = 0; i < n; ++i) {
    const size_t p = pos0 + i;
    for (size_t hh = 0; hh < nh; ++hh) {
      const size_t g = hh / group;
      AttendHead(s.q.data() + i * qw + hh * d, s.k_all.data() + g * len * d,
                 s.v_all.data() + g * len * d, first_of(p), p, d, scale, s.scores.data(),
                 s.attn.data() + i * qw + hh * d);
    }
  }
  return Status::Ok();
}

Status Engine::LinearMixer(uint64_t seq, uint32_t l, size_t pos0, size_t n) {
  const ModelConfig& c = model_->config();
  const LayerWeights& w = model_->layer(l);
  const size_t hid = c.hidden, d = c.head_dim, nh = c.heads, nkv = c.kv_heads;
  const size_t qw = nh * d, kvw = nkv * d, group = nh / nkv;
  const float k_scale = 1.0f / std::sqrt(static_cast<float>(d));
  Scratch& s = *scratch_;
  MatMul(w.wq.data(), qw, hid, s.h.data(), n, s.q.data());
  MatMul(w.wk.data(), kvw, hid, s.h.data(), n, s.k.data());
  MatMul(w.wv.data(), kvw, hid, s.h.data(), n, s.v.data());
  Fit(s.decay, n * nkv);
  MatMul(w.w_decay.data(), nkv, hid, s.h.data(), n, s.decay.data());
  const size_t state_floats = nkv * d * d;
  const uint64_t state_bytes = state_floats * sizeof(float);
  Fit(s.state, state_floats);
  // The state after pos0 tokens: none yet at 0, else the pool's (computed by
  // the previous chunk, or restored from the block that ends at pos0).
  if (pos0 == 0) {
    std::fill(s.state.begin(), s.state.begin() + state_floats, 0.0f);
  } else {
    KVTIER_ASSIGN_OR_RETURN(std::shared_ptr<const PackedLayerView> view,
                            pool_->RecurrentState(seq, l));
    if (view->length != pos0 || view->states.size() != 1 ||
        view->states[0].data.size() != state_bytes) {
      return Status::Internal(
          "layer " + std::to_string(l) + " of sequence " + std::to_string(seq) +
          ": the pool's recurrent state is after " + std::to_string(view->length) + " tokens (" +
          std::to_string(view->states.empty() ? 0 : view->states[0].data.size()) +
          " bytes), need after " + std::to_string(pos0) + " (" + std::to_string(state_bytes) +
          " bytes)");
    }
    std::memcpy(s.state.data(), view->states[0].data.data(), state_bytes);
  }
  const std::span<const std::byte> out[1] = {
      {reinterpret_cast<const std::byte*>(s.state.data()), state_bytes}};
  for (size_t i = 0; i < n; ++i) {
    float* k = s.k.data() + i * kvw;
    for (size_t e = 0; e < kvw; ++e) k[e] *= k_scale;
    for (size_t a = 0; a < nkv; ++a) {
      LinearStateUpdate(s.state.data() + a * d * d, k + a * d, s.v.data() + i * kvw + a * d,
                        DecayGate(s.decay[i * nkv + a]), d, d);
    }
    for (size_t hh = 0; hh < nh; ++hh) {
      LinearStateRead(s.q.data() + i * qw + hh * d, s.state.data() + (hh / group) * d * d, d, d,
                      s.attn.data() + i * qw + hh * d);
    }
    // The pool keeps the state after every block's last token (the block's
    // snapshot, what a restore resumes from) and after the chunk.
    const size_t p = pos0 + i + 1;
    if (p % block_tokens_ == 0 || i + 1 == n) {
      KVTIER_RETURN_IF_ERROR(pool_->SetRecurrentState(seq, l, p, out));
    }
  }
  return Status::Ok();
}

}  // namespace kvtier::engine
