#include "engine/model.h"

#include <cmath>
#include <new>
#include <string>
#include <utility>

#include "engine/kernels.h"

namespace kvtier::engine {

namespace {

constexpr uint64_t kMaxDim = 65536;
constexpr uint64_t kMaxParameters = 1ull << 30;

uint64_t Mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ull;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Tensor `id` of the model seeded `seed`: `n` values uniform in
// [−scale, scale) (a 24-bit grid, so exact in float) plus `offset`.
std::vector<float> Draw(uint64_t seed, uint64_t id, size_t n, float scale, float offset) {
  std::vector<float> out(n);
  const uint64_t stream = Mix(Mix(seed) ^ (id + 1) * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t r = Mix(stream + (i + 1) * 0x9e3779b97f4a7c15ull);
    const float u = static_cast<float>(r >> 40) * (1.0f / 8388608.0f) - 1.0f;  // [−1, 1)
    out[i] = u * scale + offset;
  }
  return out;
}

// Uniform with variance 1/fan_in.
float InitScale(uint64_t fan_in) { return std::sqrt(3.0f / static_cast<float>(fan_in)); }

}  // namespace

std::string_view MixerKindName(MixerKind kind) {
  switch (kind) {
    case MixerKind::kAttention:
      return "attention";
    case MixerKind::kSliding:
      return "sliding";
    case MixerKind::kLinear:
      return "linear";
  }
  return "unknown";
}

bool ModelConfig::IsPlainAttention() const {
  if (kv_bits != 0) return false;
  for (MixerKind m : mixers) {
    if (m != MixerKind::kAttention) return false;
  }
  return true;
}

std::vector<MixerKind> HybridMixers(uint32_t layers) {
  static constexpr MixerKind kCycle[3] = {MixerKind::kAttention, MixerKind::kSliding,
                                          MixerKind::kLinear};
  std::vector<MixerKind> out(layers);
  for (uint32_t l = 0; l < layers; ++l) out[l] = kCycle[l % 3];
  return out;
}

ModelConfig HybridConfig() {
  ModelConfig c;
  c.layers = 6;
  c.mixers = HybridMixers(c.layers);
  c.window = 48;
  return c;
}

std::string DescribeMixers(const ModelConfig& c) {
  std::string out;
  for (uint32_t l = 0; l < c.layers; ++l) {
    if (l > 0) out += ", ";
    out += MixerKindName(c.mixer(l));
    if (c.mixer(l) == MixerKind::kSliding) out += " " + std::to_string(c.window);
  }
  if (c.mixers.empty()) out = "attention";
  out += c.kv_bits != 0 ? "; K/V " + std::to_string(c.kv_bits) + "-bit affine, groups of " +
                              std::to_string(c.kv_group)
                        : "; K/V " + std::string(DTypeName(c.kv_dtype));
  return out;
}

Status ModelConfig::Validate() const {
  auto dim = [](const char* name, uint64_t v) -> Status {
    if (v == 0 || v > kMaxDim) {
      return Status::InvalidArgument(std::string(name) + " must be in 1.." +
                                     std::to_string(kMaxDim) + ", got " + std::to_string(v));
    }
    return Status::Ok();
  };
  KVTIER_RETURN_IF_ERROR(dim("layers", layers));
  KVTIER_RETURN_IF_ERROR(dim("heads", heads));
  KVTIER_RETURN_IF_ERROR(dim("kv_heads", kv_heads));
  KVTIER_RETURN_IF_ERROR(dim("head_dim", head_dim));
  KVTIER_RETURN_IF_ERROR(dim("hidden", hidden));
  KVTIER_RETURN_IF_ERROR(dim("ffn", ffn));
  KVTIER_RETURN_IF_ERROR(dim("vocab", vocab));
  if (heads % kv_heads != 0) {
    return Status::InvalidArgument("heads (" + std::to_string(heads) +
                                   ") must be a multiple of kv_heads (" + std::to_string(kv_heads) +
                                   ")");
  }
  if (head_dim % 2 != 0) {
    return Status::InvalidArgument("head_dim must be even (rotary pairs), got " +
                                   std::to_string(head_dim));
  }
  if (!(rope_theta > 1.0) || !std::isfinite(rope_theta)) {
    return Status::InvalidArgument("rope_theta must be a finite number > 1");
  }
  if (!(norm_eps > 0.0f) || !std::isfinite(norm_eps)) {
    return Status::InvalidArgument("norm_eps must be a finite number > 0");
  }
  if (!IsKvDType(kv_dtype)) {
    return Status::InvalidArgument("kv_dtype must be F16, BF16 or F32, got " +
                                   std::string(DTypeName(kv_dtype)));
  }
  if (!mixers.empty()) {
    if (mixers.size() != layers) {
      return Status::InvalidArgument("mixers has " + std::to_string(mixers.size()) +
                                     " entries for " + std::to_string(layers) + " layers");
    }
    bool per_token = false, sliding = false;
    for (MixerKind m : mixers) {
      if (m != MixerKind::kAttention && m != MixerKind::kSliding && m != MixerKind::kLinear) {
        return Status::InvalidArgument("mixers holds an unknown kind");
      }
      per_token |= m != MixerKind::kLinear;
      sliding |= m == MixerKind::kSliding;
    }
    if (!per_token) {
      return Status::InvalidArgument(
          "at least one layer must be attention or sliding (the pool's block size comes from "
          "a per-token state)");
    }
    if (sliding && (window == 0 || window > kMaxDim)) {
      return Status::InvalidArgument("window must be in 1.." + std::to_string(kMaxDim) +
                                     " with a sliding layer, got " + std::to_string(window));
    }
  }
  if (kv_bits != 0) {
    if (kv_bits != 8) {
      return Status::InvalidArgument("kv_bits must be 0 or 8, got " + std::to_string(kv_bits));
    }
    if (kv_group == 0 || head_dim % kv_group != 0) {
      return Status::InvalidArgument("kv_group (" + std::to_string(kv_group) +
                                     ") must divide head_dim (" + std::to_string(head_dim) + ")");
    }
  }
  // Checked in 64 bits: every factor is at most 2^16.
  if (ParameterCount() > kMaxParameters) {
    return Status::InvalidArgument("the model has " + std::to_string(ParameterCount()) +
                                   " weights; at most " + std::to_string(kMaxParameters) +
                                   " are allowed");
  }
  return Status::Ok();
}

ModelLayout ModelConfig::KvLayout(uint32_t block_tokens, std::string name) const {
  if (IsPlainAttention()) {
    return ModelLayout::Attention(std::move(name), layers, kv_heads, head_dim, kv_dtype,
                                  block_tokens);
  }
  ModelLayout out;
  out.name = std::move(name);
  out.block_tokens = block_tokens;
  const uint64_t a = kv_heads, t = block_tokens, d = head_dim;
  auto per_token = [&](std::string role, DType dtype, uint64_t b) {
    TensorSpec s;
    s.role = std::move(role);
    s.dtype = dtype;
    s.shape = {a, t, b};
    s.token_dim = 1;
    return s;
  };
  for (uint32_t l = 0; l < layers; ++l) {
    LayerSpec spec;
    const MixerKind m = mixer(l);
    if (m == MixerKind::kLinear) {
      spec.cache_type = "linear_attention";
      TensorSpec s;
      s.role = "state";
      s.dtype = DType::kF32;  // exact: a resumed state is the computed one
      s.shape = {a, d, d};
      s.token_dim = -1;
      spec.states.push_back(std::move(s));
      out.layers.push_back(std::move(spec));
      continue;
    }
    const bool sliding = m == MixerKind::kSliding;
    spec.cache_type =
        std::string(kv_bits != 0 ? "quantized_" : "") + (sliding ? "sliding_window" : "attention");
    if (sliding) {
      spec.window = window;
      spec.meta_state.push_back("window=" + std::to_string(window));
    }
    if (kv_bits == 0) {
      spec.states.push_back(per_token("keys", kv_dtype, d));
      spec.states.push_back(per_token("values", kv_dtype, d));
    } else {
      for (const char* kv : {"key", "value"}) {
        spec.states.push_back(per_token(std::string(kv) + "s", DType::kU8, d));
        spec.states.push_back(per_token(std::string(kv) + "_scales", DType::kF16, d / kv_group));
        spec.states.push_back(per_token(std::string(kv) + "_biases", DType::kF16, d / kv_group));
      }
      // In the signature: another scheme with the same tensor shapes (other
      // bits packed alike, another mode) never reads these blocks.
      spec.quantization = Quantization{kv_bits, kv_group, "affine"};
      spec.meta_state.push_back("bits=" + std::to_string(kv_bits));
      spec.meta_state.push_back("group_size=" + std::to_string(kv_group));
      spec.meta_state.push_back("mode=affine");
    }
    out.layers.push_back(std::move(spec));
  }
  return out;
}

uint64_t ModelConfig::ParameterCount() const {
  const uint64_t h = hidden, q = uint64_t{heads} * head_dim, kv = uint64_t{kv_heads} * head_dim;
  const uint64_t per_layer = 2 * h + 2 * q * h + 2 * kv * h + 3 * uint64_t{ffn} * h;
  uint64_t linear = 0;
  for (uint32_t l = 0; l < mixers.size() && l < layers; ++l) {
    if (mixers[l] == MixerKind::kLinear) ++linear;
  }
  return uint64_t{vocab} * h + h + uint64_t{layers} * per_layer + linear * kv_heads * h;
}

Result<std::unique_ptr<const Model>> Model::Create(const ModelConfig& config) {
  KVTIER_RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<Model> m(new Model(config));
  const uint64_t h = config.hidden, q = uint64_t{config.heads} * config.head_dim,
                 kv = uint64_t{config.kv_heads} * config.head_dim, f = config.ffn;
  const uint64_t seed = config.seed;
  try {
    // Tensor ids: 0 embedding, 1 final norm, then 16 per layer.
    m->embedding_ = Draw(seed, 0, config.vocab * h, 1.0f, 0.0f);
    m->final_norm_ = Draw(seed, 1, h, 0.1f, 1.0f);
    m->layers_.resize(config.layers);
    for (uint64_t l = 0; l < config.layers; ++l) {
      LayerWeights& w = m->layers_[l];
      const uint64_t id = 16 + 16 * l;
      w.attn_norm = Draw(seed, id + 0, h, 0.1f, 1.0f);
      w.wq = Draw(seed, id + 1, q * h, InitScale(h), 0.0f);
      w.wk = Draw(seed, id + 2, kv * h, InitScale(h), 0.0f);
      w.wv = Draw(seed, id + 3, kv * h, InitScale(h), 0.0f);
      w.wo = Draw(seed, id + 4, h * q, InitScale(q), 0.0f);
      w.mlp_norm = Draw(seed, id + 5, h, 0.1f, 1.0f);
      w.w_gate = Draw(seed, id + 6, f * h, InitScale(h), 0.0f);
      w.w_up = Draw(seed, id + 7, f * h, InitScale(h), 0.0f);
      w.w_down = Draw(seed, id + 8, h * f, InitScale(f), 0.0f);
      if (config.mixer(static_cast<uint32_t>(l)) == MixerKind::kLinear) {
        w.w_decay = Draw(seed, id + 9, config.kv_heads * h, InitScale(h), 0.0f);
      }
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("no memory for " + std::to_string(config.ParameterCount()) +
                                     " model weights");
  }
  return std::unique_ptr<const Model>(std::move(m));
}

}  // namespace kvtier::engine
