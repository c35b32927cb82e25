// bench/cuda_gemm_cutlass_probe.cu — can a CUTLASS Hopper GEMM write GPT-2's logits rows in place?
//
// GPT-2's language-model head writes Y[M, N] float32, N = 50257: rows start 4-byte aligned only, which
// cuBLASLt's fast kernels refuse, so kiln pads N to 50264 and realigns the rows afterwards (1.10 ms
// GEMM + 0.91 ms copy at M = 8192 on the H200; bench/cuda_gemm_ld_probe.cpp). Row groups through
// cuBLASLt were slower still (bench/cuda_gemm_rowgroup_probe.cpp). This probe times CUTLASS's SM90
// warp-specialized GEMM (TMA loads of A [M, K] and W stored [N, K], both 16-byte aligned) with the
// epilogue that stores from registers (NoSmemWarpSpecialized), built for an output alignment of one
// element, against:
//   cutlass padded   the same kernel writing Y' [M, 50264] (4-element alignment): the store pattern's cost
//   cublasLt padded  cuBLASLt's first heuristic choice writing Y' [M, 50264] (what kiln runs) + the row
//                    copy as cudaMemcpy2DAsync (kiln's own realigning kernel takes about half its time)
// and checks the in-place Y against cuBLASLt's valid columns (max abs difference; exit 1 above 1e-3 or
// where an element was not written).
//
// CUTLASS's headers come from PyPI's nvidia-cutlass wheel (cutlass_library/source/include):
//   pip download --no-deps nvidia-cutlass==4.2.0.0 && unzip the wheel into C
//   nvcc -O3 -DNDEBUG -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -I C/cutlass_library/source/include \
//        -Ibench bench/cuda_gemm_cutlass_probe.cu -lcublasLt -o cuda_gemm_cutlass_probe
// (-DNDEBUG matters: with CUTLASS's asserts compiled in, ptxas reports the wgmma pipeline serialized
// at a call inside it.) Built with CUDA 13.0 (about 2 min of one core).
// Result (H200, 2026-11-30, bench/results/gpu_gemm_cutlass_probe_h200_2026-11-30.log): in place 3.03 ms,
// the same kernel padded 1.92 ms, cuBLASLt padded 1.09 ms (+ 0.91 for kiln's realigning kernel): the
// register-store epilogue costs more than the copy it saves, so this route is closed.
// Run:   ./cuda_gemm_cutlass_probe [M K N]   (default 8192 768 50257)
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cuda_probe_util.h"

namespace {

using namespace cute;

// Y (float, row-major, alignment kAlignD elements) = A (half, row-major) · B, B given as W [N, K]
// (half, K contiguous: CUTLASS's column-major B).
template <int kAlignD>
struct Sm90Gemm {
  using TileShape = Shape<_128, _256, _64>;
  using ClusterShape = Shape<_2, _1, _1>;
  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignD, float,
      cutlass::layout::RowMajor, kAlignD, cutlass::epilogue::NoSmemWarpSpecialized>::CollectiveOp;
  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, cutlass::half_t, cutlass::layout::RowMajor, 8, cutlass::half_t,
      cutlass::layout::ColumnMajor, 8, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      cutlass::gemm::KernelTmaWarpSpecializedCooperative>::CollectiveOp;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Shape<int, int, int, int>, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  Gemm gemm;
  void* workspace = nullptr;

