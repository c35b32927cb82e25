// bench/cuda_gemm_rowgroup_probe.cpp — can a GEMM write rows of an odd length in place, in row groups?
//
// GPT-2's language-model head writes Y[M, N] float32 with N = 50257: row r starts at r·N floats, 16-byte
// aligned only when r·N is a multiple of 4. cuBLASLt needs an aligned D and a pitch that is a multiple
// of 4 floats for its fast kernels, so kiln pads N to N' = 50264, lets the GEMM write Y'[M, N'] and
// copies Y' into Y (bench/cuda_gemm_ld_probe.cpp: 1.09 ms + 0.91 ms at M = 8192 on the H200).
//
// Row groups instead: rows r = j (mod 4) form group j, with pitch 4·N (a multiple of 4). Group j's rows
// are misaligned by s = j·N mod 4 floats, so the group writes columns [c0, N) with c0 = (4 − s) mod 4,
// which start aligned. The weight is stored [N, K] (the nn.Linear layout): column c0 of the product is
// row c0 of that matrix, K halves in, so its pointer stays aligned too. Each group is one GEMM of
// M/4 rows (A's rows of the group have pitch 4·K). The first c0 (≤ 3) columns of each row come from one
// more GEMM of all rows against the first 4 weight rows into a small [M, 4] buffer, copied into place
// with one strided copy per group. Timed (CUDA graphs of 10 calls, CUDA events, best of 5):
//   padded + realign   the padded product kiln runs today, then the realignment as cudaMemcpy2DAsync
//                      (about twice the time of kiln's own realigning kernel: 1.95 against 0.91 ms)
//   row groups         4 group GEMMs + the head GEMM + 3 head copies, writing Y in place
// and Y of the row groups checked against the padded form's valid columns (max abs difference; the
// probe exits 1 above 1e-3 or where an element was not written).
//
// Build (host code only): g++ -O2 -std=c++17 -I$CUDA/include bench/cuda_gemm_rowgroup_probe.cpp
//                          -L$CUDA/lib64 -lcublasLt -lcudart -o cuda_gemm_rowgroup_probe
// Run:   ./cuda_gemm_rowgroup_probe [M K N]   (default 8192 768 50257: GPT-2 at batch 64, sequence 128)
#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_probe_util.h"

namespace {

// One planned product in cuBLASLt's column-major view: Yᵀ[n, m] (ld ldy) = op(W)[n, K] · Aᵀ[K, m] (ld lda),
// W given as [n, K] row-major (ld K: transposed, `wt`) or [K, ldw] row-major (`!wt`).
struct Gemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t lw = nullptr, la = nullptr, ly = nullptr;
  cublasLtMatmulHeuristicResult_t heur{};
  cublasLtMatmulHeuristicResult_t cands[8];
  int found = 0;
  bool ok = false;
};

Gemm plan(cublasLtHandle_t lt, int64_t m, int64_t n, int64_t k, bool wt, int64_t ldw, int64_t lda, int64_t ldy, size_t ws) {
  Gemm g;
  LK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = wt ? CUBLAS_OP_T : CUBLAS_OP_N;
  LK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  if (wt) LK(cublasLtMatrixLayoutCreate(&g.lw, CUDA_R_16F, k, n, k));
  else LK(cublasLtMatrixLayoutCreate(&g.lw, CUDA_R_16F, n, k, ldw));
  LK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16F, k, m, lda));
  LK(cublasLtMatrixLayoutCreate(&g.ly, CUDA_R_32F, n, m, ldy));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t align = 16;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    LK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)));
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.lw, g.la, g.ly, g.ly, pref, 8, g.cands, &found));
  for (int i = 0; i < found; ++i)
    if (g.cands[i].state == CUBLAS_STATUS_SUCCESS) g.cands[g.found++] = g.cands[i];
  g.ok = g.found > 0;
  if (g.ok) g.heur = g.cands[0];
  cublasLtMatmulPreferenceDestroy(pref);
  return g;
}

void run(cublasLtHandle_t lt, const Gemm& g, const void* w, const void* a, float* y, void* ws, size_t ws_bytes,
         cudaStream_t s) {
  const float alpha = 1, beta = 0;
  LK(cublasLtMatmul(lt, g.op, &alpha, w, g.lw, a, g.la, &beta, y, g.ly, y, g.ly, &g.heur.algo, ws, ws_bytes, s));
}

// Keeps g's fastest candidate for this call (each timed as in time_graph).
template <class Fn>
void pick_fastest(Gemm& g, cudaStream_t s, Fn call) {
  double best = 1e30;
  cublasLtMatmulHeuristicResult_t keep = g.cands[0];
  for (int i = 0; i < g.found; ++i) {
    g.heur = g.cands[i];
    const double ms = time_graph(s, call);
    if (ms < best) best = ms, keep = g.cands[i];
  }
  g.heur = keep;
}

}  // namespace

