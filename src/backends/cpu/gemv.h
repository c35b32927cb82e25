// backends/cpu/gemv.h — y = a·B + bias for one row a (a batch-1 classifier head: ResNet's, EfficientNet's,
// MobileNet's, ConvNeXt's, VGG's fully connected layers), the "gemv" tactic of Gemm. B is constant and
// kept as N rows of K (Bᵀ, copied once at build), so each output is one dot product over a contiguous
// row and the run streams the weights from memory in order, four rows at a time: at batch 1 these
// layers read every weight once per run, from DRAM (EfficientNet-B0's 1280x1000 head, weights not in
// cache: oneDNN's matmul 385 us, this 317 us, one thread of the Zen 4 development machine).
#pragma once

#include <cstdint>
#include <memory>

#include "ir/graph.h"

namespace kiln::cpu {

struct GemvB {
  int64_t K = 0, N = 0;
  std::shared_ptr<Storage> storage;  // N rows of K floats, 64-byte aligned
  const float* data() const { return static_cast<const float*>(storage->data); }
};

// B as [K,N] row-major, or [N,K] when `transposed` (Gemm's transB), into GemvB's rows.
Expected<std::shared_ptr<GemvB>> pack_gemv_b(const float* b, int64_t K, int64_t N, bool transposed);

// y[n] = sum_k a[k] · B[k][n] + (bias ? bias[n] : 0) for n < N; threads over blocks of rows; allocates
// nothing.
void gemv(const float* a, const GemvB& b, const float* bias, float* y);

}  // namespace kiln::cpu