  // Plans Y[m, n] (row pitch ldy elements) = A[m, k] · Wᵀ; false where CUTLASS cannot run it.
  bool plan(const __half* a, const __half* w, float* y, int m, int n, int k, int64_t ldy) {
    // (row, column, batch) strides: A and W have K contiguous, Y its columns (row pitch ldy).
    const typename Kernel::StrideA sa = make_stride(int64_t{k}, Int<1>{}, int64_t{m} * k);
    const typename Kernel::StrideB sb = make_stride(int64_t{k}, Int<1>{}, int64_t{n} * k);
    const typename Kernel::StrideD sd = make_stride(ldy, Int<1>{}, int64_t{m} * ldy);
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {m, n, k, 1},
                                  {reinterpret_cast<const cutlass::half_t*>(a), sa, reinterpret_cast<const cutlass::half_t*>(w), sb},
                                  {{1.0f, 0.0f}, nullptr, sd, y, sd}};
    if (gemm.can_implement(args) != cutlass::Status::kSuccess) return false;
    const size_t ws = Gemm::get_workspace_size(args);
    if (ws) CK(cudaMalloc(&workspace, ws));
    return gemm.initialize(args, workspace) == cutlass::Status::kSuccess;
  }
  void run(cudaStream_t s) {
    if (gemm.run(s) != cutlass::Status::kSuccess) {
      std::fprintf(stderr, "cutlass run failed\n");
      std::exit(1);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Mkn mkn = mkn_of(argc, argv);
  const int64_t M = mkn.m, K = mkn.k, N = mkn.n, Np = (N + 7) / 8 * 8;
  const LtBench bench = lt_bench(M, K, N);
  cudaStream_t s = bench.s; cublasLtHandle_t lt = bench.lt; void* ws = bench.ws; const size_t ws_bytes = bench.ws_bytes;
  std::vector<__half> ha, hw, hwt(Np * K);
  random_a_w(M, K, N, Np, ha, hw);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t n = 0; n < Np; ++n) hwt[n * K + k] = hw[k * Np + n];  // W as [Np, K]: rows past N are zero
  __half *a = to_device(ha), *w = to_device(hw), *wt = to_device(hwt);
  float *y_pad, *y;
  CK(cudaMalloc(&y_pad, M * Np * 4));
  CK(cudaMalloc(&y, M * N * 4));

  // cuBLASLt, padded (kiln today): Yᵀ[Np, M] = W'ᵀ[Np, K] · Aᵀ[K, M] in its column-major view.
  cublasLtMatmulDesc_t op;
  LK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t lw, la, ly;
  LK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16F, Np, K, Np));
  LK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, K, M, K));
  LK(cublasLtMatrixLayoutCreate(&ly, CUDA_R_32F, Np, M, Np));
  cublasLtMatmulPreference_t pref;
  LK(cublasLtMatmulPreferenceCreate(&pref));
  LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  cublasLtMatmulHeuristicResult_t heur;
  int found = 0;
  LK(cublasLtMatmulAlgoGetHeuristic(lt, op, lw, la, ly, ly, pref, 1, &heur, &found));
  if (!found) return std::printf("cuBLASLt: no algorithm\n"), 1;
  const float alpha = 1, beta = 0;
  auto lt_call = [&] { LK(cublasLtMatmul(lt, op, &alpha, w, lw, a, la, &beta, y_pad, ly, y_pad, ly, &heur.algo, ws, ws_bytes, s)); };
  const double t_lt = time_graph(s, lt_call);
  const double t_copy = time_graph(s, [&] {
    CK(cudaMemcpy2DAsync(y, N * 4, y_pad, Np * 4, N * 4, M, cudaMemcpyDeviceToDevice, s));
  });
  std::printf("cublasLt padded: %.4f ms + row copy %.4f ms = %.4f ms\n", t_lt, t_copy, t_lt + t_copy);
  lt_call();
  CK(cudaStreamSynchronize(s));
  std::vector<float> ref(M * Np);
  CK(cudaMemcpy(ref.data(), y_pad, ref.size() * 4, cudaMemcpyDeviceToHost));

  Sm90Gemm<4> padded;
  if (padded.plan(a, wt, y_pad, static_cast<int>(M), static_cast<int>(Np), static_cast<int>(K), Np))
    std::printf("cutlass padded (D aligned to 4): %.4f ms\n", time_graph(s, [&] { padded.run(s); }));
  else
    std::printf("cutlass padded: cannot run\n");
  Sm90Gemm<1> in_place;
  if (!in_place.plan(a, wt, y, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), N))
    return std::printf("cutlass in place: cannot run\n"), 1;
  const double t_in = time_graph(s, [&] { in_place.run(s); });
  const double diff = max_diff_written(y, M, N, ref, Np, s, [&] { in_place.run(s); });
  std::printf("cutlass in place (D aligned to 1): %.4f ms, %.2fx of padded + copy; max |diff| vs cuBLASLt %.3g\n", t_in,
              (t_lt + t_copy) / t_in, diff);
  return diff <= 1e-3 ? 0 : 1;
}
