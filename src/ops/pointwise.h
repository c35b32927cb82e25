// ops/pointwise.h — kiln.Pointwise: a region of elementwise float ops as one node, made by the fusion
// pass (passes/fuse_pointwise.cpp) and run by one generated kernel per region (CUDA: source written
// from the program and compiled with NVRTC, backends/cuda/cuda_pointwise.cpp; CPU: an interpreter over
// blocks of elements, backends/cpu/pointwise.cpp, the reference).
//
//   Pointwise(X0, ..., Xn-1) → Y   inputs float32, float16 or bfloat16 of any shapes that broadcast
//                                 (numpy rules) to Y's; Y = the program evaluated per element of Y
//   code      INTS, three per instruction: op, a, b. Registers 0..n-1 hold the inputs (read exactly
//             into float32); instruction k writes register n + k; a and b name earlier registers
//             (kConst: a indexes `constants`). Y is the last register, rounded once to `dtype`.
//   constants FLOATS, the literals kConst reads
//   dtype     INT, Y's DataType (float32, float16 or bfloat16)
//
// All math is float32, each op as kiln's own kernels compute it (backends/cuda/cuda_elementwise.cu's
// formulas); where the unfused graph held an intermediate in float16 or bfloat16, the program rounds
// it there explicitly (kRoundHalf, kRoundBFloat16), so a fused region computes what its ops did.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "kiln/tensor.h"

namespace kiln::ops {

enum class PwOp : int {
  kConst = 0,
  // binary: a, b
  kAdd, kSub, kMul, kDiv, kPow, kMax, kMin,
  kLeakyRelu,  // a = x, b = alpha
  kElu,        // a = x, b = alpha
  kClampLo,    // a < b ? b : a (Clip's lower bound: NaN in a stays, a NaN bound leaves a)
  kClampHi,    // a > b ? b : a
  // unary: a
  kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kAbs, kNeg, kErf, kReciprocal, kFloor, kCeil, kGelu, kGeluTanh,
  kSoftplus, kHardSwish, kSin, kCos,
  kRoundHalf, kRoundBFloat16,  // round to float16 / bfloat16 (nearest even) and back
  kCount,
};

inline bool pw_binary(PwOp op) { return op >= PwOp::kAdd && op <= PwOp::kClampHi; }
const char* pw_name(PwOp op);

struct PwInstr {
  PwOp op = PwOp::kConst;
  int a = 0, b = 0;
};

struct PointwiseProgram {
  int inputs = 0;
  std::vector<PwInstr> code;
  std::vector<float> constants;
  DataType dtype = DataType::kFloat32;
  int result() const { return inputs + static_cast<int>(code.size()) - 1; }
};

// Limits a program keeps (the pass makes smaller ones; a hostile engine file gets an error).
constexpr int kPointwiseMaxInputs = 16;
constexpr int kPointwiseMaxCode = 256;

// The node's program, checked (every operand an earlier register, every op known, the input count
// within the limit, dtype a float type); the error names what is wrong.
Expected<PointwiseProgram> parse_pointwise(const ir::Node& n);
// The attributes of a program, as the node stores them.
void set_pointwise_attrs(ir::Node& n, const PointwiseProgram& p);

// One op in float32, as every backend computes it.
float pw_apply(PwOp op, float a, float b);

// True for float32, float16 and bfloat16.
bool pw_float(DataType dt);

}  // namespace kiln::ops
