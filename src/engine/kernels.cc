#include "engine/kernels.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>

namespace kvtier::engine {

namespace {

uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

float BitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// Clears the upper halves of the vector registers (vzeroupper) on a CPU with
// AVX. The kernels below are SSE code that calls libm's expf, which glibc runs
// as VEX (AVX/FMA) code; while anything has left those upper halves dirty,
// every switch between the two costs a state transition or a false dependency
// on the whole register. On this project's machine (an AVX-512 Xeon guest,
// release build) the default `kvtier demo` computed its first request's 1,588
// tokens in 5,328 ms (1,319 ms with this) against 960 ms in a process whose
// state happened to be clean (`--remote`), with expf and SoftmaxInPlace 73% of
// the samples; who dirties the state (not kvtier: it has no AVX code) is
// outside the process's control, so the kernels start clean. Changes no result.
void StartWithCleanUpperState() {
#if defined(__x86_64__)
  static const bool avx = __builtin_cpu_supports("avx");
  if (avx) asm volatile("vzeroupper");
#endif
}

}  // namespace

uint16_t FloatToHalf(float f) {
  const uint32_t x = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (mant != 0 ? 0x200u | (mant >> 13) : 0u));
  }
  const int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow
  if (e <= 0) {
    // Subnormal half (or zero): shift the full significand right.
    if (e < -10) return sign;  // below half the smallest subnormal
    mant |= 0x800000u;
    const uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u) != 0)) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  // A carry out of the mantissa correctly bumps the exponent (up to inf).
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u) != 0)) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return BitsFloat(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return BitsFloat(sign);
    // Subnormal: normalise.
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    return BitsFloat(sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13));
  }
  return BitsFloat(sign | ((exp + 127 - 15) << 23) | (mant << 13));
}

