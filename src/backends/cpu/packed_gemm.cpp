// backends/cpu/packed_gemm.cpp — the "packed" float32 GEMM (see packed_gemm.h).
//
// Blocking: k in equal blocks of at most kKc, or all of K when K <= kKcWhole (a panel's kc x 16 slice,
// 16-64 KiB, stays in L1/L2 while the kernel walks the rows of a row block; fewer k blocks mean fewer
// loads and stores of C: k blocks of 768 instead of 256 measured 81 -> 88 GFLOP/s on [128,768]x[768,3072]
// here, an AVX2 EPYC core), rows in blocks of kMc (kMc x kc of A stays in L2 across the panels of a
// column chunk). The register tile is 6 rows x 16 columns: twelve 8-float accumulators,
// two panel loads and one broadcast of A per step of k. Work is split into (row block, column chunk)
// tasks, each owning its tile of C across every k block, so threads never write the same element.
// Every element's sum runs over k in increasing order, whichever task computes it (the result does
// not depend on the thread count).
#include "backends/cpu/packed_gemm.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"

namespace kiln::cpu {
namespace {

constexpr int64_t kP = PackedB::kPanel;
constexpr int64_t kMr = 6;
constexpr int64_t kKc = 768;
constexpr int64_t kKcWhole = 1024;
constexpr int64_t kMc = 96;  // a multiple of kMr

// One register tile: c[r][0..16) (=, or += when `accumulate`) a[r][0..kc) · panel[0..kc)[0..16) for
// r < R, starting from `bias` (16 values) or zero when not accumulating. The accumulators are named
// variables, not an array: GCC keeps an array of __m256 in registers but also stores it to the stack on
// every step of k (measured: 30 GFLOP/s instead of 80).
template <int R>
[[gnu::target("avx2,fma")]] void tile(int64_t kc, const float* a, int64_t lda, const float* b, float* c, int64_t ldc,
                                     bool accumulate, const float* bias) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  const __m256 z = _mm256_setzero_ps();
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = z;
#define KILN_TILE_ROWS(X) X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51)
#define KILN_TILE_INIT(r, lo, hi)                  \
  if constexpr (R > r) {                           \
    if (accumulate) {                              \
      lo = _mm256_loadu_ps(c + r * ldc);           \
      hi = _mm256_loadu_ps(c + r * ldc + 8);       \
    } else if (bias) {                             \
      lo = _mm256_loadu_ps(bias);                  \
      hi = _mm256_loadu_ps(bias + 8);              \
    }                                              \
  }
#define KILN_TILE_STEP(r, lo, hi)                            \
  if constexpr (R > r) {                                     \
    const __m256 av = _mm256_broadcast_ss(a##r + k);         \
    lo = _mm256_fmadd_ps(av, b0, lo);                        \
    hi = _mm256_fmadd_ps(av, b1, hi);                        \
  }
#define KILN_TILE_STORE(r, lo, hi)           \
  if constexpr (R > r) {                     \
    _mm256_storeu_ps(c + r * ldc, lo);       \
    _mm256_storeu_ps(c + r * ldc + 8, hi);   \
  }
  KILN_TILE_ROWS(KILN_TILE_INIT)
  const float *a0 = a, *a1 = a + lda, *a2 = a + 2 * lda, *a3 = a + 3 * lda, *a4 = a + 4 * lda, *a5 = a + 5 * lda;
  (void)a1, (void)a2, (void)a3, (void)a4, (void)a5;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_load_ps(b + k * kP), b1 = _mm256_load_ps(b + k * kP + 8);
    KILN_TILE_ROWS(KILN_TILE_STEP)
  }
  KILN_TILE_ROWS(KILN_TILE_STORE)
#undef KILN_TILE_ROWS
#undef KILN_TILE_INIT
#undef KILN_TILE_STEP
#undef KILN_TILE_STORE
}

using TileFn = void (*)(int64_t, const float*, int64_t, const float*, float*, int64_t, bool, const float*);
constexpr TileFn kTiles[kMr + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// Rows [m0, m1) x panels [p0, p1) of C, over all of k.
[[gnu::target("avx2,fma")]] void block(int64_t m0, int64_t m1, int64_t p0, int64_t p1, const float* a, int64_t lda,
                                      const PackedB& pb, const float* bias, float* c, int64_t ldc, int64_t kcmax) {
  const int64_t K = pb.K, N = pb.N;
  const float* panels = pb.data();
  alignas(32) float edge[kMr * kP];  // the last panel's tile when N is not a multiple of 16
  alignas(32) float edge_bias[kP];
  const int64_t kblocks = std::max<int64_t>(1, (K + kcmax - 1) / kcmax);  // K = 0: one block, C = bias or 0
  for (int64_t kb = 0; kb < kblocks; ++kb) {
    const int64_t k0 = kb * kcmax, kc = std::min(kcmax, K - k0);
    const bool accumulate = k0 > 0;
    for (int64_t p = p0; p < p1; ++p) {
      const float* bp = panels + p * K * kP + k0 * kP;
      const int64_t n0 = p * kP, nw = std::min(kP, N - n0);
      const float* bias_p = bias ? bias + n0 : nullptr;
      if (nw < kP && bias_p) {
        std::memset(edge_bias, 0, sizeof(edge_bias));
        std::memcpy(edge_bias, bias_p, static_cast<size_t>(nw) * sizeof(float));
        bias_p = edge_bias;
      }
      for (int64_t m = m0; m < m1; m += kMr) {
        const int64_t rows = std::min(kMr, m1 - m);
        const float* ap = a + m * lda + k0;
        float* cp = c + m * ldc + n0;
        if (nw == kP) {
          kTiles[rows](kc, ap, lda, bp, cp, ldc, accumulate, bias_p);
          continue;
        }
        if (accumulate)
          for (int64_t r = 0; r < rows; ++r) std::memcpy(edge + r * kP, cp + r * ldc, static_cast<size_t>(nw) * sizeof(float));
        kTiles[rows](kc, ap, lda, bp, edge, kP, accumulate, bias_p);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(cp + r * ldc, edge + r * kP, static_cast<size_t>(nw) * sizeof(float));
      }
    }
  }
}

}  // namespace

bool packed_gemm_available() { return has_avx2_fma(); }

bool packed_gemm_preferred() {
  static const bool yes = has_avx2_fma() && !__builtin_cpu_supports("avx512f");
  return yes;
}

Expected<std::shared_ptr<PackedB>> pack_b(const float* b, int64_t K, int64_t N, bool transposed) {
  auto pb = std::make_shared<PackedB>();
  pb->K = K;
  pb->N = N;
  const int64_t panels = (N + kP - 1) / kP;
  KILN_ASSIGN_OR_RETURN(pb->storage, cpu_backend().allocate(static_cast<size_t>(std::max<int64_t>(1, panels * K * kP)) * sizeof(float)));
  float* out = static_cast<float*>(pb->storage->data);
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t k = 0; k < K; ++k) {
      float* row = out + (p * K + k) * kP;
      for (int64_t j = 0; j < kP; ++j) {
        const int64_t n = p * kP + j;
        row[j] = n >= N ? 0.0f : transposed ? b[n * K + k] : b[k * N + n];
      }
    }
  return pb;
}

