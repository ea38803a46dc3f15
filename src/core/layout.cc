// ModelLayout: sizes, signature, validation and the built-in presets.
// JSON parsing lives in layout_json.cc, file loading in layout_file.cc.
#include "kvtier/layout.h"

#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "core/layout_internal.h"

namespace kvtier {
namespace internal {

bool IsValidName(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameBytes) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '.' || c == '-';
  });
}

namespace {

// Quotes a user-supplied string for an error message, cut to a sane length.
std::string QuoteUserText(std::string_view s) {
  constexpr size_t kMax = 80;
  std::string out = "'";
  out.append(s.substr(0, kMax));
  if (s.size() > kMax) out += "...";
  out += "'";
  return out;
}

std::string NameRule() {
  return "a non-empty string of [A-Za-z0-9_.-], at most " + std::to_string(kMaxNameBytes) +
         " bytes";
}

}  // namespace

Status ValidateLayer(const LayerSpec& layer, uint32_t block_tokens, std::string_view path,
                     uint64_t* bytes) {
  const std::string p(path);
  if (!IsValidName(layer.cache_type)) {
    return Status::InvalidArgument(p + ".cache_type must be " + NameRule() + ", got " +
                                   QuoteUserText(layer.cache_type));
  }
  if (layer.states.empty()) {
    return Status::InvalidArgument(p + ".states must list at least one state tensor");
  }
  if (layer.states.size() > kMaxTensors) {
    return Status::InvalidArgument(p + ".states has " + std::to_string(layer.states.size()) +
                                   " entries; at most " + std::to_string(kMaxTensors) + " allowed");
  }
  uint64_t layer_bytes = 0;
  for (size_t k = 0; k < layer.states.size(); ++k) {
    const TensorSpec& t = layer.states[k];
    const std::string tp = p + ".states[" + std::to_string(k) + "]";
    if (!IsValidName(t.role)) {
      return Status::InvalidArgument(tp + ".role must be " + NameRule() + ", got " + QuoteUserText(t.role));
    }
    for (size_t j = 0; j < k; ++j) {
      if (layer.states[j].role == t.role) {
        return Status::InvalidArgument(tp + ".role " + QuoteUserText(t.role) + " repeats " + p +
                                       ".states[" + std::to_string(j) + "].role");
      }
    }
    const size_t elem = DTypeSize(t.dtype);
    if (elem == 0) {
      return Status::InvalidArgument(tp + ".dtype is not a known dtype (value " +
                                     std::to_string(static_cast<int>(t.dtype)) + ")");
    }
    if (t.shape.empty() || t.shape.size() > kMaxRank) {
      return Status::InvalidArgument(tp + ".shape must have 1 to " + std::to_string(kMaxRank) +
                                     " dimensions, got " + std::to_string(t.shape.size()));
    }
    uint64_t n = elem;
    for (size_t d = 0; d < t.shape.size(); ++d) {
      const uint64_t dim = t.shape[d];
      if (dim == 0) {
        return Status::InvalidArgument(tp + ".shape[" + std::to_string(d) + "] must be > 0");
      }
      // n * dim <= kMaxBlockBytes keeps every product far from overflow.
      if (dim > kMaxBlockBytes / n) {
        return Status::InvalidArgument(tp +
                                       ".shape: the tensor's byte size exceeds the 4 GiB "
                                       "block limit (dimension " +
                                       std::to_string(d) + " = " + std::to_string(dim) + ")");
      }
      n *= dim;
    }
    if (t.token_dim < -1 || t.token_dim >= static_cast<int32_t>(t.shape.size())) {
      return Status::InvalidArgument(tp + ".token_dim must be -1 or a dimension index below " +
                                     std::to_string(t.shape.size()) + ", got " +
                                     std::to_string(t.token_dim));
    }
    if (t.token_dim >= 0 && t.shape[t.token_dim] != block_tokens) {
      return Status::InvalidArgument(tp + ".shape[" + std::to_string(t.token_dim) +
                                     "] is the token dimension and must equal "
                                     "block_tokens (" +
                                     std::to_string(block_tokens) + "), got " +
                                     std::to_string(t.shape[t.token_dim]));
    }
    layer_bytes += n;
    if (layer_bytes > kMaxBlockBytes) {
      return Status::InvalidArgument(p +
                                     ".states: the layer's byte size exceeds the 4 GiB "
                                     "block limit");
    }
  }
  if (layer.window != 0 && layer.IsRecurrent()) {
    return Status::InvalidArgument(p +
                                   ".window needs a per-token state (a shape with \"T\"); "
                                   "a recurrent layer has no window");
  }
  const Quantization& q = layer.quantization;
  if (q.enabled() || q.group_size != 0 || !q.mode.empty()) {
    if (q.bits < 1 || q.bits > kMaxQuantBits) {
      return Status::InvalidArgument(p + ".quantization.bits must be in 1.." +
                                     std::to_string(kMaxQuantBits) + ", got " +
                                     std::to_string(q.bits));
    }
    if (q.group_size < 1 || q.group_size > kMaxQuantGroup) {
      return Status::InvalidArgument(p + ".quantization.group_size must be in 1.." +
                                     std::to_string(kMaxQuantGroup) + ", got " +
                                     std::to_string(q.group_size));
    }
    if (!IsValidName(q.mode)) {
      return Status::InvalidArgument(p + ".quantization.mode must be " + NameRule() + ", got " +
                                     QuoteUserText(q.mode));
    }
  }
  for (size_t m = 0; m < layer.meta_state.size(); ++m) {
    const std::string& s = layer.meta_state[m];
    if (s.size() > kMaxMetaStateBytes || !IsStrictUtf8(s)) {
      return Status::InvalidArgument(p + ".meta_state[" + std::to_string(m) +
                                     "] must be UTF-8 of at most " +
                                     std::to_string(kMaxMetaStateBytes) + " bytes");
    }
  }
  *bytes = layer_bytes;
  return Status::Ok();
}

}  // namespace internal

