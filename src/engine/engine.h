// Engine: the reference engine's forward pass over a BlockPool.
//
// Prefill(seq, tokens) asks the pool for the longest reusable prefix
// (BlockPool::AllocateAsync: the sequence's own earlier tokens, shared pool
// blocks, blocks loaded from the lower tiers), computes only the rest in
// chunks, and returns the logits after the last token. Decode(seq, token)
// feeds one more token. For every attention or sliding layer the engine
// writes the new tokens' K/V into the pool (AppendLayer, rounded to the
// layout's dtype or quantized) and then reads the K/V it attends to back
// through the sequence's block table (BlockTable, SlotAddress,
// TensorGeometry): every position for full attention, only the window for a
// sliding layer. A linear layer resumes from the pool's recurrent state
// (RecurrentState), runs its recurrence token by token and hands the pool
// the state after every block boundary it crosses and after the chunk
// (SetRecurrentState). Fresh and cached values take the same path, in the
// same order, through the same kernels (kernels.h), so the logits are bit
// for bit the same with and without a cached prefix.
//
// The pool must be in paged mode with the model's layout
// (ModelConfig::KvLayout with any block_tokens).
//
// Ownership: the Model and the BlockPool are not owned and must outlive the
// engine. Thread safety: an Engine is used by one thread at a time; its math
// is single-threaded. Several engines may share a Model and a pool.
#ifndef KVTIER_ENGINE_ENGINE_H_
#define KVTIER_ENGINE_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/model.h"
#include "kvtier/block_pool.h"
#include "kvtier/status.h"

namespace kvtier {
class Env;
}  // namespace kvtier

namespace kvtier::engine {

struct EngineOptions {
  // Most tokens computed together in a prefill (bounds scratch memory; the
  // chunking changes no result). > 0. Default 256.
  uint32_t prefill_chunk = 256;
  // Clock for the timings in PrefillResult. Null: Env::Default(). Not owned.
  Env* env = nullptr;
};

struct PrefillResult {
  size_t prompt_tokens = 0;
  // Tokens whose K/V the pool supplied (final, after any lower-tier load).
  size_t reused_tokens = 0;
  // prompt_tokens − reused_tokens: what this call computed.
  size_t computed_tokens = 0;
  // The sequence was live in the pool before the call (its own tokens were
  // reused, rolled back to the common prefix with `tokens`).
  bool continued = false;
  // What AllocateAsync reported (for a new or restored sequence).
  AllocateInfo allocate;
  // Microseconds: in Allocate (including waiting for lower-tier loads), and
  // computing the remaining tokens and the logits.
  uint64_t allocate_micros = 0;
  uint64_t compute_micros = 0;
  // Logits after the last prompt token (vocab floats).
  std::vector<float> logits;
};

class Engine {
 public:
  // InvalidArgument if the pool's geometry is not the model's layout, or
  // for bad options.
  static Result<std::unique_ptr<Engine>> Create(const Model* model, BlockPool* pool,
                                                EngineOptions options = {});
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Makes sequence `seq` hold `tokens` (reusing what the pool can supply)
  // and returns the logits after the last one. InvalidArgument for an empty
  // prompt or a token ≥ vocab (naming its position); the pool's errors
  // (e.g. ResourceExhausted when out of slots) otherwise.
  Result<PrefillResult> Prefill(uint64_t seq, std::span<const uint32_t> tokens);

  // Appends `token` to live sequence `seq` and returns the logits after it.
  Result<std::vector<float>> Decode(uint64_t seq, uint32_t token);

  uint32_t block_tokens() const { return block_tokens_; }
  const Model& model() const { return *model_; }

 private:
  // Where one state tensor lies in a slot.
  struct StateAt {
    uint64_t offset = 0;
    uint64_t bytes = 0;
    DType dtype = DType::kF16;
  };
  struct Scratch;

  Engine(const Model* model, BlockPool* pool, EngineOptions options, uint32_t block_tokens,
         std::vector<std::vector<StateAt>> states);

  Status CheckTokens(std::span<const uint32_t> tokens) const;
  // Computes tokens at positions [start, start + tokens.size()) of `seq`,
  // committing them; when `logits` is set, fills it with the logits after
  // the last one.
  Status Forward(uint64_t seq, size_t start, std::span<const uint32_t> tokens,
                 std::vector<float>* logits);
  // Layer `l`'s token mixer for the chunk's n tokens at positions
  // [pos0, pos0 + n): normed input in scratch h, queries etc. computed here,
  // output (before the output projection) in scratch attn.
  Status AttentionMixer(uint64_t seq, uint32_t l, size_t pos0, size_t n);
  Status LinearMixer(uint64_t seq, uint32_t l, size_t pos0, size_t n);
  // Writes scratch k/v (n tokens, [n, kv_heads × head_dim]) into the pool
  // as layer l's states.
  Status AppendKv(uint64_t seq, uint32_t l, size_t pos0, size_t n);
  // Reads K and V of positions [first, len) of `layer` through the block
  // table into scratch k_all / v_all as f32 [kv_heads, len, head_dim]
  // (positions before `first` are left as they are).
  Status GatherKv(uint64_t seq, uint32_t layer, size_t first, size_t len);

  const Model* model_;
  BlockPool* pool_;
  const EngineOptions options_;
  Env* const env_;
  const uint32_t block_tokens_;
  const std::vector<std::vector<StateAt>> states_;  // [layer][state]
  std::unique_ptr<Scratch> scratch_;
};

// The index of the largest logit (the first one on ties); 0 if empty.
uint32_t Argmax(std::span<const float> logits);

// True if both hold the same floats bit for bit (so NaN payloads and the
// sign of zero count).
bool BitIdentical(std::span<const float> a, std::span<const float> b);

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_ENGINE_H_
