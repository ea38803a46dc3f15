// ModelLayout: what one cached block of a model holds: `block_tokens`
// consecutive tokens of every layer's cache state. Per layer, a LayerSpec
// lists the state tensors stored for a block, each with a dtype and a
// per-block shape:
//   - attention:            K [kv_heads, block_tokens, head_dim], V likewise;
//   - quantized attention:  packed K/V data plus scales and biases;
//   - sliding window:       K/V plus meta state strings (window size, ...);
//   - Mamba / linear attn:  conv and ssm state arrays whose shapes do not
//                           depend on block_tokens;
// and a model may mix layer kinds. The layout's canonical signature string
// (see Signature()) decides compatibility: a block is only served to a
// reader whose signature is equal. docs/layouts.md documents the JSON schema
// and the signature grammar.
//
// Thread safety: immutable values after construction.
#ifndef KVTIER_LAYOUT_H_
#define KVTIER_LAYOUT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvtier/status.h"

namespace kvtier {

class Env;

// Element types, named as safetensors names them.
enum class DType : uint8_t {
  kF16,
  kBF16,
  kF32,
  kF64,
  kI8,
  kI16,
  kI32,
  kI64,
  kU8,
  kU16,
  kU32,
  kU64,
  kBool,
  kF8E4M3,
  kF8E5M2,
};

// Bytes per element (1, 2, 4 or 8).
size_t DTypeSize(DType dtype);
// The safetensors name: "F16", "BF16", ..., "BOOL", "F8_E4M3", "F8_E5M2".
std::string_view DTypeName(DType dtype);
// Parses a safetensors dtype name (exact, case-sensitive).
std::optional<DType> DTypeFromName(std::string_view name);

// One state tensor of a layer, per block.
struct TensorSpec {
  std::string role;              // what it is: "keys", "values", "scales", "conv", ...
  DType dtype = DType::kF16;
  std::vector<uint64_t> shape;   // per-block shape; every dimension > 0
  // Index of the dimension that equals the layout's block_tokens (the token
  // axis), or -1 if the shape does not depend on block_tokens (Mamba/linear
  // attention state). WithBlockTokens() rescales this dimension. Not part of
  // the signature, which describes bytes only.
  int32_t token_dim = -1;
  // Elements × dtype size. REQUIRES: the layout passed Validate().
  uint64_t ByteSize() const;

  bool operator==(const TensorSpec&) const = default;
};

// How a quantized layer's per-token states were quantized (MLX-style
// QuantizedKVCache: packed integer data plus per-group scales and biases).
// Part of the signature: two schemes whose tensors have equal shapes (the
// same bits packed differently, another mode) must never read each other's
// blocks. bits = 0 means not quantized, and then group_size and mode are
// empty too.
struct Quantization {
  uint32_t bits = 0;        // 1..8 bits per element
  uint32_t group_size = 0;  // elements sharing one scale/bias, 1..65536
  std::string mode;         // a name: "affine", "mxfp4", ...

  bool enabled() const { return bits != 0; }
  bool operator==(const Quantization&) const = default;
};

struct LayerSpec {
  // Free-form kind recorded in block metadata (`layer_cache_types`):
  // "attention", "quantized_attention", "sliding_window", "mamba", ...
  std::string cache_type = "attention";
  std::vector<TensorSpec> states;  // stored in this order as layer_{i}_state_{k}
  // Default meta state strings recorded per block (`layer_meta_states`),
  // e.g. {"window=4096"} for a sliding window. May be empty.
  std::vector<std::string> meta_state;
  // A sliding-window layer's window: how many most recent tokens (the
  // current one included) its attention sees; 0 = every token. A reader
  // resuming after position p needs only the blocks overlapping
  // [p - window, p) of such a layer (DESIGN.md §4).
  // Part of the signature when non-zero; only on a layer with a per-token
  // state (a recurrent layer has no window).
  uint32_t window = 0;
  // How the layer's K/V are quantized; part of the signature when enabled.
  Quantization quantization;