uint64_t TensorSpec::ByteSize() const {
  uint64_t n = DTypeSize(dtype);
  for (uint64_t d : shape) n *= d;
  return n;
}

bool LayerSpec::IsRecurrent() const {
  if (states.empty()) return false;
  for (const TensorSpec& t : states) {
    if (t.token_dim >= 0) return false;
  }
  return true;
}

uint64_t ModelLayout::BlockBytes() const {
  uint64_t total = 0;
  for (const LayerSpec& layer : layers) {
    for (const TensorSpec& t : layer.states) total += t.ByteSize();
  }
  return total;
}

size_t ModelLayout::TensorCount() const {
  size_t n = 0;
  for (const LayerSpec& layer : layers) n += layer.states.size();
  return n;
}

namespace {

// The part of a layer the signature covers: cache type, window,
// quantization, roles, dtypes, shapes.
bool SameSignedContent(const LayerSpec& a, const LayerSpec& b) {
  if (a.cache_type != b.cache_type || a.states.size() != b.states.size()) return false;
  if (a.window != b.window || a.quantization != b.quantization) return false;
  for (size_t k = 0; k < a.states.size(); ++k) {
    const TensorSpec& x = a.states[k];
    const TensorSpec& y = b.states[k];
    if (x.role != y.role || x.dtype != y.dtype || x.shape != y.shape) return false;
  }
  return true;
}

void AppendLayerBody(const LayerSpec& layer, std::string* out) {
  out->append(layer.cache_type);
  // Only written when set, so that the signatures of layouts without these
  // features (and the keys and stored blocks derived from them) stay as they
  // were. '{' cannot occur in a cache type, so the form is unambiguous.
  const Quantization& q = layer.quantization;
  if (layer.window != 0 || q.enabled()) {
    out->push_back('{');
    if (layer.window != 0) {
      out->append("window=");
      out->append(std::to_string(layer.window));
    }
    if (q.enabled()) {
      if (layer.window != 0) out->push_back(',');
      out->append("quant=");
      out->append(q.mode);
      out->append(",bits=");
      out->append(std::to_string(q.bits));
      out->append(",group=");
      out->append(std::to_string(q.group_size));
    }
    out->push_back('}');
  }
  out->push_back(':');
  for (size_t k = 0; k < layer.states.size(); ++k) {
    const TensorSpec& t = layer.states[k];
    if (k > 0) out->push_back(',');
    out->append(t.role);
    out->push_back(':');
    out->append(DTypeName(t.dtype));
    out->push_back('[');
    for (size_t d = 0; d < t.shape.size(); ++d) {
      if (d > 0) out->push_back(',');
      out->append(std::to_string(t.shape[d]));
    }
    out->push_back(']');
  }
}

}  // namespace

std::string ModelLayout::Signature() const {
  std::string out = "kvtier-layout-v1;bt=";
  out.append(std::to_string(block_tokens));
  size_t i = 0;
  while (i < layers.size()) {
    size_t last = i;
    while (last + 1 < layers.size() && SameSignedContent(layers[i], layers[last + 1])) ++last;
    out.append(";L");
    out.append(std::to_string(i));
    if (last > i) {
      out.push_back('-');
      out.append(std::to_string(last));
    }
    out.push_back('=');
    AppendLayerBody(layers[i], &out);
    i = last + 1;
  }
  return out;
}

