// Numeric kernels of the reference engine: dot products, row-major matrix
// times a batch of vectors, RMSNorm, rotary embeddings, softmax, SiLU,
// causal attention of one head (full or over a sliding window), gated linear
// attention steps, conversions between f32 and the K/V storage dtypes (F16,
// BF16, F32) and 8-bit affine quantization of K/V.
//
// Determinism is the point. Every reduction runs in one fixed order that
// does not depend on the batch size, the position of a row in the batch or
// the call site, so the engine computes token i's values bit for bit the
// same whether token i is part of a long prefill or decoded on its own.
// (The engine's library is built with -ffp-contract=off so that no multiply
// and add are fused in one place and not in another.) Single-threaded.
//
// Thread safety: pure functions on caller-owned memory.
#ifndef KVTIER_ENGINE_KERNELS_H_
#define KVTIER_ENGINE_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <span>

#include "kvtier/layout.h"

namespace kvtier::engine {

// IEEE binary16 bits of `f`, rounded to nearest even; overflow gives ±inf,
// NaN stays NaN (quiet).
uint16_t FloatToHalf(float f);
// Exact value of binary16 bits `h` (subnormals included).
float HalfToFloat(uint16_t h);
// bfloat16 bits of `f`, rounded to nearest even; NaN stays NaN (quiet).
uint16_t FloatToBFloat16(float f);
float BFloat16ToFloat(uint16_t h);

// Whether the engine stores K/V of this dtype (F32, F16, BF16).
bool IsKvDType(DType dtype);
// Writes src[i] converted to `dtype` at dst + i × DTypeSize(dtype).
// REQUIRES: IsKvDType(dtype); dst holds src.size() elements.
void StoreAs(DType dtype, std::span<const float> src, std::byte* dst);
// Reads n elements of `dtype` at src into dst (n = dst.size()).
// REQUIRES: IsKvDType(dtype).
void LoadFrom(DType dtype, const std::byte* src, std::span<float> dst);

// Σ a[i]·b[i] in a fixed order: eight interleaved partial sums over the
// first n − n mod 8 elements, the tail summed separately, then combined in a
// fixed tree.
float Dot(const float* a, const float* b, size_t n);

// out[t][r] = Dot(w row r, x[t]) for t < batch, r < rows.
// w is [rows, cols] row-major, x [batch, cols], out [batch, rows].
void MatMul(const float* w, size_t rows, size_t cols, const float* x, size_t batch, float* out);

// out = x / sqrt(mean(x²) + eps) ⊙ weight, n elements. out may equal x.
void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out);

// Rotates `vec` (head_dim elements, the "rotate half" pairing (i, i + d/2)
// of Llama) by the angles whose cos/sin are given, d/2 each.
void ApplyRope(float* vec, size_t head_dim, const float* cos, const float* sin);

// cos/sin of position × theta^(−2i/d) for i < d/2, computed in double and
// rounded once to float.
void RopeAngles(size_t position, size_t head_dim, double theta, float* cos, float* sin);

// Replaces x[0..n) with softmax(x): max, exp(x − max), sum in index order,
// divide.
void SoftmaxInPlace(float* x, size_t n);

// x · sigmoid(x).
float Silu(float x);

// One query head's causal attention over positions [first, last] (both
// included): out[0..d) = Σ_j softmax_j(Dot(q, k_j) · scale) · v_j, with k_j
// at keys + j·d and v_j at values + j·d (absolute positions). Scores are
// written to scores[0..last − first]; the sum runs in position order. Full
// attention is first = 0; a sliding window of w tokens is first =
// max(0, last + 1 − w).
void AttendHead(const float* q, const float* keys, const float* values, size_t first, size_t last,
                size_t d, float scale, float* scores, float* out);

// The decay gate of gated linear attention, in (0.55, 0.95) for every
// finite x: 0.75 + 0.2 · x / (1 + |x|). Rational, so correctly rounded basic
// operations give the same bits everywhere (no exp as in a sigmoid).
float DecayGate(float x);

// One token's update of a linear-attention state S [dk, dv] (row-major):
// S[i][j] = g · S[i][j] + k[i] · v[j].
void LinearStateUpdate(float* state, const float* k, const float* v, float g, size_t dk, size_t dv);

// out[j] = Σ_i q[i] · S[i][j] for j < dv, summed over i in index order.
void LinearStateRead(const float* q, const float* state, size_t dk, size_t dv, float* out);

// 8-bit affine quantization in groups of `group` elements (MLX's affine
// mode with bits = 8): per group, bias = its minimum and scale = (max −
// bias) / 255, both rounded to F16 (the stored bits); q = round((x − bias) /
// scale) clamped to 0..255 (0 when scale is 0). n is a multiple of group;
// scales and biases hold n / group F16 bit patterns.
void QuantizeAffine8(const float* x, size_t n, size_t group, uint8_t* q, uint16_t* scales,
                     uint16_t* biases);
// out[i] = bias + scale · q[i] of i's group.
void DequantizeAffine8(const uint8_t* q, const uint16_t* scales, const uint16_t* biases, size_t n,
                       size_t group, float* out);

}  // namespace kvtier::engine

#endif  // KVTIER_ENGINE_KERNELS_H_
