// backends/cuda/cuda_nn.cu — pooling, row reductions, batch norm, padding (float32).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

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
