// backends/cpu/packed_gemm.h — kiln's own float32 GEMM for a constant B (the "packed" tactic of
// MatMul and Gemm): B is packed once into column panels, and each run is C = A·B (+ a bias row)
// by an AVX2/FMA register-tile kernel, with no allocation and no packing on the run path.
#pragma once

#include <cstdint>
#include <memory>

#include "ir/graph.h"

namespace kiln::cpu {

// B[K,N] (or B given transposed as [N,K]) packed into panels of kPanel columns: panel p holds
// columns p*kPanel .. p*kPanel+kPanel-1 as K rows of kPanel floats (zero past N), so the kernel reads
// one panel row per step of k with two aligned loads.
struct PackedB {
  static constexpr int64_t kPanel = 16;
  int64_t K = 0, N = 0;
  std::shared_ptr<Storage> storage;  // 64-byte aligned panels
  const float* data() const { return static_cast<const float*>(storage->data); }
};

// Whether this machine runs the packed kernel (AVX2 and FMA).
bool packed_gemm_available();
// Whether the packed kernel is the better untuned default here: CPUs with AVX2 but without AVX-512,
// where oneDNN's f32 matmul measured up to 2x slower than this kernel; with AVX-512 oneDNN's wider
// kernels are kept unless the tuner times this one faster.
bool packed_gemm_preferred();

// Packs b: [K,N] row-major, or [N,K] when `transposed` (Gemm's transB).
Expected<std::shared_ptr<PackedB>> pack_b(const float* b, int64_t K, int64_t N, bool transposed);

// C[M,N] (row stride ldc) = A[M,K] (row stride lda) · B + bias (a row of N, or null). Threads over
// row blocks and column chunks with parallel_for; allocates nothing.
void packed_gemm(int64_t M, const float* a, int64_t lda, const PackedB& b, const float* bias, float* c, int64_t ldc);

}  // namespace kiln::cpu