Status ModelLayout::Validate() const {
  if (block_tokens == 0) return Status::InvalidArgument("block_tokens must be > 0");
  if (layers.empty()) return Status::InvalidArgument("layers must list at least one layer");
  if (layers.size() > internal::kMaxLayers) {
    return Status::InvalidArgument("layers has " + std::to_string(layers.size()) +
                                   " entries; at most " + std::to_string(internal::kMaxLayers) +
                                   " allowed");
  }
  uint64_t total = 0;
  size_t tensors = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    uint64_t bytes = 0;
    KVTIER_RETURN_IF_ERROR(internal::ValidateLayer(layers[i], block_tokens,
                                                   "layers[" + std::to_string(i) + "]", &bytes));
    total += bytes;  // each term <= 4 GiB, checked each step: cannot overflow
    tensors += layers[i].states.size();
    if (total > internal::kMaxBlockBytes) {
      return Status::InvalidArgument(
          "layers: the block's byte size exceeds the 4 GiB limit "
          "(reached at layers[" +
          std::to_string(i) + "])");
    }
    if (tensors > internal::kMaxTensors) {
      return Status::InvalidArgument("layers: more than " + std::to_string(internal::kMaxTensors) +
                                     " state tensors in all (reached at layers[" +
                                     std::to_string(i) + "])");
    }
  }
  return Status::Ok();
}

Result<ModelLayout> ModelLayout::WithBlockTokens(uint32_t new_block_tokens) const {
  ModelLayout out = *this;
  if (new_block_tokens != 0 && new_block_tokens != block_tokens) {
    out.block_tokens = new_block_tokens;
    for (LayerSpec& layer : out.layers) {
      for (TensorSpec& t : layer.states) {
        if (t.token_dim >= 0 && static_cast<size_t>(t.token_dim) < t.shape.size()) {
          t.shape[t.token_dim] = new_block_tokens;
        }
      }
    }
  }
  KVTIER_RETURN_IF_ERROR(out.Validate());
  return out;
}

ModelLayout ModelLayout::Attention(std::string name, uint32_t layers, uint32_t kv_heads,
                                   uint32_t head_dim, DType dtype, uint32_t block_tokens) {
  ModelLayout out;
  out.name = std::move(name);
  out.block_tokens = block_tokens;
  LayerSpec layer;
  layer.cache_type = "attention";
  for (const char* role : {"keys", "values"}) {
    TensorSpec t;
    t.role = role;
    t.dtype = dtype;
    t.shape = {kv_heads, block_tokens, head_dim};
    t.token_dim = 1;
    layer.states.push_back(std::move(t));
  }
  out.layers.assign(layers, layer);
  return out;
}

