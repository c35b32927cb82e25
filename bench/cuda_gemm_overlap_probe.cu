// bench/cuda_gemm_overlap_probe.cu — can GPT-2's logits realignment hide behind its GEMM?
//
// GPT-2's language-model head writes Y[M, N] float32 with N = 50257: cuBLASLt writes a padded Y' [M, N']
// (N' = 50264, 16-byte-aligned rows) and a copy realigns the rows into Y (H200, M = 8192: 1.10 ms GEMM +
// 0.91 ms copy, run one after the other). The GEMM is compute-bound and the copy memory-bound, so this
// probe splits the rows into C chunks: chunk c's GEMM on one stream, chunk c's realignment on a second
// stream once that GEMM is done, so the copy of chunk c runs beside the GEMM of chunk c + 1. Timed as
// CUDA graphs of 10 calls (events, best of 5 replays; cuda_probe_util.h), for C = 1 (serial: today's
// form) and C = 2, 4, 8, 16 overlapped, each chunk's GEMM the heuristic's fastest of its candidates;
// the realigning kernel reads 16-byte vectors of Y' and writes scalars (kiln's own does the same).
// Each form's Y is checked against the padded product (every element written, max abs difference).
//
// Result (H200, 2026-11-30, bench/results/gpu_gemm_overlap_probe_h200_2026-11-30.log): no overlap —
// 1.91 ms serial, 1.90 / 1.93 / 1.99 / 1.93 ms with 2 / 4 / 8 / 16 chunks (M = 4096 the same): each
// chunk's GEMM fills every SM, so the copy of the chunk before waits for it as if on one stream.
//
// Build: nvcc -O3 -std=c++17 -arch=sm_90 -Ibench bench/cuda_gemm_overlap_probe.cu -lcublasLt -o cuda_gemm_overlap_probe
// Run:   ./cuda_gemm_overlap_probe [M K N]   (default 8192 768 50257: GPT-2 at batch 64, sequence 128)
#include "cuda_probe_util.h"

namespace {

// Y[r, n] = Yp[r, n] for rows [0, rows) and columns [0, n_cols): four columns per thread, read as one
// aligned float4 (Yp's pitch is a multiple of 4 floats), written one float at a time.
__global__ void realign(float* y, const float* yp, int64_t rows, int64_t n_cols, int64_t pitch) {
  const int64_t quads = (n_cols + 3) / 4;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * quads) return;
  const int64_t r = i / quads, q = (i % quads) * 4;
  const float4 v = *reinterpret_cast<const float4*>(yp + r * pitch + q);
  float* d = y + r * n_cols + q;
  d[0] = v.x;
  if (q + 1 < n_cols) d[1] = v.y;
  if (q + 2 < n_cols) d[2] = v.z;
  if (q + 3 < n_cols) d[3] = v.w;
}

void launch_realign(float* y, const float* yp, int64_t rows, int64_t n_cols, int64_t pitch, cudaStream_t s) {
  const int64_t work = rows * ((n_cols + 3) / 4);
  realign<<<static_cast<unsigned>((work + 255) / 256), 256, 0, s>>>(y, yp, rows, n_cols, pitch);
  CK(cudaGetLastError());
}

}  // namespace

int main(int argc, char** argv) {
  const Mkn mkn = mkn_of(argc, argv);
  const int64_t M = mkn.m, K = mkn.k, N = mkn.n, Np = (N + 7) / 8 * 8;
  const LtBench b = lt_bench(M, K, N);
  std::vector<__half> ha, hw;
  random_a_w(M, K, N, Np, ha, hw);
  const __half *a = to_device(ha), *w = to_device(hw);
  float *yp, *y;
  CK(cudaMalloc(&yp, M * Np * 4));
  CK(cudaMalloc(&y, M * N * 4));
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  std::vector<cudaEvent_t> ev(17);
  for (auto& e : ev) CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));

  // The reference: the whole padded product.
  Gemm whole = plan(b.lt, M, Np, K, b.ws_bytes);
  run(b, whole, w, a, yp);
  std::vector<float> ref(M * Np);
  CK(cudaStreamSynchronize(b.s));
  CK(cudaMemcpy(ref.data(), yp, ref.size() * 4, cudaMemcpyDeviceToHost));

  double serial = 0;
  bool all_ok = true;
  for (int64_t C : {1, 2, 4, 8, 16}) {
    if (M % C) continue;
    const int64_t rows = M / C;
    Gemm g = plan(b.lt, rows, Np, K, b.ws_bytes);
    pick_fastest(b, g, w, a, yp);  // the chunk GEMM's fastest candidate, timed alone
    auto form = [&] {
      if (C == 1) {  // today: the product, then the copy, on one stream
        run(b, g, w, a, yp);
        launch_realign(y, yp, M, N, Np, b.s);
        return;
      }
      CK(cudaEventRecord(ev[16], b.s));  // fork the copy stream into the capture
      CK(cudaStreamWaitEvent(s2, ev[16], 0));
      for (int64_t c = 0; c < C; ++c) {
        run(b, g, w, a + c * rows * K, yp + c * rows * Np);
        CK(cudaEventRecord(ev[c], b.s));
        CK(cudaStreamWaitEvent(s2, ev[c], 0));
        launch_realign(y + c * rows * N, yp + c * rows * Np, rows, N, Np, s2);
      }
      CK(cudaEventRecord(ev[15], s2));  // join
      CK(cudaStreamWaitEvent(b.s, ev[15], 0));
    };
    const double gemm_ms = time_graph(b.s, [&] { for (int64_t c = 0; c < C; ++c) run(b, g, w, a + c * rows * K, yp + c * rows * Np); });
    const double copy_ms = time_graph(b.s, [&] { launch_realign(y, yp, M, N, Np, b.s); });
    const double ms = time_graph(b.s, form);
    if (C == 1) serial = ms;
    const double diff = max_diff_written(y, M, N, ref, Np, b.s, [&] {
      form();
      CK(cudaStreamSynchronize(s2));
    });
    all_ok = all_ok && diff <= 1e-3;
    std::printf("chunks %2lld: %.4f ms (its GEMMs alone %.4f, the whole copy alone %.4f), %.2fx of serial; max |diff| %.3g\n",
                static_cast<long long>(C), ms, gemm_ms, copy_ms, serial / ms, diff);
  }
  return all_ok ? 0 : 1;
}
