// backends/cpu/norm_rows.h — one row of a float32 layer normalization, shared by LayerNormalization /
// RMSNormalization (nn_norm.cpp) and kiln.SkipLayerNorm (fused.cpp): the statistics accumulate in
// double as the general kernel's do, but as vector reductions (omp simd lets the sums reassociate; a
// scalar double sum is one dependent add per element: 2-3x ONNX Runtime's time on BERT's rows).
#pragma once

#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

struct NormRow {
  int64_t D = 0;
  const float* gamma = nullptr;  // D values
  const float* beta = nullptr;   // D values, or null
  double eps = 1e-5;
  bool rms = false;  // RMSNormalization: no mean subtracted, no beta
};

// y = (p - mean) / sqrt(var + eps) * gamma + beta over one row, where p = a (+ b when b is given; the
// sum is written to `sum` when given, else to y first). Returns mean and 1/sqrt(var + eps) for the
// optional statistics outputs. y may be `sum`; neither may overlap a or b unless equal to them.
[[gnu::always_inline]] inline void norm_row_body(const NormRow& r, const float* a, const float* b, float* sum, float* y,
                                                double* mean_out, double* inv_out) {
  const int64_t D = r.D;
  const float* p = a;
  if (b) {
    float* s = sum ? sum : y;
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) s[i] = a[i] + b[i];
    p = s;
  }
  double m = 0;
  if (!r.rms) {
#pragma omp simd reduction(+ : m)
    for (int64_t i = 0; i < D; ++i) m += p[i];
    m = D ? m / D : 0;
  }
  double v = 0;
#pragma omp simd reduction(+ : v)
  for (int64_t i = 0; i < D; ++i) {
    const double d = p[i] - m;
    v += d * d;
  }
  v = D ? v / D : 0;
  const double inv = 1.0 / std::sqrt(v + r.eps);
  const float mf = static_cast<float>(m), invf = static_cast<float>(inv);
  const float* g = r.gamma;
  const float* be = r.beta;
  if (be) {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) y[i] = (p[i] - mf) * invf * g[i] + be[i];
  } else {
#pragma omp simd
    for (int64_t i = 0; i < D; ++i) y[i] = (p[i] - mf) * invf * g[i];
  }
  if (mean_out) *mean_out = m;
  if (inv_out) *inv_out = inv;
}

[[gnu::target("avx2,fma")]] inline void norm_row_avx2(const NormRow& r, const float* a, const float* b, float* sum, float* y,
                                                      double* mean_out, double* inv_out) {
  norm_row_body(r, a, b, sum, y, mean_out, inv_out);
}
[[gnu::target(KILN_TARGET_AVX512)]] inline void norm_row_avx512(const NormRow& r, const float* a, const float* b, float* sum, float* y,
                                                double* mean_out, double* inv_out) {
  norm_row_body(r, a, b, sum, y, mean_out, inv_out);
}
// The row for this CPU: compiled for AVX-512 or AVX2+FMA where it has them, for the library's
// baseline otherwise.
inline void norm_row(const NormRow& r, const float* a, const float* b, float* sum, float* y, double* mean_out = nullptr,
                     double* inv_out = nullptr) {
  if (has_avx512()) norm_row_avx512(r, a, b, sum, y, mean_out, inv_out);
  else if (has_avx2_fma()) norm_row_avx2(r, a, b, sum, y, mean_out, inv_out);
  else norm_row_body(r, a, b, sum, y, mean_out, inv_out);
}

}  // namespace kiln::cpu
