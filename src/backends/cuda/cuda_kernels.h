// backends/cuda/cuda_kernels.h — plain launchers for kiln's own CUDA kernels (*.cu).
//
// Host code calls these with device pointers, sizes and a stream; no CUDA header is needed. Each
// launcher queues work on `stream` and returns the launch's error code (0 = cudaSuccess); it never
// synchronizes.
#pragma once

#include <cstdint>

// Compiled by nvcc as C++17: this header includes no kiln header (they need C++20).
struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;  // NOLINT: same typedef as cuda_runtime_api.h

namespace kiln::cuda {

constexpr int kMaxRank = 8;

enum class UnaryOp : int {
  kRelu, kSigmoid, kTanh, kExp, kLog, kSqrt, kAbs, kNeg, kErf, kLeakyRelu, kClip, kGelu, kGeluTanh,
  kHardSigmoid, kHardSwish,
};
// y = op(x) over n elements; `alpha`/`beta` are LeakyRelu's alpha, Clip's min/max, HardSigmoid's alpha/beta.
int launch_unary_f32(UnaryOp op, const float* x, float* y, int64_t n, float alpha, float beta, cudaStream_t stream);

enum class BinaryOp : int { kAdd, kSub, kMul, kDiv, kPow, kMax, kMin, kFirst };

// Output dims and element strides of both inputs (0 along broadcast dims), innermost last.
struct BroadcastIndex {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t a_strides[kMaxRank] = {};
  int64_t b_strides[kMaxRank] = {};
};
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
// The offsets into a and b of flat output element i (on the host and in kernels).
KILN_HOST_DEVICE inline void broadcast_offsets(const BroadcastIndex& idx, int64_t i, int64_t& ia, int64_t& ib) {
  ia = ib = 0;
  for (int d = idx.rank - 1; d >= 0; --d) {
    const int64_t c = i % idx.dims[d];
    i /= idx.dims[d];
    ia += c * idx.a_strides[d];
    ib += c * idx.b_strides[d];
  }
}
// y[i] = op(a[ia], b[ib]) for every output element; kFirst copies a (b may be null): a broadcast copy.
int launch_binary_f32(BinaryOp op, const float* a, const float* b, float* y, int64_t n, const BroadcastIndex& index,
                      cudaStream_t stream);

// Softmax (or log-softmax) of x viewed as [outer, axis, inner], normalized along `axis`.
int launch_softmax_f32(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, bool log,
                       cudaStream_t stream);

// y = x transposed: out_dims are y's dims, in_strides[k] is x's stride of the dim that lands at k.
struct TransposeIndex {
  int rank = 0;
  int64_t out_dims[kMaxRank] = {};
  int64_t in_strides[kMaxRank] = {};
};
// Any element type of 1, 2, 4 or 8 bytes.
int launch_transpose(const void* x, void* y, int64_t n, int elem_bytes, const TransposeIndex& index,
                     cudaStream_t stream);

// 2-D pooling over NCHW. Pads are begin (top/left) and end (bottom/right).
struct PoolParams {
  int64_t nc = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  bool max = true;
  bool count_include_pad = false;
};
int launch_pool2d_f32(const float* x, float* y, const PoolParams& p, cudaStream_t stream);

// y[r] = mean (or max) of x[r, 0..n) for each of `rows` rows.
int launch_reduce_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool max, cudaStream_t stream);

// Inference batch normalization of x viewed as [outer, c, inner].
int launch_batchnorm_f32(const float* x, const float* scale, const float* bias, const float* mean, const float* var,
                         float* y, int64_t outer, int64_t c, int64_t inner, float epsilon, cudaStream_t stream);

// y = x zero-padded in its last two dims: x is [nc, h, w], y is [nc, oh, ow] with x at (top, left).
int launch_pad2d_f32(const float* x, float* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                     int64_t top, int64_t left, cudaStream_t stream);

}  // namespace kiln::cuda
