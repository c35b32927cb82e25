// backends/cpu/sigmoid_simd.h — the fused epilogues' Sigmoid and SiLU (x · sigmoid(x)) with AVX-512 and
// AVX2 intrinsics (fused_common.h's epilogue_rows picks them on those CPUs).
//
// Why not the auto-vectorized exp_f32 + division of elementwise_math.h: that loop costs ~40
// instructions and a full-precision vector division per vector, and SiLU follows nearly every
// convolution of EfficientNet: 0.45 ns per element on the Zen 4 development machine at 1 thread, as
// much as the depthwise convolutions it follows (bench/results/cpu_host_2026-11-27.md). Here:
// e = exp(-|x|) (one range reduction, a degree-6 polynomial, 2^n by scalef / exponent bits), then
// sigmoid = (x >= 0 ? 1 : e) / (1 + e) with the reciprocal of 1 + e (in [1, 2]) from the hardware
// estimate and one Newton step: about 2 ulp against the correctly rounded value, no overflow (the
// exponent is never positive). x = NaN gives NaN; x below -87.3 has e = 0 (sigmoid 0, so SiLU(-inf)
// is NaN as -inf · 0 is, and SiLU of a finite x there is -0).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/elementwise_math.h"

namespace kiln::cpu::simd {

// Without a bias the rows [r0, r1) of `cols` are one contiguous run (a convolution's rows are short):
// rewritten as the one row they are.
inline void one_run_without_bias(float*& y, int64_t& r0, int64_t& r1, int64_t& cols, const float* bias) {
  if (bias || r1 <= r0) return;
  y += r0 * cols;
  cols *= r1 - r0;
  r0 = 0;
  r1 = 1;
}

// exp(a) for a <= 0 (a below -87.3 or NaN: anything; the callers mask those).
[[gnu::target(KILN_TARGET_AVX512), gnu::always_inline]] inline __m512 exp_nonpositive_avx512(__m512 a) {
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(a, _mm512_set1_ps(math::kLog2e)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(math::kLn2Hi), a);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(math::kLn2Lo), r);
  __m512 p = _mm512_set1_ps(math::kExpPoly[0]);
#pragma GCC unroll 8
  for (int k = 1; k < 6; ++k) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(math::kExpPoly[k]));
  p = _mm512_fmadd_ps(_mm512_mul_ps(p, r), r, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

// sigmoid(v), or v · sigmoid(v) when `silu`.
[[gnu::target(KILN_TARGET_AVX512), gnu::always_inline]] inline __m512 sigmoid_avx512(__m512 v, bool silu) {
  const __m512 a = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN)));  // -|v|
  const __mmask16 tiny = _mm512_cmp_ps_mask(a, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  const __m512 e = _mm512_maskz_mov_ps(static_cast<__mmask16>(~tiny), exp_nonpositive_avx512(a));
  const __m512 d = _mm512_add_ps(e, _mm512_set1_ps(1.0f));
  __m512 r = _mm512_rcp14_ps(d);
  r = _mm512_mul_ps(r, _mm512_fnmadd_ps(d, r, _mm512_set1_ps(2.0f)));  // one Newton step
  const __mmask16 neg = _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 s = _mm512_mask_mul_ps(r, neg, r, e);  // v < 0: e / (1 + e)
  const __m512 out = silu ? _mm512_mul_ps(v, s) : s;
  // NaN in, NaN out (the mask arithmetic above may have replaced it).
  return _mm512_mask_mov_ps(out, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);
}

// Rows [r0, r1) of a rows x cols block in place: y = f(y + bias[col]) (bias may be null).
[[gnu::target(KILN_TARGET_AVX512)]] inline void sigmoid_rows_avx512(float* y, int64_t r0, int64_t r1, int64_t cols,
                                                                    const float* bias, bool silu) {
  one_run_without_bias(y, r0, r1, cols, bias);
  for (int64_t row = r0; row < r1; ++row) {
    float* p = y + row * cols;
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) {
      __m512 v = _mm512_loadu_ps(p + i);
      if (bias) v = _mm512_add_ps(v, _mm512_loadu_ps(bias + i));
      _mm512_storeu_ps(p + i, sigmoid_avx512(v, silu));
    }
    if (i < cols) {
      const __mmask16 m = static_cast<__mmask16>((1u << (cols - i)) - 1);
      __m512 v = _mm512_maskz_loadu_ps(m, p + i);
      if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + i));
      _mm512_mask_storeu_ps(p + i, m, sigmoid_avx512(v, silu));
    }
  }
}

[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 exp_nonpositive_avx2(__m256 a) {
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(a, _mm256_set1_ps(math::kLog2e)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(math::kLn2Hi), a);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(math::kLn2Lo), r);
  __m256 p = _mm256_set1_ps(math::kExpPoly[0]);
#pragma GCC unroll 8
  for (int k = 1; k < 6; ++k) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(math::kExpPoly[k]));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n for n in [-126, 0]: the exponent field.
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

[[gnu::target("avx2,fma"), gnu::always_inline]] inline __m256 sigmoid_avx2(__m256 v, bool silu) {
  const __m256 a = _mm256_or_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN)));  // -|v|
  const __m256 ok = _mm256_cmp_ps(a, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);                // false below, and for NaN
  const __m256 e = _mm256_and_ps(ok, exp_nonpositive_avx2(_mm256_max_ps(a, _mm256_set1_ps(-87.3f))));
  const __m256 d = _mm256_add_ps(e, _mm256_set1_ps(1.0f));
  __m256 r = _mm256_rcp_ps(d);
  r = _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));  // one Newton step
  const __m256 neg = _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LT_OQ);
  const __m256 s = _mm256_blendv_ps(r, _mm256_mul_ps(r, e), neg);
  const __m256 out = silu ? _mm256_mul_ps(v, s) : s;
  return _mm256_blendv_ps(out, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
}

[[gnu::target("avx2,fma")]] inline void sigmoid_rows_avx2(float* y, int64_t r0, int64_t r1, int64_t cols, const float* bias,
                                                          bool silu) {
  one_run_without_bias(y, r0, r1, cols, bias);
  for (int64_t row = r0; row < r1; ++row) {
    float* p = y + row * cols;
    int64_t i = 0;
    for (; i + 8 <= cols; i += 8) {
      __m256 v = _mm256_loadu_ps(p + i);
      if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + i));
      _mm256_storeu_ps(p + i, sigmoid_avx2(v, silu));
    }
    if (i < cols) {  // the last few through a zero-padded vector
      alignas(32) float t[8] = {}, b[8] = {};
      for (int64_t k = i; k < cols; ++k) {
        t[k - i] = p[k];
        if (bias) b[k - i] = bias[k];
      }
      const __m256 v = _mm256_add_ps(_mm256_load_ps(t), _mm256_load_ps(b));
      _mm256_store_ps(t, sigmoid_avx2(v, silu));
      for (int64_t k = i; k < cols; ++k) p[k] = t[k - i];
    }
  }
}

}  // namespace kiln::cpu::simd
