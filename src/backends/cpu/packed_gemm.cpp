// backends/cpu/packed_gemm.cpp — the "packed" float32 GEMM (see packed_gemm.h).
//
// Blocking: k in equal blocks of at most kKc, or all of K when K <= kKcWhole (a panel's kc x 16 slice,
// 16-64 KiB, stays in L1/L2 while the kernel walks the rows of a row block; fewer k blocks mean fewer
// loads and stores of C: k blocks of 768 instead of 256 measured 81 -> 88 GFLOP/s on [128,768]x[768,3072]
// here, an AVX2 EPYC core), rows in blocks of kMc (kMc x kc of A stays in L2 across the panels of a
// column chunk). The register tile (packed_tile.h, shared with the packed convolution) is 6 rows x
// 16 columns: twelve 8-float accumulators, two panel loads and one broadcast of A per step of k. Work is split into (row block, column chunk)
// tasks, each owning its tile of C across every k block, so threads never write the same element.
// Every element's sum runs over k in increasing order, whichever task computes it (the result does
// not depend on the thread count).
#include "backends/cpu/packed_gemm.h"

#include <algorithm>
#include <cstring>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/packed_tile.h"

namespace kiln::cpu {
namespace {

using packed::kMr;
using packed::kP;
using packed::kTiles;
constexpr int64_t kKc = 768;
constexpr int64_t kKcWhole = 1024;
constexpr int64_t kMc = 96;  // a multiple of kMr

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
      const float* bias_p = packed::panel_bias(bias, n0, nw, edge_bias);
      for (int64_t m = m0; m < m1; m += kMr) {
        const int64_t rows = std::min(kMr, m1 - m);
        const float* ap[kMr];  // the tile's A rows: one segment of kc floats each
        for (int64_t r = 0; r < rows; ++r) ap[r] = a + (m + r) * lda + k0;
        float* cp = c + m * ldc + n0;
        if (nw == kP) {
          kTiles[rows](1, kc, ap, 1, bp, cp, ldc, accumulate, bias_p, nullptr);
          continue;
        }
        if (accumulate)
          for (int64_t r = 0; r < rows; ++r) std::memcpy(edge + r * kP, cp + r * ldc, static_cast<size_t>(nw) * sizeof(float));
        kTiles[rows](1, kc, ap, 1, bp, edge, kP, accumulate, bias_p, nullptr);
        for (int64_t r = 0; r < rows; ++r) std::memcpy(cp + r * ldc, edge + r * kP, static_cast<size_t>(nw) * sizeof(float));
      }
    }
  }
}

}  // namespace

bool packed_gemm_available() { return has_avx2_fma(); }

bool packed_gemm_preferred() {
  static const bool yes = has_avx2_fma() && !has_avx512();
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
  packed::for_each_task(M, panels, kMc, [&](int64_t m0, int64_t m1, int64_t q0, int64_t q1) {
    block(m0, m1, q0, q1, a, lda, b, bias, c, ldc, kcmax);
  });
}

}  // namespace kiln::cpu
