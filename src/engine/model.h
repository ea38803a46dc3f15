// The reference engine's model: a small Llama-style decoder (RMSNorm,
// rotary embeddings, grouped-query attention, SwiGLU MLP, tied embedding
// and output head) whose weights are drawn from a fixed seed. Each layer's
// token mixer is full causal attention, sliding-window attention or gated
// linear attention (a recurrent state per layer, as in Qwen3-Next's or
// Granite 4's linear layers), so one config can be a hybrid model; K/V may
// be stored 8-bit quantized (MLX's QuantizedKVCache, affine mode).
//
// The weights are not trained: the model exists so that kvtier has a real
// producer and consumer of K/V (the engine's logits depend on every cached
// byte), not to say anything sensible. The same ModelConfig gives the same
// weights bit for bit on every run and machine (SplitMix64 and one
// correctly rounded sqrt per tensor; no transcendental functions).
//
// Thread safety: a Model is immutable after Create() and may be shared by
// any number of engines and threads.
#ifndef KVTIER_ENGINE_MODEL_H_
#define KVTIER_ENGINE_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/layout.h"
#include "kvtier/status.h"

namespace kvtier::engine {

// What a decoder layer mixes tokens with, and so what it caches.
enum class MixerKind : uint8_t {
  // Causal attention over every earlier token: K/V per token.
  kAttention,
  // Causal attention over the last ModelConfig::window tokens (the current
  // one included): K/V per token, of which only the window is read.
  kSliding,
  // Gated linear attention: per KV head a state S [head_dim, head_dim] (f32),
  // S_t = g_t · S_{t−1} + k_t v_tᵀ, o_t = q_t S_t, with a scalar decay g_t
  // in (0.55, 0.95) from the layer's input (kernels.h DecayGate). Cached as
  // the state after a block's last token; no K/V.
  kLinear,
};

// "attention", "sliding", "linear".
std::string_view MixerKindName(MixerKind kind);

struct ModelConfig {
  // Decoder layers. Default 4.
  uint32_t layers = 4;
  // Query heads. A multiple of kv_heads. Default 4.
  uint32_t heads = 4;
  // Key/value heads (grouped-query attention). Default 2.
  uint32_t kv_heads = 2;
  // Elements per head; even (rotary pairs). Default 32.
  uint32_t head_dim = 32;
  // Width of the residual stream. Default 128.
  uint32_t hidden = 128;
  // Width of the SwiGLU MLP. Default 384.
  uint32_t ffn = 384;
  // Token ids are 0..vocab-1. Default 256 (one token per byte).
  uint32_t vocab = 256;
  // Rotary base. Default 10000.
  double rope_theta = 10000.0;
  // RMSNorm epsilon. Default 1e-5.
  float norm_eps = 1e-5f;
  // Seed of every weight. Default 1.
  uint64_t seed = 1;
  // How K/V are stored in the pool and the tiers: F16, BF16 or F32. The
  // math is f32; K/V are rounded to this dtype when written, so a token
  // sees the same rounded K/V whether they were computed now or loaded.
  // Default F16.
  DType kv_dtype = DType::kF16;
  // Each layer's mixer; empty = every layer kAttention, else one per layer
  // (at least one not kLinear: the pool learns its block size from a
  // per-token layer). Default empty.
  std::vector<MixerKind> mixers;
  // kSliding layers' window in tokens, in 1..65536 when there is one, else
  // ignored. Default 0.
  uint32_t window = 0;
  // 0: K/V stored as kv_dtype. 8: stored 8-bit affine-quantized in groups
  // of kv_group elements of a head's row (U8 data, F16 scales and biases);
  // the math then uses the dequantized values, fresh or cached alike.
  // Default 0.
  uint32_t kv_bits = 0;
  // Elements per quantization group; divides head_dim. Default 32.
  uint32_t kv_group = 32;

  // OK, or InvalidArgument naming the bad field. Sizes are bounded (each at
  // most 65536, weights at most 1 Gi floats) so a config cannot ask for
  // absurd memory.
  Status Validate() const;

  // Layer l's mixer (kAttention when `mixers` is empty).
  MixerKind mixer(uint32_t l) const { return mixers.empty() ? MixerKind::kAttention : mixers[l]; }
  // True when every layer is plain attention with unquantized K/V.
  bool IsPlainAttention() const;

  // The layout whose blocks hold this model's cache. Plain attention:
  // ModelLayout::Attention(name, layers, kv_heads, head_dim, kv_dtype,
  // block_tokens). Otherwise per layer: attention and sliding layers K and V
  // [kv_heads, block_tokens, head_dim] of kv_dtype ("attention",
  // "sliding_window" with LayerSpec::window), or when quantized keys,
  // key_scales, key_biases, values, value_scales, value_biases (U8 [kv_heads,
  // T, head_dim], F16 [kv_heads, T, head_dim / kv_group]; cache type
  // "quantized_attention" or "quantized_sliding_window"; LayerSpec::
  // quantization {kv_bits, kv_group, "affine"}); linear layers one
  // F32 state [kv_heads, head_dim, head_dim] with token_dim −1
  // ("linear_attention").
  ModelLayout KvLayout(uint32_t block_tokens, std::string name = "kvtier-demo-engine") const;

  // Number of weights (floats).
  uint64_t ParameterCount() const;
};

// `layers` mixers repeating attention, sliding, linear (Gemma 3's and
// Qwen3-Next's interleaving, in miniature).
std::vector<MixerKind> HybridMixers(uint32_t layers);

// The demo's hybrid model: 6 layers (HybridMixers: attention, sliding
// window of 48 tokens, linear; twice), otherwise ModelConfig's defaults.
ModelConfig HybridConfig();

// "attention", or the layers' mixers and the K/V storage in words, e.g.
// "attention, sliding 48, linear, attention, sliding 48, linear; K/V F16"
// ("K/V 8-bit affine, groups of 32" when quantized).
std::string DescribeMixers(const ModelConfig& config);

struct LayerWeights {
  std::vector<float> attn_norm;  // [hidden]
  std::vector<float> wq;         // [heads × head_dim, hidden]
  std::vector<float> wk;         // [kv_heads × head_dim, hidden]
  std::vector<float> wv;         // [kv_heads × head_dim, hidden]
  std::vector<float> wo;         // [hidden, heads × head_dim]
  std::vector<float> mlp_norm;   // [hidden]
  std::vector<float> w_gate;     // [ffn, hidden]
  std::vector<float> w_up;       // [ffn, hidden]
  std::vector<float> w_down;     // [hidden, ffn]
  std::vector<float> w_decay;    // [kv_heads, hidden]; linear layers only
};

class Model {
 public:
  // InvalidArgument for a bad config; ResourceExhausted if the weights do
  // not fit in memory.
  static Result<std::unique_ptr<const Model>> Create(const ModelConfig& config);

  const ModelConfig& config() const { return config_; }
  // [vocab, hidden]; also the output head (tied).
  const std::vector<float>& embedding() const { return embedding_; }
  const std::vector<float>& final_norm() const { return final_norm_; }
  const LayerWeights& layer(uint32_t l) const { return layers_[l]; }

 private:
  explicit Model(const ModelConfig& config) : config_(config) {}

  ModelConfig config_;
  std::vector<float> embedding_;
  std::vector<float> final_norm_;
  std::vector<LayerWeights> layers_;
};

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_MODEL_H_
