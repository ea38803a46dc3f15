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
  // Checked in 64 bits: every factor is at most 2^16.
  if (ParameterCount() > kMaxParameters) {
    return Status::InvalidArgument("the model has " + std::to_string(ParameterCount()) +
                                   " weights; at most " + std::to_string(kMaxParameters) +
                                   " are allowed");
  }
  return Status::Ok();
}

ModelLayout ModelConfig::KvLayout(uint32_t block_tokens, std::string name) const {
  return ModelLayout::Attention(std::move(name), layers, kv_heads, head_dim, kv_dtype,
                                block_tokens);
}

uint64_t ModelConfig::ParameterCount() const {
  const uint64_t h = hidden, q = uint64_t{heads} * head_dim, kv = uint64_t{kv_heads} * head_dim;
  const uint64_t per_layer = 2 * h + 2 * q * h + 2 * kv * h + 3 * uint64_t{ffn} * h;
  return uint64_t{vocab} * h + h + uint64_t{layers} * per_layer;
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
    }
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted("no memory for " + std::to_string(config.ParameterCount()) +
                                     " model weights");
  }
  return std::unique_ptr<const Model>(std::move(m));
}

}  // namespace kvtier::engine