uint16_t FloatToBFloat16(float f) {
  const uint32_t x = FloatBits(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0) {
    return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  const uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

float BFloat16ToFloat(uint16_t h) { return BitsFloat(static_cast<uint32_t>(h) << 16); }

bool IsKvDType(DType dtype) {
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
}

void StoreAs(DType dtype, std::span<const float> src, std::byte* dst) {
  assert(IsKvDType(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(dst, src.data(), src.size_bytes());
    return;
  }
  const bool half = dtype == DType::kF16;
  for (size_t i = 0; i < src.size(); ++i) {
    const uint16_t v = half ? FloatToHalf(src[i]) : FloatToBFloat16(src[i]);
    std::memcpy(dst + 2 * i, &v, 2);
  }
}

void LoadFrom(DType dtype, const std::byte* src, std::span<float> dst) {
  assert(IsKvDType(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(dst.data(), src, dst.size_bytes());
    return;
  }
  const bool half = dtype == DType::kF16;
  for (size_t i = 0; i < dst.size(); ++i) {
    uint16_t v;
    std::memcpy(&v, src + 2 * i, 2);
    dst[i] = half ? HalfToFloat(v) : BFloat16ToFloat(v);
  }
}

float Dot(const float* a, const float* b, size_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (size_t j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

void MatMul(const float* w, size_t rows, size_t cols, const float* x, size_t batch, float* out) {
  StartWithCleanUpperState();
  // Rows in the outer loop keep one weight row hot for the whole batch; each
  // output is still one Dot, so the order of loops changes no bits.
  for (size_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    for (size_t t = 0; t < batch; ++t) out[t * rows + r] = Dot(wr, x + t * cols, cols);
  }
}

void RmsNorm(const float* x, const float* weight, size_t n, float eps, float* out) {
  const float ms = Dot(x, x, n) / static_cast<float>(n);
  const float inv = 1.0f / std::sqrt(ms + eps);
  for (size_t i = 0; i < n; ++i) out[i] = (x[i] * inv) * weight[i];
}

void ApplyRope(float* vec, size_t head_dim, const float* cos, const float* sin) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const float a = vec[i], b = vec[i + half];
    vec[i] = a * cos[i] - b * sin[i];
    vec[i + half] = b * cos[i] + a * sin[i];
  }
}

void RopeAngles(size_t position, size_t head_dim, double theta, float* cos, float* sin) {
  const size_t half = head_dim / 2;
  for (size_t i = 0; i < half; ++i) {
    const double inv_freq =
        std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    const double angle = static_cast<double>(position) * inv_freq;
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void SoftmaxInPlace(float* x, size_t n) {
  if (n == 0) return;
  StartWithCleanUpperState();
  float mx = x[0];
  for (size_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  float sum = 0;
  for (size_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - mx);
    sum += x[i];
  }
  const float inv = 1.0f / sum;
  for (size_t i = 0; i < n; ++i) x[i] *= inv;
}

float Silu(float x) { return x / (1.0f + std::exp(-x)); }

void AttendHead(const float* q, const float* keys, const float* values, size_t first, size_t last,
                size_t d, float scale, float* scores, float* out) {
  StartWithCleanUpperState();
  const size_t n = last + 1 - first;
  for (size_t j = 0; j < n; ++j) scores[j] = Dot(q, keys + (first + j) * d, d) * scale;
  SoftmaxInPlace(scores, n);
  std::fill(out, out + d, 0.0f);
  for (size_t j = 0; j < n; ++j) {
    const float wj = scores[j];
    const float* vj = values + (first + j) * d;
    for (size_t e = 0; e < d; ++e) out[e] += wj * vj[e];
  }
}

float DecayGate(float x) { return 0.75f + 0.2f * (x / (1.0f + std::fabs(x))); }

void LinearStateUpdate(float* state, const float* k, const float* v, float g, size_t dk,
                       size_t dv) {
  for (size_t i = 0; i < dk; ++i) {
    float* row = state + i * dv;
    const float ki = k[i];
    for (size_t j = 0; j < dv; ++j) row[j] = g * row[j] + ki * v[j];
  }
}

void LinearStateRead(const float* q, const float* state, size_t dk, size_t dv, float* out) {
  std::fill(out, out + dv, 0.0f);
  for (size_t i = 0; i < dk; ++i) {
    const float qi = q[i];
    const float* row = state + i * dv;
    for (size_t j = 0; j < dv; ++j) out[j] += qi * row[j];
  }
}

void QuantizeAffine8(const float* x, size_t n, size_t group, uint8_t* q, uint16_t* scales,
                     uint16_t* biases) {
  for (size_t g0 = 0, gi = 0; g0 < n; g0 += group, ++gi) {
    float mn = x[g0], mx = x[g0];
    for (size_t i = g0 + 1; i < g0 + group; ++i) {
      mn = std::min(mn, x[i]);
      mx = std::max(mx, x[i]);
    }
    biases[gi] = FloatToHalf(mn);
    const float bias = HalfToFloat(biases[gi]);
    scales[gi] = FloatToHalf((mx - bias) / 255.0f);
    const float scale = HalfToFloat(scales[gi]);
    for (size_t i = g0; i < g0 + group; ++i) {
      float r = 0.0f;
      if (scale > 0.0f && std::isfinite(scale)) r = std::floor((x[i] - bias) / scale + 0.5f);
      // NaN compares false both ways and lands on 0.
      q[i] = static_cast<uint8_t>(r >= 255.0f ? 255.0f : (r > 0.0f ? r : 0.0f));
    }
  }
}

void DequantizeAffine8(const uint8_t* q, const uint16_t* scales, const uint16_t* biases, size_t n,
                       size_t group, float* out) {
  for (size_t i = 0; i < n; ++i) {
    const size_t gi = i / group;
    out[i] = HalfToFloat(biases[gi]) + HalfToFloat(scales[gi]) * static_cast<float>(q[i]);
  }
}

}  // namespace kvtier::engine
