// backends/cuda/cuda_nn.cu — pooling, row reductions, batch norm, padding (float types, computed in float).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void pool2d_kernel(const T* x, T* y, PoolParams p) {
  const int64_t n = p.nc * p.oh * p.ow;
  KILN_GRID_LOOP(i, n) {
    const int64_t ox = i % p.ow, oy = i / p.ow % p.oh, c = i / (p.ow * p.oh);
    const T* plane = x + c * p.h * p.w;
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
        const float v = convert<float>(plane[iy * p.w + ix]);
        acc = p.max ? fmaxf(acc, v) : acc + v;
        ++count;
      }
    }
    if (!p.max) {
      const int64_t div = p.count_include_pad ? padded_count : count;
      acc = div > 0 ? acc / static_cast<float>(div) : 0.f;
    }
    y[i] = convert<T>(acc);
  }
}

template <typename T>
__global__ void reduce_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, bool max) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float v = max ? -INFINITY : 0.f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const float e = convert<float>(x[r * n + k]);
      v = max ? fmaxf(v, e) : v + e;
    }
    v = block_reduce(v, max);
    if (threadIdx.x == 0) y[r] = convert<T>(max ? v : v / static_cast<float>(n));
  }
}

template <typename T>
__global__ void batchnorm_kernel(const T* x, const T* scale, const T* bias, const T* mean, const T* var, T* y, int64_t n,
                                 int64_t c, int64_t inner, float eps) {
  KILN_GRID_LOOP(i, n) {
    const int64_t ch = i / inner % c;
    const float v = (convert<float>(x[i]) - convert<float>(mean[ch])) * rsqrtf(convert<float>(var[ch]) + eps);
    y[i] = convert<T>(v * convert<float>(scale[ch]) + convert<float>(bias[ch]));
  }
}

template <typename T>
__global__ void pad2d_kernel(const T* x, T* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                             int64_t top, int64_t left) {
  const int64_t n = nc * oh * ow;
  KILN_GRID_LOOP(i, n) {
    const int64_t ox = i % ow, oy = i / ow % oh, c = i / (ow * oh);
    const int64_t iy = oy - top, ix = ox - left;
    y[i] = (iy >= 0 && ix >= 0 && iy < h && ix < w) ? x[(c * h + iy) * w + ix] : T(0);
  }
}

}  // namespace

int launch_pool2d(int elem, const void* x, void* y, const PoolParams& p, cudaStream_t stream) {
  const int64_t n = p.nc * p.oh * p.ow;
  if (n <= 0) return cudaSuccess;
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    pool2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_reduce_rows(int elem, const void* x, void* y, int64_t rows, int64_t n, bool max, cudaStream_t stream) {
  if (rows <= 0) return cudaSuccess;
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    reduce_rows_kernel<<<rows_grid(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, n, max);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_batchnorm(int elem, const void* x, const void* scale, const void* bias, const void* mean, const void* var,
                     void* y, int64_t outer, int64_t c, int64_t inner, float epsilon, cudaStream_t stream) {
  const int64_t n = outer * c * inner;
  if (n <= 0) return cudaSuccess;
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    batchnorm_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(scale),
                                                           static_cast<const T*>(bias), static_cast<const T*>(mean),
                                                           static_cast<const T*>(var), static_cast<T*>(y), n, c, inner,
                                                           epsilon);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_pad2d(int elem_bytes, const void* x, void* y, int64_t nc, int64_t h, int64_t w, int64_t oh, int64_t ow,
                 int64_t top, int64_t left, cudaStream_t stream) {
  const int64_t n = nc * oh * ow;
  if (n <= 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto t) {
    using T = decltype(t);
    pad2d_kernel<<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), nc, h, w, oh, ow, top,
                                                       left);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