void packed_gemm(int64_t M, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c, int64_t ldc) {
  const int64_t panels = (b.N + kP - 1) / kP;
  if (M <= 0 || panels == 0) return;
  // k blocks: all of K up to kKcWhole, else equal blocks of at most kKc (3072 = 4 x 768).
  const int64_t kparts = b.K <= kKcWhole ? 1 : (b.K + kKc - 1) / kKc;
  const int64_t kcmax = std::max<int64_t>(1, (b.K + kparts - 1) / kparts);
  // Row blocks of at most kMc rows, equal up to a tile (128 rows: 66 + 62, not 96 + 32).
  const int64_t mblocks = (M + kMc - 1) / kMc;
  const int64_t mc = ((M + mblocks - 1) / mblocks + kMr - 1) / kMr * kMr;
  // Column chunks of 8 panels (128 columns: 128 KiB of a k block, in L2 with the row block); more,
  // narrower chunks when there are too few tasks to keep the threads busy.
  int64_t chunk = 8;
  while (chunk > 1 && mblocks * ((panels + chunk - 1) / chunk) < 8) chunk /= 2;
  const int64_t chunks = (panels + chunk - 1) / chunk;
  // Tasks column-chunk major: parallel_for hands each thread a contiguous range, so each reads its
  // own part of B (the weights) rather than all of it.
  parallel_for(mblocks * chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ch = t / mblocks, mb = t % mblocks;
      const int64_t m0 = std::min(M, mb * mc), m1 = std::min(M, m0 + mc);
      if (m0 < m1)
        block(m0, m1, ch * chunk, std::min(panels, ch * chunk + chunk), a, lda, b, bias, c, ldc, kcmax);
    }
  });
}

}  // namespace kiln::cpu