  // True when every state has token_dim = -1: a recurrent state of constant
  // size per sequence (SSM, linear attention, convolution window), stored
  // per block as the state after the block's last token. A layer may mix
  // per-token and constant-size states (e.g. K/V beside a per-block scalar);
  // it is then a per-token layer whose constant states travel with each of
  // its blocks (docs/layouts.md, "Recurrent states").
  bool IsRecurrent() const;

  bool operator==(const LayerSpec&) const = default;
};

struct ModelLayout {
  std::string name;           // preset or file name; not part of the signature
  uint32_t block_tokens = 0;  // tokens per block, > 0
  std::vector<LayerSpec> layers;

  // Sum of all state tensors' bytes: the data section of one block file.
  uint64_t BlockBytes() const;
  // Number of state tensors over all layers.
  size_t TensorCount() const;

  // Canonical, deterministic signature (grammar in docs/layouts.md), e.g.
  //   kvtier-layout-v1;bt=16;L0-1=attention:keys:F16[2,16,16],values:F16[2,16,16]
  // where a run of consecutive equal layers is written once as L<first>-<last>.
  // A window or a quantization adds `{window=N}` / `{quant=MODE,bits=B,group=G}`
  // after the cache type; layouts without them keep their signature.
  // Independent of `name`, token_dim and meta_state defaults.
  std::string Signature() const;

  // OK, or InvalidArgument naming the bad field ("layers[3].states[1].shape[0]
  // must be > 0"). Checks: block_tokens > 0, at least one layer, each layer
  // has at least one state, dimensions > 0, byte sizes do not overflow and
  // the block is at most 4 GiB, roles and cache types are non-empty
  // [A-Za-z0-9_.-] strings of at most 64 bytes, roles are unique within a
  // layer, shapes have 1 to 8 dimensions, a token_dim names a dimension equal
  // to block_tokens, meta states are UTF-8 of at most 1024 bytes, and there
  // are at most 4096 layers and 4096 state tensors; a window needs a
  // per-token state; a quantization has bits 1..8, group_size 1..65536 and
  // a mode name (or is all zero/empty).
  Status Validate() const;

  // A copy with block_tokens = `block_tokens` and every token dimension
  // (TensorSpec::token_dim) set to it; validated. `block_tokens` = 0 or equal
  // to the current value returns an unchanged copy.
  Result<ModelLayout> WithBlockTokens(uint32_t block_tokens) const;

  bool operator==(const ModelLayout&) const = default;

  // Built-in presets (DESIGN.md §6): "tiny", "qwen2.5-0.5b", "llama3-8b",
  // and real models of the other layer kinds (docs/layouts.md cites their
  // configs): "gpt-oss-20b" (sliding windows), "qwen3-next-80b" (Gated
  // DeltaNet beside attention), "llama3-8b-q4" (4-bit quantized K/V).
  // block_tokens = 0 uses the preset's default.
  static Result<ModelLayout> Preset(std::string_view name, uint32_t block_tokens = 0);
  // Names of the built-in presets.
  static std::vector<std::string> PresetNames();
  // A standard attention layout: `layers` layers of K and V, each
  // [kv_heads, block_tokens, head_dim] of `dtype`.
  static ModelLayout Attention(std::string name, uint32_t layers, uint32_t kv_heads,
                               uint32_t head_dim, DType dtype, uint32_t block_tokens);
  // Parses a layout from JSON text (schema in docs/layouts.md) and validates it.
  static Result<ModelLayout> FromJson(std::string_view json_text);
  // Reads and parses a JSON layout file.
  static Result<ModelLayout> LoadFile(Env* env, const std::string& path);
  // A preset name, or a path ending in ".json". A non-zero `block_tokens`
  // overrides the layout's own (WithBlockTokens()).
  static Result<ModelLayout> Resolve(Env* env, std::string_view preset_or_path,
                                     uint32_t block_tokens = 0);
  // The JSON form FromJson() reads back to an equal layout.
  std::string ToJson() const;
};

}  // namespace kvtier

#endif  // KVTIER_LAYOUT_H_
