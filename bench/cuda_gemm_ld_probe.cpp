// bench/cuda_gemm_ld_probe.cpp — can a GEMM with an odd column count write its rows unpadded at full speed?
//
// GPT-2's language-model head is Y[M, N] = A[M, K] · W[K, N] with N = 50257 (float16 A and W, float32 Y
// because the model's logits are float32). Unpadded, W's rows are 100514 bytes apart (2-byte aligned) and
// cuBLASLt runs a slow "align1" kernel; kiln pads W to N' = 50264 columns (aligned rows), lets the GEMM
// write Y' [M, N'] and then copies Y' into Y (a realignment pass over 2 × 1.65 GB at batch 64). This
// probe times, for the same product, each of cuBLASLt's heuristic candidates in four forms:
//   padded     W ld N', Y ld N' (n = N')                    — what kiln runs, before the realignment copy
//   wide-in    W ld N', Y ld N  (n = N): aligned W rows, Y written unpadded (4-byte-aligned rows)
//   unpadded   W ld N,  Y ld N  (n = N)                     — no padding at all
//   realign    the padded form's best time plus a row-realigning copy of Y' into Y (cudaMemcpy2DAsync)
// with CUDA events around CUDA graphs of 10 calls (best of 5 samples), random data; the result of each
// form's best candidate is checked against the padded form's on the valid columns (max abs difference).
//
// Build (host code only): g++ -O2 -std=c++17 -I$CUDA/include bench/cuda_gemm_ld_probe.cpp
//                          -L$CUDA/lib64 -lcublasLt -lcudart -o cuda_gemm_ld_probe
// Run:   ./cuda_gemm_ld_probe [M K N]   (default 8192 768 50257: GPT-2 at batch 64, sequence 128)
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

struct Form {
  const char* name;
  int64_t n, ldw, ldy;
};

}  // namespace

int main(int argc, char** argv) {
  const Mkn mkn = mkn_of(argc, argv);
  const int64_t M = mkn.m, K = mkn.k, N = mkn.n, Np = (N + 7) / 8 * 8;
  const LtBench bench = lt_bench(M, K, N);
  cudaStream_t s = bench.s; cublasLtHandle_t lt = bench.lt; void* ws = bench.ws; const size_t ws_bytes = bench.ws_bytes;
  std::printf("padded N' = %lld\n", (long long)Np);
  // Random A and W (W padded: its extra columns are zero), one Y per form.
  std::vector<__half> ha, hw, hw_tight(K * N);
  random_a_w(M, K, N, Np, ha, hw);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < N; ++n) hw_tight[k * N + n] = hw[k * Np + n];
  __half *a = to_device(ha), *w = to_device(hw), *w_tight = to_device(hw_tight);
  float *y_pad, *y;
  CK(cudaMalloc(&y_pad, M * Np * 4));
  CK(cudaMalloc(&y, M * N * 4));

  const Form forms[] = {{"padded", Np, Np, Np}, {"wide-in", N, Np, N}, {"unpadded", N, N, N}};
  double padded_best = 0;
  std::vector<float> ref;  // the padded form's Y (valid columns)
  for (const Form& f : forms) {
    cublasLtMatmulDesc_t op;
    LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    // Column-major view: Yᵀ[n, M] = Wᵀ[n, K] · Aᵀ[K, M]; W stored [K, ldw] row-major is [ldw, K] column-major.
    cublasLtMatrixLayout_t lw, la, ly;
    LK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16F, f.n, K, f.ldw));
    LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, K, M, K));
    LK(cublasLtMatrixLayoutCreate(&ly, CUDA_R_32F, f.n, M, f.ldy));
    cublasLtMatmulPreference_t pref;
    LK(cublasLtMatmulPreferenceCreate(&pref));
    LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
    cublasLtMatmulHeuristicResult_t res[8];
    int found = 0;
    LK(cublasLtMatmulAlgoGetHeuristic(lt, op, lw, la, ly, ly, pref, 8, res, &found));
    const __half* wp = f.ldw == N && N != Np ? w_tight : w;
    float* yp = f.ldy == Np ? y_pad : y;
    const float alpha = 1, beta = 0;
    double best = 1e30;
    int best_i = -1;
    for (int i = 0; i < found; ++i) {
      if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
      auto call = [&] {
        LK(cublasLtMatmul(lt, op, &alpha, wp, lw, a, la, &beta, yp, ly, yp, ly, &res[i].algo, ws, ws_bytes, s));
      };
      call();
      CK(cudaStreamSynchronize(s));
      const double ms = time_graph(s, call);
      const double tflops = 2.0 * M * K * f.n / ms / 1e9;
      std::printf("  %-9s heur%d  %.4f ms  %6.1f TFLOP/s  workspace %zu\n", f.name, i, ms, tflops, res[i].workspaceSize);
      if (ms < best) {
        best = ms;
        best_i = i;
      }
    }
    if (best_i < 0) {
      std::printf("  %-9s no algorithm\n", f.name);
      continue;
    }
    // The best candidate's Y against the padded form's.
    LK(cublasLtMatmul(lt, op, &alpha, wp, lw, a, la, &beta, yp, ly, yp, ly, &res[best_i].algo, ws, ws_bytes, s));
    CK(cudaStreamSynchronize(s));
    std::vector<float> got(M * f.ldy);
    CK(cudaMemcpy(got.data(), yp, got.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> valid(M * N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) valid[m * N + n] = got[m * f.ldy + n];
    double diff = 0;
    if (ref.empty()) ref = valid;
    for (size_t i = 0; i < valid.size(); ++i) diff = std::max(diff, double(std::fabs(valid[i] - ref[i])));
    std::printf("%-9s best heur%d %.4f ms (max |diff| vs padded %.3g)\n", f.name, best_i, best, diff);
    if (f.ldy == Np) padded_best = best;
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lw);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatrixLayoutDestroy(ly);
    cublasLtMatmulDescDestroy(op);
  }
  const double copy = time_graph(s, [&] {
    CK(cudaMemcpy2DAsync(y, N * 4, y_pad, Np * 4, N * 4, M, cudaMemcpyDeviceToDevice, s));
  });
  std::printf("realign   padded %.4f ms + row copy %.4f ms = %.4f ms\n", padded_best, copy, padded_best + copy);
  return 0;
}
