// backends/cpu/packed_tile.h — the 6 x 16 float32 register tile shared by the packed GEMM
// (packed_gemm.cpp) and the packed direct convolution (packed_conv.cpp); internal to those two.
//
// A tile is six rows of A against one 16-column panel of packed B (kPanel floats per k): twelve
// 8-float accumulators, two panel loads and one broadcast per row per step of k. A row's k runs over
// `taps` segments of C floats each, read through a pointer per (row, tap): the GEMM has one segment
// per row (its A row), the convolution one per tap (the input pixel the tap reads, or a zero row).
#pragma once

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/packed_gemm.h"

namespace kiln::cpu::packed {

constexpr int64_t kP = PackedB::kPanel;
constexpr int64_t kMr = 6;

// On the last tap block (`fin` non-null) the tile also adds the residual fin->z (row stride ldc) and
// clamps to [fin->lo, fin->hi] (None, Relu and Clip) before it is stored. The clamp keeps NaN:
// max_ps/min_ps return their second operand when either is NaN, so the value goes second.
struct TileFinish {
  const float* z = nullptr;
  bool clamp = false;
  float lo = 0, hi = 0;
};

// One register tile over a block of taps: c[r][0..16) (=, or += when `accumulate`) the sum over taps
// t < taps and channels k < C of rows[r * rstride + t][k] · b[(t * C + k) * 16 + 0..16), starting
// from `bias` (16 values) or zero when not accumulating.
// GCC keeps an array of __m256 in registers but also stores it to the stack on every step of k
// (measured: 30 GFLOP/s instead of 80), hence the named accumulators.
template <int R>
[[gnu::target("avx2,fma")]] void tile(int64_t taps, int64_t C, const float* const* rows, int64_t rstride,
                                     const float* b, float* c, int64_t ldc, bool accumulate, const float* bias,
                                     const TileFinish* fin) {
  __m256 c00, c01, c10, c11, c20, c21, c30, c31, c40, c41, c50, c51;
  const __m256 z = _mm256_setzero_ps();
  c00 = c01 = c10 = c11 = c20 = c21 = c30 = c31 = c40 = c41 = c50 = c51 = z;
#define KILN_TILE_ROWS(X) X(0, c00, c01) X(1, c10, c11) X(2, c20, c21) X(3, c30, c31) X(4, c40, c41) X(5, c50, c51)
#define KILN_TILE_INIT(r, lo, hi)            \
  if constexpr (R > r) {                     \
    if (accumulate) {                        \
      lo = _mm256_loadu_ps(c + r * ldc);     \
      hi = _mm256_loadu_ps(c + r * ldc + 8); \
    } else if (bias) {                       \
      lo = _mm256_loadu_ps(bias);            \
      hi = _mm256_loadu_ps(bias + 8);        \
    }                                        \
  }
#define KILN_TILE_STEP(r, lo, hi)                    \
  if constexpr (R > r) {                             \
    const __m256 av = _mm256_broadcast_ss(a##r + k); \
    lo = _mm256_fmadd_ps(av, b0, lo);                \
    hi = _mm256_fmadd_ps(av, b1, hi);                \
  }
#define KILN_TILE_FINISH(r, lo, hi)                                        \
  if constexpr (R > r) {                                                  \
    if (fin->z) {                                                         \
      lo = _mm256_add_ps(lo, _mm256_loadu_ps(fin->z + r * ldc));          \
      hi = _mm256_add_ps(hi, _mm256_loadu_ps(fin->z + r * ldc + 8));      \
    }                                                                     \
    if (fin->clamp) {                                                     \
      lo = _mm256_min_ps(vhi, _mm256_max_ps(vlo, lo));                    \
      hi = _mm256_min_ps(vhi, _mm256_max_ps(vlo, hi));                    \
    }                                                                     \
  }
#define KILN_TILE_STORE(r, lo, hi)         \
  if constexpr (R > r) {                   \
    _mm256_storeu_ps(c + r * ldc, lo);     \
    _mm256_storeu_ps(c + r * ldc + 8, hi); \
  }
  KILN_TILE_ROWS(KILN_TILE_INIT)
  for (int64_t t = 0; t < taps; ++t, b += C * kP) {
    const float* a0 = rows[t];
    const float* a1 = R > 1 ? rows[rstride + t] : a0;
    const float* a2 = R > 2 ? rows[2 * rstride + t] : a0;
    const float* a3 = R > 3 ? rows[3 * rstride + t] : a0;
    const float* a4 = R > 4 ? rows[4 * rstride + t] : a0;
    const float* a5 = R > 5 ? rows[5 * rstride + t] : a0;
    (void)a1, (void)a2, (void)a3, (void)a4, (void)a5;
    for (int64_t k = 0; k < C; ++k) {
      const __m256 b0 = _mm256_load_ps(b + k * kP), b1 = _mm256_load_ps(b + k * kP + 8);
      KILN_TILE_ROWS(KILN_TILE_STEP)
    }
  }
  if (fin) {
    const __m256 vlo = _mm256_set1_ps(fin->lo), vhi = _mm256_set1_ps(fin->hi);
    KILN_TILE_ROWS(KILN_TILE_FINISH)
  }
  KILN_TILE_ROWS(KILN_TILE_STORE)
#undef KILN_TILE_ROWS
#undef KILN_TILE_INIT
#undef KILN_TILE_STEP
#undef KILN_TILE_FINISH
#undef KILN_TILE_STORE
}

using TileFn = void (*)(int64_t, int64_t, const float* const*, int64_t, const float*, float*, int64_t, bool,
                        const float*, const TileFinish*);
constexpr TileFn kTiles[kMr + 1] = {nullptr, tile<1>, tile<2>, tile<3>, tile<4>, tile<5>, tile<6>};

// A panel's 16 bias values: bias + n0, or for a last panel of nw < 16 columns a zero-padded copy in
// `edge` (16 floats); null without a bias.
inline const float* panel_bias(const float* bias, int64_t n0, int64_t nw, float* edge) {
  if (!bias || nw == kP) return bias ? bias + n0 : nullptr;
  std::memset(edge, 0, kP * sizeof(float));
  std::memcpy(edge, bias + n0, static_cast<size_t>(nw) * sizeof(float));
  return edge;
}

// The work split of both kernels: rows in blocks of at most mc_max (equal up to a tile: 128 rows are
// 66 + 62, not 96 + 32), panels in column chunks of 8 (128 columns, in L2 with the row block), more
// and narrower chunks when there are too few tasks to keep the threads busy or when the tasks do not
// divide evenly among the threads (9 tasks on 2 threads leave one idle for a ninth of the time:
// ResNet-50's 28x28 3x3 layers, ConvNeXt's 14x14 MLPs; halving the chunk gives 18). Tasks (row block,
// column chunk) run column-chunk major, the threads claiming them one at a time in that order
// (parallel_tasks; a static split into contiguous ranges before): on a shared machine a thread slowed
// by another process takes fewer tasks instead of holding the other at the barrier (BERT's three
// MatMul shapes at 2 threads on the development machine, 3 alternated runs each: kiln/ORT 1.09 ->
// 1.05 on average). Each task owns its tile of C and sums over k in order, so the result does not
// depend on which thread ran it. Calls fn(r0, r1, q0, q1) for rows [r0, r1) and panels [q0, q1).
template <typename Fn>
void for_each_task(int64_t rows, int64_t panels, int64_t mc_max, const Fn& fn) {
  const int64_t mblocks = (rows + mc_max - 1) / mc_max;
  const int64_t mc = ((rows + mblocks - 1) / mblocks + kMr - 1) / kMr * kMr;
  const int64_t threads = std::max(1, omp_get_max_threads());
  int64_t chunk = 8;
  for (;;) {
    const int64_t tasks = mblocks * ((panels + chunk - 1) / chunk);
    if (chunk == 1 || (tasks >= 8 && tasks % threads == 0)) break;
    chunk /= 2;
  }
  const int64_t chunks = (panels + chunk - 1) / chunk;
  auto body = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t ch = t / mblocks, mb = t % mblocks;
      const int64_t r0 = std::min(rows, mb * mc), r1 = std::min(rows, r0 + mc);
      if (r0 < r1) fn(r0, r1, ch * chunk, std::min(panels, ch * chunk + chunk));
    }
  };
  parallel_tasks(mblocks * chunks, body);
}

}  // namespace kiln::cpu::packed
