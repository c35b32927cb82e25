// backends/cuda/cuda_nn.cu — softmax, transpose, pooling, row reductions, batch norm, padding.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "backends/cuda/cuda_kernels.h"

namespace kiln::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);
}
inline unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(rows < 2147483647 ? rows : 2147483647); }

#define KILN_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

// Reduces v over the block (sum or max); every thread gets the result.
__device__ float block_reduce(float v, bool max) {
  __shared__ float partial[32];
  __syncthreads();  // partial may still be read by a previous call
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : (max ? -FLT_MAX : 0.f);
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = max ? fmaxf(v, o) : v + o;
  }
  return v;
}

// One block per row (outer index o, inner index i); the row's elements are `inner` apart.
__global__ void softmax_kernel(const float* x, float* y, int64_t rows, int64_t axis, int64_t inner, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / inner) * axis * inner + r % inner;
    float m = -FLT_MAX;
    for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) m = fmaxf(m, x[base + k * inner]);
    m = block_reduce(m, true);
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) s += expf(x[base + k * inner] - m);
    s = block_reduce(s, false);
    if (log) {
      const float ls = logf(s);
      for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) y[base + k * inner] = x[base + k * inner] - m - ls;
    } else {
      const float inv = 1.f / s;
      for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) y[base + k * inner] = expf(x[base + k * inner] - m) * inv;
    }
  }
}

template <typename T>
__global__ void transpose_kernel(const T* x, T* y, int64_t n, TransposeIndex idx) {
  KILN_GRID_LOOP(i, n) {
    int64_t rem = i, src = 0;
    for (int d = idx.rank - 1; d >= 0; --d) {
      src += (rem % idx.out_dims[d]) * idx.in_strides[d];
      rem /= idx.out_dims[d];
    }
    y[i] = x[src];
  }
}

__global__ void pool2d_kernel(const float* x, float* y, PoolParams p) {
  const int64_t n = p.nc * p.oh * p.ow;
  KILN_GRID_LOOP(i, n) {
    const int64_t ox = i % p.ow, oy = i / p.ow % p.oh, c = i / (p.ow * p.oh);
    const float* plane = x + c * p.h * p.w;
    const int64_t y0 = oy * p.sh - p.pad_top, x0 = ox * p.sw - p.pad_left;
    float acc = p.max ? -INFINITY : 0.f;
    int64_t count = 0, padded_count = 0;
    for (int64_t ky = 0; ky < p.kh; ++ky) {
      const int64_t iy = y0 + ky * p.dh;
      if (iy >= p.h + p.pad_bottom) break;
      for (int64_t kx = 0; kx < p.kw; ++kx) {
        const int64_t ix = x0 + kx * p.dw;
        if (ix >= p.w + p.pad_right) break;
        ++padded_count;
        if (iy < 0 || ix < 0 || iy >= p.h || ix >= p.w) continue;
        const float v = plane[iy * p.w + ix];
        acc = p.max ? fmaxf(acc, v) : acc + v;
        ++count;
      }
    }
    if (!p.max) {
      const int64_t div = p.count_include_pad ? padded_count : count;
      acc = div > 0 ? acc / static_cast<float>(div) : 0.f;
    }
    y[i] = acc;
  }
}

__global__ void reduce_rows_kernel(const float* x, float* y, int64_t rows, int64_t n, bool max) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float v = max ? -INFINITY : 0.f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) v = max ? fmaxf(v, x[r * n + k]) : v + x[r * n + k];
    v = block_reduce(v, max);
    if (threadIdx.x == 0) y[r] = max ? v : v / static_cast<float>(n);
  }
}

__global__ void batchnorm_kernel(const float* x, const float* scale, const float* bias, const float* mean,
                                 const float* var, float* y, int64_t n, int64_t c, int64_t inner, float eps) {
  KILN_GRID_LOOP(i, n) {
    const int64_t ch = i / inner % c;
    y[i] = (x[i] - mean[ch]) * rsqrtf(var[ch] + eps) * scale[ch] + bias[ch];
  }
}

__global__ void pad2d_kernel(const float* x, float* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t top, int64_t left) {
  const int64_t n = nc * oh * ow;
  KILN_GRID_LOOP(i, n) {
    const int64_t ox = i % ow, oy = i / ow % oh, c = i / (ow * oh);
    const int64_t iy = oy - top, ix = ox - left;
    y[i] = (iy >= 0 && ix >= 0 && iy < h && ix < w) ? x[(c * h + iy) * w + ix] : 0.f;
  }
}

}  // namespace

int launch_softmax_f32(const float* x, float* y, int64_t outer, int64_t axis, int64_t inner, bool log,
                       cudaStream_t stream) {
  const int64_t rows = outer * inner;
  if (rows <= 0 || axis <= 0) return cudaSuccess;
  softmax_kernel<<<rows_grid(rows), kThreads, 0, stream>>>(x, y, rows, axis, inner, log);
  return cudaGetLastError();
}

int launch_transpose(const void* x, void* y, int64_t n, int elem_bytes, const TransposeIndex& index,
                     cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  switch (elem_bytes) {
    case 1: transpose_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), n, index); break;
    case 2: transpose_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n, index); break;
    case 4: transpose_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), n, index); break;
    case 8: transpose_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const uint64_t*>(x), static_cast<uint64_t*>(y), n, index); break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

int launch_pool2d_f32(const float* x, float* y, const PoolParams& p, cudaStream_t stream) {
  const int64_t n = p.nc * p.oh * p.ow;
  if (n <= 0) return cudaSuccess;
  pool2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, p);
  return cudaGetLastError();
}

int launch_reduce_rows_f32(const float* x, float* y, int64_t rows, int64_t n, bool max, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  reduce_rows_kernel<<<rows_grid(rows), kThreads, 0, stream>>>(x, y, rows, n, max);
  return cudaGetLastError();
}

int launch_batchnorm_f32(const float* x, const float* scale, const float* bias, const float* mean, const float* var,
                         float* y, int64_t outer, int64_t c, int64_t inner, float epsilon, cudaStream_t stream) {
  const int64_t n = outer * c * inner;
  if (n <= 0) return cudaSuccess;
  batchnorm_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, scale, bias, mean, var, y, n, c, inner, epsilon);
  return cudaGetLastError();
}

int launch_pad2d_f32(const float* x, float* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                     int64_t top, int64_t left, cudaStream_t stream) {
  const int64_t n = nc * oh * ow;
  if (n <= 0) return cudaSuccess;
  pad2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, nc, h, w, oh, ow, top, left);
  return cudaGetLastError();
}

}  // namespace kiln::cuda
