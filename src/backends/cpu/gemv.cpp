// backends/cpu/gemv.cpp — see gemv.h.
#include "backends/cpu/gemv.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {

Expected<std::shared_ptr<GemvB>> pack_gemv_b(const float* b, int64_t K, int64_t N, bool transposed) {
  auto g = std::make_shared<GemvB>();
  g->K = K;
  g->N = N;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, K * N)) * sizeof(float);
  KILN_ASSIGN_OR_RETURN(g->storage, cpu_backend().allocate(bytes));
  float* d = static_cast<float*>(g->storage->data);
  if (transposed) {
    if (K * N > 0) std::memcpy(d, b, static_cast<size_t>(K * N) * sizeof(float));
  } else {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = 0; n < N; ++n) d[n * K + k] = b[k * N + n];
  }
  return g;
}

namespace {

// Rows [n0, n1) of y, the plain loop every CPU runs.
void rows_base(const float* a, const float* w, int64_t K, const float* bias, float* y, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* r = w + n * K;
    float s = 0;
    for (int64_t k = 0; k < K; ++k) s += a[k] * r[k];
    y[n] = s + (bias ? bias[n] : 0.0f);
  }
}

[[gnu::target(KILN_TARGET_AVX512)]] void rows_avx512(const float* a, const float* w, int64_t K, const float* bias, float* y,
                                                      int64_t n0, int64_t n1) {
  const int64_t tail = K % 16;
  const __mmask16 m = static_cast<__mmask16>((1u << tail) - 1);
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const float *w0 = w + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
      const __m512 x = _mm512_loadu_ps(a + k);
      s0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w0 + k), s0);
      s1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w1 + k), s1);
      s2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w2 + k), s2);
      s3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(w3 + k), s3);
    }
    if (tail) {
      const __m512 x = _mm512_maskz_loadu_ps(m, a + k);
      s0 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, w0 + k), s0);
      s1 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, w1 + k), s1);
      s2 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, w2 + k), s2);
      s3 = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, w3 + k), s3);
    }
    y[n] = _mm512_reduce_add_ps(s0) + (bias ? bias[n] : 0.0f);
    y[n + 1] = _mm512_reduce_add_ps(s1) + (bias ? bias[n + 1] : 0.0f);
    y[n + 2] = _mm512_reduce_add_ps(s2) + (bias ? bias[n + 2] : 0.0f);
    y[n + 3] = _mm512_reduce_add_ps(s3) + (bias ? bias[n + 3] : 0.0f);
  }
  for (; n < n1; ++n) {
    const float* r = w + n * K;
    __m512 s = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) s = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(r + k), s);
    if (tail) s = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, r + k), s);
    y[n] = _mm512_reduce_add_ps(s) + (bias ? bias[n] : 0.0f);
  }
}

// The sum of an AVX register's eight lanes.
[[gnu::target("avx2,fma"), gnu::always_inline]] inline float hsum_avx2(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

[[gnu::target("avx2,fma")]] void rows_avx2(const float* a, const float* w, int64_t K, const float* bias, float* y, int64_t n0,
                                           int64_t n1) {
  const int64_t k8 = K - K % 8;
  int64_t n = n0;
  for (; n + 4 <= n1; n += 4) {
    const float *w0 = w + n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    for (int64_t k = 0; k < k8; k += 8) {
      const __m256 x = _mm256_loadu_ps(a + k);
      s0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(w0 + k), s0);
      s1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(w1 + k), s1);
      s2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(w2 + k), s2);
      s3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(w3 + k), s3);
    }
    float r[4] = {hsum_avx2(s0), hsum_avx2(s1), hsum_avx2(s2), hsum_avx2(s3)};
    for (int64_t k = k8; k < K; ++k) {
      r[0] += a[k] * w0[k];
      r[1] += a[k] * w1[k];
      r[2] += a[k] * w2[k];
      r[3] += a[k] * w3[k];
    }
    for (int j = 0; j < 4; ++j) y[n + j] = r[j] + (bias ? bias[n + j] : 0.0f);
  }
  // The last rows one at a time, with the same arithmetic (the bits must not depend on where a
  // thread's block of rows starts).
  for (; n < n1; ++n) {
    const float* r = w + n * K;
    __m256 s = _mm256_setzero_ps();
    for (int64_t k = 0; k < k8; k += 8) s = _mm256_fmadd_ps(_mm256_loadu_ps(a + k), _mm256_loadu_ps(r + k), s);
    float t = hsum_avx2(s);
    for (int64_t k = k8; k < K; ++k) t += a[k] * r[k];
    y[n] = t + (bias ? bias[n] : 0.0f);
  }
}

}  // namespace

void gemv(const float* a, const GemvB& b, const float* bias, float* y) {
  const int64_t K = b.K;
  const float* w = b.data();
  // Blocks of 64 rows (a multiple of 4), at least 64 KB of weights a task.
  const int64_t grain = std::max<int64_t>(64, (16384 / std::max<int64_t>(K, 1) + 63) / 64 * 64);
  parallel_for(b.N, grain, [&](int64_t n0, int64_t n1) {
    if (has_avx512()) rows_avx512(a, w, K, bias, y, n0, n1);
    else if (has_avx2_fma()) rows_avx2(a, w, K, bias, y, n0, n1);
    else rows_base(a, w, K, bias, y, n0, n1);
  });
}

}  // namespace kiln::cpu
