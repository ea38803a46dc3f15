#include "engine/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace kvtier::engine {
namespace {

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(HalfTest, KnownValues) {
  EXPECT_EQ(FloatToHalf(0.0f), 0x0000);
  EXPECT_EQ(FloatToHalf(-0.0f), 0x8000);
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(-2.0f), 0xc000);
  EXPECT_EQ(FloatToHalf(0.333251953125f), 0x3555);
  EXPECT_EQ(FloatToHalf(65504.0f), 0x7bff);  // largest finite
  EXPECT_EQ(FloatToHalf(65519.0f), 0x7bff);  // rounds down
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // halfway: rounds to even = inf
  EXPECT_EQ(FloatToHalf(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -14)), 0x0400);             // smallest normal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -24)), 0x0001);             // smallest subnormal
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);             // tie: even (zero)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);             // above the tie
  EXPECT_EQ(FloatToHalf(std::ldexp(3.0f, -25)), 0x0002);             // tie 1.5 units: even (2)
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie: even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie: even
  EXPECT_EQ(FloatToHalf(1e-10f), 0x0000);
  const uint16_t nan = FloatToHalf(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(HalfToFloat(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(HalfToFloat(0xfbff), -65504.0f);
  EXPECT_EQ(Bits(HalfToFloat(0x8000)), 0x80000000u);
}

TEST(HalfTest, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = HalfToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(HalfToFloat(FloatToHalf(f)))) << h;
      continue;
    }
    ASSERT_EQ(FloatToHalf(f), h) << "half 0x" << std::hex << h;
  }
}

TEST(BFloat16Test, KnownValuesAndRoundTrip) {
  EXPECT_EQ(FloatToBFloat16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(-2.0f), 0xc000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: even (1).
  EXPECT_EQ(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = BFloat16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBFloat16(f), h) << h;
  }
}

TEST(StoreLoadTest, ConvertsEachDType) {
  const std::vector<float> src = {1.0f, -0.5f, 3.140625f, 0.0f, 1024.0f};
  for (DType dt : {DType::kF32, DType::kF16, DType::kBF16}) {
    std::vector<std::byte> bytes(src.size() * DTypeSize(dt));
    StoreAs(dt, src, bytes.data());
    std::vector<float> back(src.size());
    LoadFrom(dt, bytes.data(), back);
    EXPECT_EQ(back, src) << DTypeName(dt);  // all exactly representable
  }
  std::vector<std::byte> bytes(2);
  StoreAs(DType::kF16, std::vector<float>{1.0f}, bytes.data());
  EXPECT_EQ(bytes[0], std::byte{0x00});  // little-endian 0x3c00
  EXPECT_EQ(bytes[1], std::byte{0x3c});
  EXPECT_FALSE(IsKvDType(DType::kI8));
}

TEST(DotTest, SumsInTheDocumentedOrder) {
  // Two chunks of eight plus a tail of three. Lane 0 holds 2^24, where a +1
  // vanishes (2^24 + 1 rounds back to 2^24); the documented order loses one
  // such +1 only, a left-to-right sum loses all of them.
  std::vector<float> a(19, 1.0f), b(19, 1.0f);
  a[0] = 16777216.0f;
  const float got = Dot(a.data(), b.data(), a.size());
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (size_t i = 0; i < 16; ++i) acc[i % 8] += a[i] * b[i];
  float tail = 0;
  for (size_t i = 16; i < 19; ++i) tail += a[i] * b[i];
  const float want =
      (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
  EXPECT_EQ(Bits(got), Bits(want));
  EXPECT_EQ(got, 16777232.0f);  // 2^24 + 16: the lane-0 +1 lost, the rest paired into evens
  float naive = 0;
  for (size_t i = 0; i < a.size(); ++i) naive += a[i] * b[i];
  EXPECT_NE(Bits(got), Bits(naive));
  EXPECT_EQ(Dot(a.data(), b.data(), 0), 0.0f);
  std::vector<float> small = {1, 2, 3};
  EXPECT_EQ(Dot(small.data(), small.data(), 3), 14.0f);
}

TEST(MatMulTest, BatchRowsEqualSingleRows) {
  const size_t rows = 5, cols = 19, batch = 4;
  std::vector<float> w(rows * cols), x(batch * cols);
  for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i)) * 0.7f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(static_cast<float>(i) * 1.3f);
  std::vector<float> out(batch * rows), one(rows);
  MatMul(w.data(), rows, cols, x.data(), batch, out.data());
  for (size_t t = 0; t < batch; ++t) {
    MatMul(w.data(), rows, cols, x.data() + t * cols, 1, one.data());
    EXPECT_EQ(std::memcmp(one.data(), out.data() + t * rows, rows * sizeof(float)), 0) << t;
    for (size_t r = 0; r < rows; ++r) {
      EXPECT_EQ(Bits(out[t * rows + r]), Bits(Dot(w.data() + r * cols, x.data() + t * cols, cols)));
    }
  }
}