namespace {

struct PresetInfo {
  const char* name;
  uint32_t layers;
  uint32_t kv_heads;
  uint32_t head_dim;
  DType dtype;
  uint32_t block_tokens;  // default
};

// DESIGN.md §6.
constexpr std::array<PresetInfo, 3> kPresets = {{
    {"tiny", 2, 2, 16, DType::kF16, 16},
    {"qwen2.5-0.5b", 24, 2, 64, DType::kBF16, 256},
    {"llama3-8b", 32, 8, 128, DType::kBF16, 256},
}};

TensorSpec PerToken(const char* role, DType dtype, uint64_t heads, uint32_t block_tokens,
                    uint64_t width) {
  return TensorSpec{role, dtype, {heads, block_tokens, width}, 1};
}

LayerSpec AttentionLayer(uint32_t kv_heads, uint32_t head_dim, DType dtype, uint32_t bt) {
  LayerSpec layer;
  layer.cache_type = "attention";
  layer.states = {PerToken("keys", dtype, kv_heads, bt, head_dim),
                  PerToken("values", dtype, kv_heads, bt, head_dim)};
  return layer;
}

// openai/gpt-oss-20b config.json: num_hidden_layers 24, num_key_value_heads 8,
// head_dim 64, sliding_window 128, layer_types alternating
// sliding_attention (even layers) and full_attention (odd), bfloat16.
ModelLayout GptOss20b(uint32_t bt) {
  ModelLayout out;
  out.name = "gpt-oss-20b";
  out.block_tokens = bt;
  LayerSpec sliding = AttentionLayer(8, 64, DType::kBF16, bt);
  sliding.cache_type = "sliding_window";
  sliding.window = 128;
  const LayerSpec full = AttentionLayer(8, 64, DType::kBF16, bt);
  for (uint32_t i = 0; i < 24; ++i) out.layers.push_back(i % 2 == 0 ? sliding : full);
  return out;
}

// Qwen/Qwen3-Next-80B-A3B-Instruct config.json: num_hidden_layers 48,
// full_attention_interval 4 (layers 3, 7, ... are full attention), full
// attention with num_key_value_heads 2 and head_dim 256; Gated DeltaNet
// elsewhere with linear_num_key_heads 16, linear_key_head_dim 128,
// linear_num_value_heads 32, linear_value_head_dim 128 and
// linear_conv_kernel_dim 4; bfloat16. A Gated DeltaNet layer's state is its
// causal convolution's last kernel-1 inputs over the q, k and v channels
// (conv_dim = 2·16·128 + 32·128 = 8192) and the delta rule's state, one
// [key_head_dim, value_head_dim] matrix per value head.
ModelLayout Qwen3Next80b(uint32_t bt) {
  ModelLayout out;
  out.name = "qwen3-next-80b";
  out.block_tokens = bt;
  LayerSpec linear;
  linear.cache_type = "linear_attention";
  linear.states = {TensorSpec{"conv", DType::kBF16, {2 * 16 * 128 + 32 * 128, 4 - 1}, -1},
                   TensorSpec{"recurrent", DType::kBF16, {32, 128, 128}, -1}};
  const LayerSpec full = AttentionLayer(2, 256, DType::kBF16, bt);
  for (uint32_t i = 0; i < 48; ++i) out.layers.push_back(i % 4 == 3 ? full : linear);
  return out;
}

// meta-llama/Meta-Llama-3-8B config.json (num_hidden_layers 32,
// num_key_value_heads 8, head_dim 4096/32 = 128, bfloat16) with MLX's
// QuantizedKVCache at 4 bits, group size 64 (mlx-lm --kv-bits 4
// --kv-group-size 64, affine mode): per token and head, the K (and V) data
// packed into head_dim·bits/32 = 16 U32 words plus head_dim/group = 2 scales
// and 2 biases of the model's dtype.
ModelLayout Llama3_8bQ4(uint32_t bt) {
  ModelLayout out;
  out.name = "llama3-8b-q4";
  out.block_tokens = bt;
  LayerSpec layer;
  layer.cache_type = "quantized_attention";
  layer.quantization = Quantization{4, 64, "affine"};
  layer.states = {PerToken("keys", DType::kU32, 8, bt, 128 * 4 / 32),
                  PerToken("key_scales", DType::kBF16, 8, bt, 128 / 64),
                  PerToken("key_biases", DType::kBF16, 8, bt, 128 / 64),
                  PerToken("values", DType::kU32, 8, bt, 128 * 4 / 32),
                  PerToken("value_scales", DType::kBF16, 8, bt, 128 / 64),
                  PerToken("value_biases", DType::kBF16, 8, bt, 128 / 64)};
  out.layers.assign(32, layer);
  return out;
}

struct MixedPreset {
  const char* name;
  ModelLayout (*make)(uint32_t block_tokens);
  uint32_t block_tokens;  // default
};

constexpr std::array<MixedPreset, 3> kMixedPresets = {{
    {"gpt-oss-20b", &GptOss20b, 256},
    {"qwen3-next-80b", &Qwen3Next80b, 256},
    {"llama3-8b-q4", &Llama3_8bQ4, 256},
}};

}  // namespace

std::vector<std::string> ModelLayout::PresetNames() {
  std::vector<std::string> names;
  for (const PresetInfo& p : kPresets) names.emplace_back(p.name);
  for (const MixedPreset& p : kMixedPresets) names.emplace_back(p.name);
  return names;
}

Result<ModelLayout> ModelLayout::Preset(std::string_view name, uint32_t block_tokens) {
  std::optional<ModelLayout> layout;
  for (const PresetInfo& p : kPresets) {
    if (name != p.name) continue;
    layout = Attention(p.name, p.layers, p.kv_heads, p.head_dim, p.dtype,
                       block_tokens != 0 ? block_tokens : p.block_tokens);
  }
  for (const MixedPreset& p : kMixedPresets) {
    if (name == p.name) layout = p.make(block_tokens != 0 ? block_tokens : p.block_tokens);
  }
  if (layout) {
    Status s = layout->Validate();
    if (!s.ok()) return s.WithContext("layout preset '" + std::string(name) + "'");
    return *std::move(layout);
  }
  std::string known;
  for (const std::string& n : PresetNames()) {
    if (!known.empty()) known += ", ";
    known += n;
  }
  std::string shown(name.substr(0, 80));
  return Status::InvalidArgument("unknown layout preset '" + shown + "' (known: " + known +
                                 "; or a path ending in .json)");
}

}  // namespace kvtier
