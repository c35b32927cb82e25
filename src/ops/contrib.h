// ops/contrib.h — what ONNX Runtime's contrib ops mean, shared by their declarations (ops/contrib.cpp)
// and their lowering (passes/lower_contrib.cpp).
#pragma once

#include <vector>

namespace kiln::ops {

// The permutation of a com.microsoft.FusedMatMul operand of rank `rank` (>= 2) before the product:
// transBatch moves dim 0 behind the other batch dims ([1, ..., r-2, 0, r-1]), trans swaps the last two.
std::vector<int> fused_matmul_perm(int rank, bool trans, bool trans_batch);

// Declares the quantization contrib ops (ops/contrib_quant.cpp: MatMulNBits, the QLinear family, QGemm).
struct OpDef;
void add_contrib_quant_ops(std::vector<OpDef>& t);

}  // namespace kiln::ops