TEST(RmsNormTest, ExactOnSimpleInput) {
  const std::vector<float> x = {2, -2, 2, -2}, w = {1, 2, 0.5f, 1};
  std::vector<float> out(4);
  RmsNorm(x.data(), w.data(), 4, 0.0f, out.data());
  EXPECT_EQ(out, (std::vector<float>{1, -2, 0.5f, -1}));
}

TEST(RopeTest, PositionZeroIsIdentityAndRotationKeepsNorm) {
  std::vector<float> c(4), s(4);
  RopeAngles(0, 8, 10000.0, c.data(), s.data());
  EXPECT_EQ(c, std::vector<float>(4, 1.0f));
  EXPECT_EQ(s, std::vector<float>(4, 0.0f));
  std::vector<float> v = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<float> orig = v;
  ApplyRope(v.data(), 8, c.data(), s.data());
  EXPECT_EQ(v, orig);
  // Position 1, pair 0 turns by exactly 1 radian.
  RopeAngles(1, 8, 10000.0, c.data(), s.data());
  EXPECT_EQ(c[0], static_cast<float>(std::cos(1.0)));
  EXPECT_EQ(s[0], static_cast<float>(std::sin(1.0)));
  ApplyRope(v.data(), 8, c.data(), s.data());
  EXPECT_EQ(v[0], orig[0] * c[0] - orig[4] * s[0]);
  EXPECT_EQ(v[4], orig[4] * c[0] + orig[0] * s[0]);
}

TEST(SoftmaxTest, UniformAndShifted) {
  std::vector<float> x = {3, 3, 3, 3};
  SoftmaxInPlace(x.data(), 4);
  EXPECT_EQ(x, std::vector<float>(4, 0.25f));
  std::vector<float> y = {1000.0f, 0.0f};  // no overflow: max is subtracted
  SoftmaxInPlace(y.data(), 2);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_EQ(Silu(0.0f), 0.0f);
}

// Sliding-window attention is softmax attention over the window only: the
// same bits as full attention over a copy holding just the window.
TEST(AttendHeadTest, WindowEqualsAttentionOverTheWindowAlone) {
  const size_t d = 8, len = 13, window = 5, p = 11;
  std::vector<float> q(d), keys(len * d), values(len * d);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
  for (size_t i = 0; i < keys.size(); ++i) {
    keys[i] = 0.125f * static_cast<float>((i * 7) % 11) - 0.6f;
    values[i] = 0.0625f * static_cast<float>((i * 5) % 13) - 0.4f;
  }
  const size_t first = p + 1 - window;
  std::vector<float> scores(len), out(d), want(d), want_scores(len);
  AttendHead(q.data(), keys.data(), values.data(), first, p, d, 0.5f, scores.data(), out.data());
  AttendHead(q.data(), keys.data() + first * d, values.data() + first * d, 0, window - 1, d, 0.5f,
             want_scores.data(), want.data());
  EXPECT_EQ(0, std::memcmp(out.data(), want.data(), d * sizeof(float)));
  // The weights are the window's softmax and sum to 1; tokens before the
  // window change nothing.
  float sum = 0;
  for (size_t j = 0; j < window; ++j) sum += scores[j];
  EXPECT_NEAR(sum, 1.0f, 1e-6f);
  keys[0] = 100.0f;
  values[d] = -100.0f;
  std::vector<float> again(d);
  AttendHead(q.data(), keys.data(), values.data(), first, p, d, 0.5f, scores.data(), again.data());
  EXPECT_EQ(0, std::memcmp(out.data(), again.data(), d * sizeof(float)));
  // A window of one token returns that token's value exactly.
  AttendHead(q.data(), keys.data(), values.data(), p, p, d, 0.5f, scores.data(), out.data());
  EXPECT_EQ(0, std::memcmp(out.data(), values.data() + p * d, d * sizeof(float)));
}

TEST(DecayGateTest, StaysInsideItsRange) {
  EXPECT_EQ(DecayGate(0.0f), 0.75f);
  EXPECT_EQ(DecayGate(1.0f), 0.85f);
  EXPECT_EQ(DecayGate(-1.0f), 0.65f);
  for (float x : {-1e30f, -1e6f, -3.0f, 0.5f, 7.0f, 1e6f, 1e30f}) {
    EXPECT_GT(DecayGate(x), 0.55f - 1e-6f) << x;
    EXPECT_LT(DecayGate(x), 0.95f + 1e-6f) << x;
  }
  EXPECT_LT(DecayGate(-2.0f), DecayGate(-1.0f));
  EXPECT_LT(DecayGate(1.0f), DecayGate(2.0f));
}

