// bench/cuda_probe_util.h — what the single-file cuBLASLt probes (cuda_gemm_ld_probe.cpp,
// cuda_gemm_rowgroup_probe.cpp) share: exit-on-error checks of CUDA and cuBLASLt calls, and a timer of
// CUDA-graph replays. Header only; the probes build with g++ alone (host code).
#pragma once

#include <cublasLt.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t e_ = (x);                                                                 \
    if (e_ != cudaSuccess) {                                                              \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_));    \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)
#define LK(x)                                                                             \
  do {                                                                                    \
    cublasStatus_t s_ = (x);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s:%d: cuBLASLt status %d\n", __FILE__, __LINE__, int(s_));   \
      std::exit(1);                                                                       \
    }                                                                                     \
  } while (0)

// ms per call of `fn` (10 calls captured in one graph, best of 5 replays after one warm-up replay).
template <class Fn>
double time_graph(cudaStream_t s, Fn fn) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 10; ++i) fn();
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  CK(cudaGraphLaunch(ge, s));
  double best = 1e30;
  for (int r = 0; r < 5; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    best = std::min(best, ms / 10.0);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return best;
}

// A stream, a cuBLASLt handle and a 64 MiB workspace, after printing the GPU and the product
// Y[M, N] = A[M, K] · W[K, N] (half A and W, float Y) the probe times.
struct LtBench {
  cudaStream_t s = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t{64} << 20;
};
inline LtBench lt_bench(long long M, long long K, long long N) {
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%s, cuBLASLt %zu; Y[%lld,%lld] = A[%lld,%lld] W[%lld,%lld], half A/W, float Y\n", prop.name,
              cublasLtGetVersion(), M, N, M, K, K, N);
  LtBench b;
  CK(cudaStreamCreate(&b.s));
  LK(cublasLtCreate(&b.lt));
  CK(cudaMalloc(&b.ws, b.ws_bytes));
  return b;
}

// The same random A [M, K] and W [K, Np] every run (halves in [-0.5, 0.5); W's columns from N on zero).
inline void random_a_w(long long M, long long K, long long N, long long Np, std::vector<__half>& a, std::vector<__half>& w) {
  uint32_t r = 12345;
  auto rnd = [&] {
    r = r * 1664525u + 1013904223u;
    return static_cast<float>((r >> 8) & 0xffff) / 65536.0f - 0.5f;
  };
  a.resize(static_cast<size_t>(M * K));
  w.resize(static_cast<size_t>(K * Np));
  for (auto& x : a) x = __float2half(rnd());
  for (long long k = 0; k < K; ++k)
    for (long long n = 0; n < Np; ++n) w[k * Np + n] = __float2half(n < N ? rnd() : 0.0f);
}

// The product Y[m, n] = A[m, k] · W[k, n] a probe times: three numbers on its command line (M K N), or
// GPT-2's language-model head at batch 64, sequence 128.
struct Mkn {
  int64_t m = 8192, k = 768, n = 50257;
};
inline Mkn mkn_of(int argc, char** argv) {
  Mkn p;
  if (argc == 4) {
    p.m = std::atoll(argv[1]);
    p.k = std::atoll(argv[2]);
    p.n = std::atoll(argv[3]);
  }
  return p;
}

// A device copy of host data (the probes keep theirs until they exit).
template <class T>
T* to_device(const std::vector<T>& h) {
  T* d = nullptr;
  CK(cudaMalloc(&d, h.size() * sizeof(T)));
  CK(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// Y[M, N] (float, on the device, rows N apart) as `write` leaves it after Y was filled with NaN, against
// the first N columns of ref (rows ldr apart): the largest absolute difference, infinite where an
// element was not written.
template <class Fn>
double max_diff_written(float* y, long long M, long long N, const std::vector<float>& ref, long long ldr, cudaStream_t s,
                        Fn write) {
  CK(cudaMemset(y, 0xff, static_cast<size_t>(M * N) * 4));
  write();
  CK(cudaStreamSynchronize(s));
  std::vector<float> got(static_cast<size_t>(M * N));
  CK(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost));
  double diff = 0;
  for (long long m = 0; m < M; ++m)
    for (long long n = 0; n < N; ++n) {
      const float g = got[m * N + n];
      if (std::isnan(g)) return INFINITY;
      diff = std::max(diff, static_cast<double>(std::fabs(g - ref[m * ldr + n])));
    }
  return diff;
}

// Yᵀ[Np, m] (ld Np) = W[K, Np]ᵀ-as-column-major · Aᵀ[K, m] (ld K): the padded product of m rows (float Y,
// or y_type), with the heuristic's candidates kept to pick the fastest; sm_target > 0 asks cuBLASLt to
// run it on that many SMs (CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET).
struct Gemm {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t lw = nullptr, la = nullptr, ly = nullptr;
  cublasLtMatmulHeuristicResult_t cands[8];
  int found = 0, pick = 0;
};

inline Gemm plan(cublasLtHandle_t lt, int64_t m, int64_t np, int64_t k, size_t ws, cudaDataType_t y_type = CUDA_R_32F,
                 int sm_target = 0) {
  Gemm g;
  LK(cublasLtMatmulDescCreate(&g.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (sm_target > 0)
    LK(cublasLtMatmulDescSetAttribute(g.op, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &sm_target, sizeof(sm_target)));
  LK(cublasLtMatrixLayoutCreate(&g.lw, CUDA_R_16F, np, k, np));
  LK(cublasLtMatrixLayoutCreate(&g.la, CUDA_R_16F, k, m, k));
  LK(cublasLtMatrixLayoutCreate(&g.ly, y_type, np, m, np));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  cublasLtMatmulHeuristicResult_t all[8];
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, g.op, g.lw, g.la, g.ly, g.ly, pref, 8, all, &found));
  for (int i = 0; i < found; ++i)
    if (all[i].state == CUBLAS_STATUS_SUCCESS) g.cands[g.found++] = all[i];
  cublasLtMatmulPreferenceDestroy(pref);
  if (!g.found) std::fprintf(stderr, "no cuBLASLt algorithm for %lld rows\n", static_cast<long long>(m)), std::exit(1);
  return g;
}

inline void run(const LtBench& b, const Gemm& g, const __half* w, const __half* a, void* y) {
  const float alpha = 1, beta = 0;
  LK(cublasLtMatmul(b.lt, g.op, &alpha, w, g.lw, a, g.la, &beta, y, g.ly, y, g.ly, &g.cands[g.pick].algo, b.ws, b.ws_bytes, b.s));
}

// Keeps g's fastest candidate for writing y (each timed as graph replays).
inline double pick_fastest(const LtBench& b, Gemm& g, const __half* w, const __half* a, void* y) {
  double keep = 1e30;
  int at = 0;
  for (int i = 0; i < g.found; ++i) {
    g.pick = i;
    const double ms = time_graph(b.s, [&] { run(b, g, w, a, y); });
    if (ms < keep) keep = ms, at = i;
  }
  g.pick = at;
  return keep;
}
