// backends/cuda/cuda_nbits.h — launchers of com.microsoft MatMulNBits' kernels (cuda_nbits.cu; the op
// in cuda_gemm.cpp). W [N, K] is stored 4-bit in blocks of `block` values along K: row n's bytes are
// B[n, ceil(K / block), block / 2], byte i holding values 2i (lower nibble) and 2i + 1 (upper) of the
// row, and W[n, k] = (q − zero point) · scale, the scale and zero point of (n, k / block). Zero points:
// `zp_packed` (4-bit, two blocks a byte, rows of ceil(blocks / 2) bytes), or `zp_float` (A's type, one
// per block), or neither (8). Every float tensor (A, scales, float zero points, bias, Y) has type `elem`
// (float32, float16 or bfloat16); sums in float32. Plain launchers as in cuda_kernels.h: device
// pointers, a stream, the launch's error code back.
#pragma once

#include <cstdint>

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as cuda_runtime_api.h

namespace kiln::cuda {

// Rows of A up to which MatMulNBits reads the 4-bit weights directly (launch_nbits_rows); past them it
// dequantizes W and multiplies with cuBLASLt.
constexpr int64_t kNBitsFusedRows = 8;

struct NBitsArgs {
  int elem = 1;
  int64_t K = 0, N = 0, block = 0;
  const uint8_t* b = nullptr;
  const void* scales = nullptr;
  const uint8_t* zp_packed = nullptr;
  const void* zp_float = nullptr;
};

// y [M, N] = a [M, K] · Wᵀ (+ bias [N]), M in 1..kNBitsFusedRows: W's bytes read once and dequantized in
// registers, two rows per warp, against A's columns staged in shared memory as float32.
int launch_nbits_rows(const NBitsArgs& w, const void* a, const void* bias, void* y, int64_t M, cudaStream_t stream);

// W as `elem` values, [N, K] (row stride K; the padding past K left out), for a GEMM.
int launch_nbits_dequantize(const NBitsArgs& w, void* out, cudaStream_t stream);

}  // namespace kiln::cuda