TEST(LinearStateTest, UpdateAndReadByHand) {
  // S = 0.5·S + k vᵀ with dk = 2, dv = 3, then o = q S.
  std::vector<float> state = {1, 2, 3, 4, 5, 6};
  const float k[2] = {1, -2}, v[3] = {0.5f, 1, 2}, q[2] = {2, 1};
  LinearStateUpdate(state.data(), k, v, 0.5f, 2, 3);
  EXPECT_EQ(state, (std::vector<float>{1.0f, 2.0f, 3.5f, 1.0f, 0.5f, -1.0f}));
  float out[3];
  LinearStateRead(q, state.data(), 2, 3, out);
  EXPECT_EQ(out[0], 3.0f);
  EXPECT_EQ(out[1], 4.5f);
  EXPECT_EQ(out[2], 6.0f);
}

// What the engine relies on: the state after n steps, stored and resumed,
// gives the same outputs bit for bit as running all steps at once.
TEST(LinearStateTest, ResumedStateGivesTheSameBits) {
  const size_t d = 8, steps = 20, cut = 13;
  std::vector<float> k(steps * d), v(steps * d), q(steps * d), g(steps);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.3f * static_cast<float>((i * 13) % 17) - 2.1f;
    v[i] = 0.2f * static_cast<float>((i * 7) % 19) - 1.7f;
    q[i] = 0.1f * static_cast<float>((i * 3) % 23) - 1.1f;
  }
  for (size_t t = 0; t < steps; ++t) g[t] = DecayGate(static_cast<float>(t) * 0.37f - 3.0f);
  auto run = [&](std::vector<float>& state, size_t from, size_t to, std::vector<float>& outs) {
    for (size_t t = from; t < to; ++t) {
      LinearStateUpdate(state.data(), k.data() + t * d, v.data() + t * d, g[t], d, d);
      LinearStateRead(q.data() + t * d, state.data(), d, d, outs.data() + t * d);
    }
  };
  std::vector<float> whole(d * d, 0.0f), outs_whole(steps * d), outs_split(steps * d);
  run(whole, 0, steps, outs_whole);
  std::vector<float> first(d * d, 0.0f);
  run(first, 0, cut, outs_split);
  std::vector<std::byte> stored(d * d * sizeof(float));
  std::memcpy(stored.data(), first.data(), stored.size());
  std::vector<float> resumed(d * d);
  std::memcpy(resumed.data(), stored.data(), stored.size());
  run(resumed, cut, steps, outs_split);
  EXPECT_EQ(0, std::memcmp(outs_whole.data(), outs_split.data(), outs_whole.size() * 4));
  EXPECT_EQ(0, std::memcmp(whole.data(), resumed.data(), whole.size() * 4));
}

TEST(QuantizeTest, Affine8KnownValuesAndErrorBound) {
  // One group of 4: min 0, max 2.55 → bias 0, scale F16(0.01).
  const float x[4] = {0.0f, 1.0f, 2.55f, 0.004f};
  uint8_t q[4];
  uint16_t scale, bias;
  QuantizeAffine8(x, 4, 4, q, &scale, &bias);
  EXPECT_EQ(bias, FloatToHalf(0.0f));
  EXPECT_EQ(scale, FloatToHalf(0.01f));
  EXPECT_EQ(q[0], 0);
  EXPECT_EQ(q[2], 255);
  EXPECT_EQ(q[3], 0);
  // A constant group: scale 0, every q 0, dequantized to the F16 bias.
  const float flat[4] = {1.5f, 1.5f, 1.5f, 1.5f};
  QuantizeAffine8(flat, 4, 4, q, &scale, &bias);
  EXPECT_EQ(scale, 0);
  float back[4];
  DequantizeAffine8(q, &scale, &bias, 4, 4, back);
  for (float b : back) EXPECT_EQ(b, 1.5f);
  // Two groups of 8 over a ramp: each value within one step of its group.
  std::vector<float> ramp(16), out(16);
  for (size_t i = 0; i < 16; ++i) ramp[i] = static_cast<float>(i) * 0.37f - 2.0f;
  std::vector<uint8_t> q2(16);
  uint16_t scales[2], biases[2];
  QuantizeAffine8(ramp.data(), 16, 8, q2.data(), scales, biases);
  DequantizeAffine8(q2.data(), scales, biases, 16, 8, out.data());
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_LE(std::fabs(out[i] - ramp[i]), HalfToFloat(scales[i / 8]) + 1e-3f) << i;
  }
  EXPECT_EQ(q2[0], 0);
  EXPECT_EQ(q2[8], 0);
  // Quantizing the dequantized values again is a fixed point: a cached
  // token's K/V read back are what a fresh token's read back are.
  std::vector<uint8_t> q3(16);
  uint16_t scales3[2], biases3[2];
  QuantizeAffine8(ramp.data(), 16, 8, q3.data(), scales3, biases3);
  EXPECT_EQ(q2, q3);
  EXPECT_EQ(0, std::memcmp(scales, scales3, sizeof(scales)));
}

}  // namespace
}  // namespace kvtier::engine
