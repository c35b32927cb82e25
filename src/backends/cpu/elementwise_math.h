// backends/cpu/elementwise_math.h — float32 exp/sigmoid/tanh/erf written as branch-free arithmetic
// so loops calling them auto-vectorize (libm calls do not). Accuracy: a few ulp for exp, sigmoid and
// tanh; erf within 3e-7 absolute. NaN propagates.
// Always inlined: a loop calling them vectorizes only if they are inlined into it, and GCC's own
// inlining budget left exp_f32 out of line in the instantiation of the fused epilogues that the
// linker kept, so GELU after a MatMul ran element by element (Swin-T's 3136 x 384 FFN output:
// 14 ms of epilogue after a 2 ms MatMul, against 1 ms inlined).
#pragma once

#include <bit>
#include <cstdint>

namespace kiln::cpu::math {

// exp's range reduction and polynomial (exp_f32 here, the vector copies of sigmoid_simd.h): x = n ln2
// + r with ln2 = kLn2Hi - kLn2Lo in two parts (kLn2Hi exact in few bits, so n * kLn2Hi is exact), then
// exp(r) ~ 1 + r + r^2 p(r) with p's coefficients from the highest power down.
inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f, kLn2Lo = 2.12194440e-4f;
inline constexpr float kExpPoly[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                                      4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

[[gnu::always_inline]] inline float exp_f32(float x) {
  // NaN computes on 0 (converting NaN to int is undefined) and is returned as itself at the end.
  const float xs = x != x ? 0.0f : x;
  const float xc = xs < -104.0f ? -104.0f : (xs > 88.8f ? 88.8f : xs);
  // n = round(x / ln2) by the 1.5 * 2^23 trick (round to nearest even, vectorizable).
  const float nf = (xc * kLog2e + 12582912.0f) - 12582912.0f;
  const float r = (xc - nf * kLn2Hi) + nf * kLn2Lo;
  float p = kExpPoly[0];
  p = p * r + kExpPoly[1];
  p = p * r + kExpPoly[2];
  p = p * r + kExpPoly[3];
  p = p * r + kExpPoly[4];
  p = p * r + kExpPoly[5];
  p = p * r * r + r + 1.0f;
  // 2^n in two factors so results reach the subnormal range and overflow to inf naturally.
  const int32_t n = static_cast<int32_t>(nf);
  const int32_t n1 = n >> 1, n2 = n - n1;
  const float y = p * std::bit_cast<float>((n1 + 127) << 23) * std::bit_cast<float>((n2 + 127) << 23);
  return x != x ? x : y;
}

// y[k] = exp(x[k] - max(x)) over a row of n > 0 values (y may be x); returns the sum of the y and sets
// *mx. The max and the sum are vector reductions (omp simd lets them reassociate; a scalar sum is one
// dependent add per element). A NaN anywhere makes the sum NaN either way (exp of NaN - mx, or of
// x - NaN). Softmax's rows and the attention kernel's score rows.
[[gnu::always_inline]] inline float exp_row_f32(const float* x, float* y, int64_t n, float* mx_out) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int64_t k = 1; k < n; ++k) mx = x[k] > mx ? x[k] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t k = 0; k < n; ++k) {
    y[k] = exp_f32(x[k] - mx);
    sum += y[k];
  }
  *mx_out = mx;
  return sum;
}

[[gnu::always_inline]] inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

[[gnu::always_inline]] inline float tanh_f32(float x) {
  const float a = x < 0 ? -x : x;
  // Small |x|: odd Taylor series (error < 1e-8 relative below 0.25).
  const float x2 = x * x;
  float p = 62.0f / 2835.0f;
  p = p * x2 - 17.0f / 315.0f;
  p = p * x2 + 2.0f / 15.0f;
  p = p * x2 - 1.0f / 3.0f;
  const float small = x + x * x2 * p;
  const float e = exp_f32(2.0f * (a > 9.0f ? 9.0f : a));
  float big = 1.0f - 2.0f / (e + 1.0f);
  big = a > 9.0f ? 1.0f : big;
  big = x < 0 ? -big : big;
  const float y = a < 0.25f ? small : big;
  return x != x ? x : y;
}

[[gnu::always_inline]] inline float erf_f32(float x) {
  const float a = x < 0 ? -x : x;
  // |x| < 0.5: Maclaurin series of erf.
  const float x2 = x * x;
  float s = -1.0f / 1320.0f;
  s = s * x2 + 1.0f / 216.0f;
  s = s * x2 - 1.0f / 42.0f;
  s = s * x2 + 1.0f / 10.0f;
  s = s * x2 - 1.0f / 3.0f;
  s = s * x2 + 1.0f;
  const float small = 1.12837916709551257f * x * s;
  // Otherwise Abramowitz & Stegun 7.1.26.
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float q = 1.061405429f;
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  float big = 1.0f - q * t * exp_f32(-a * a);
  big = x < 0 ? -big : big;
  const float y = a < 0.5f ? small : big;
  return x != x ? x : y;
}

}  // namespace kiln::cpu::math