int main(int argc, char** argv) {
  const Mkn mkn = mkn_of(argc, argv);
  const int64_t M = mkn.m, K = mkn.k, N = mkn.n;
  constexpr int64_t P = 4;  // floats per 16 bytes: the row groups
  if (M % P || K % 8 || N < P) {
    std::fprintf(stderr, "this probe takes M a multiple of 4, K a multiple of 8 and N >= 4\n");
    return 2;
  }
  const int64_t Np = (N + 7) / 8 * 8, Mg = M / P;
  const LtBench bench = lt_bench(M, K, N);
  cudaStream_t s = bench.s; cublasLtHandle_t lt = bench.lt; void* ws = bench.ws; const size_t ws_bytes = bench.ws_bytes;
  // Random A and W: W padded [K, Np] (zero columns past N) for today's form, and [N, K] for the row groups.
  std::vector<__half> ha, hw, hwt(N * K);
  random_a_w(M, K, N, Np, ha, hw);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) hwt[n * K + k] = hw[k * Np + n];
  __half *a = to_device(ha), *w = to_device(hw), *wt = to_device(hwt);
  float *y_pad, *y, *y_head;
  CK(cudaMalloc(&y_pad, M * Np * 4));
  CK(cudaMalloc(&y, M * N * 4));
  CK(cudaMalloc(&y_head, M * P * 4));

  // Today: the padded product, then the realigning row copy.
  const Gemm padded = plan(lt, M, Np, K, false, Np, K, Np, ws_bytes);
  if (!padded.ok) return std::printf("padded: no algorithm\n"), 1;
  Gemm padded_t = padded;
  pick_fastest(padded_t, s, [&] { run(lt, padded_t, w, a, y_pad, ws, ws_bytes, s); });
  const double t_pad = time_graph(s, [&] { run(lt, padded_t, w, a, y_pad, ws, ws_bytes, s); });
  // The same padded product with the [N, K] weight (cuBLASLt's T operand), to tell the layout's cost apart.
  std::vector<__half> hwtp(Np * K);
  for (int64_t n = 0; n < Np; ++n)
    for (int64_t k = 0; k < K; ++k) hwtp[n * K + k] = hw[k * Np + n];
  __half* wtp;
  CK(cudaMalloc(&wtp, hwtp.size() * 2));
  CK(cudaMemcpy(wtp, hwtp.data(), hwtp.size() * 2, cudaMemcpyHostToDevice));
  Gemm padded_wt = plan(lt, M, Np, K, true, 0, K, Np, ws_bytes);
  if (padded_wt.ok) {
    pick_fastest(padded_wt, s, [&] { run(lt, padded_wt, wtp, a, y_pad, ws, ws_bytes, s); });
    std::printf("padded, [N, K] weight: %.4f ms\n", time_graph(s, [&] { run(lt, padded_wt, wtp, a, y_pad, ws, ws_bytes, s); }));
  }
  const double t_copy = time_graph(s, [&] {
    CK(cudaMemcpy2DAsync(y, N * 4, y_pad, Np * 4, N * 4, M, cudaMemcpyDeviceToDevice, s));
  });
  std::printf("padded + realign: %.4f + %.4f = %.4f ms\n", t_pad, t_copy, t_pad + t_copy);
  std::vector<float> ref(M * Np);
  run(lt, padded, w, a, y_pad, ws, ws_bytes, s);
  CK(cudaMemcpy(ref.data(), y_pad, ref.size() * 4, cudaMemcpyDeviceToHost));

  // Row groups: group j's GEMM (columns [c0, N) of rows j, j+4, ...), the head GEMM (columns [0, 4) of
  // every row into y_head) and each group's first c0 columns copied from it.
  Gemm groups[P];
  int64_t c0[P];
  for (int64_t j = 0; j < P; ++j) {
    c0[j] = (P - (j * N) % P) % P;
    groups[j] = plan(lt, Mg, N - c0[j], K, true, 0, P * K, P * N, ws_bytes);
    if (!groups[j].ok) return std::printf("row group %lld: no algorithm\n", (long long)j), 1;
    pick_fastest(groups[j], s, [&] { run(lt, groups[j], wt + c0[j] * K, a + j * K, y + j * N + c0[j], ws, ws_bytes, s); });
  }
  const Gemm head = plan(lt, M, P, K, true, 0, K, P, ws_bytes);
  if (!head.ok) return std::printf("head: no algorithm\n"), 1;
  auto row_groups = [&] {
    for (int64_t j = 0; j < P; ++j)
      run(lt, groups[j], wt + c0[j] * K, a + j * K, y + j * N + c0[j], ws, ws_bytes, s);
    run(lt, head, wt, a, y_head, ws, ws_bytes, s);
    for (int64_t j = 0; j < P; ++j)
      if (c0[j])
        CK(cudaMemcpy2DAsync(y + j * N, P * N * 4, y_head + j * P, P * P * 4, c0[j] * 4, Mg, cudaMemcpyDeviceToDevice, s));
  };
  double t_groups_gemm = 0;
  for (int64_t j = 0; j < P; ++j)
    t_groups_gemm += time_graph(s, [&] { run(lt, groups[j], wt + c0[j] * K, a + j * K, y + j * N + c0[j], ws, ws_bytes, s); });
  const double t_head = time_graph(s, [&] { run(lt, head, wt, a, y_head, ws, ws_bytes, s); });
  const double t_groups = time_graph(s, row_groups);
  std::printf("row groups: %.4f ms (the 4 group GEMMs %.4f, the head GEMM %.4f, the rest the head copies)\n", t_groups,
              t_groups_gemm, t_head);
  const double diff = max_diff_written(y, M, N, ref, Np, s, row_groups);
  std::printf("row groups vs padded: max |diff| %.3g over all %lld x %lld values; speed-up %.2fx\n", diff, (long long)M,
              (long long)N, (t_pad + t_copy) / t_groups);
  return diff <= 1e-3 ? 0 : 1;
}
