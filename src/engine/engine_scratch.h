// Engine::Scratch: the engine's buffers, reused across calls (resized,
// never shrunk). Shared by engine.cc (the forward loop) and
// engine_mixers.cc (the token mixers). Internal to src/engine.
#ifndef KVTIER_ENGINE_ENGINE_SCRATCH_H_
#define KVTIER_ENGINE_ENGINE_SCRATCH_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/engine.h"

namespace kvtier::engine {

struct Engine::Scratch {
  std::vector<float> x, h, q, k, v, attn, proj, gate, up, act;
  std::vector<float> cos, sin, scores;
  std::vector<float> k_all, v_all;  // [kv_heads, len, head_dim]
  std::vector<float> state;         // a linear layer's [kv_heads, head_dim, head_dim]
  std::vector<float> decay;         // [n, kv_heads]
  std::vector<std::byte> bytes;     // states being appended, back to back
  std::vector<float> row;           // one [n, head_dim] head slice before conversion
  std::vector<uint8_t> quant;       // quantized data of one slice
  std::vector<uint16_t> scales, biases;
};

template <typename T>
void Fit(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_ENGINE_SCRATCH_H_
