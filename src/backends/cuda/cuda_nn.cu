// backends/cuda/cuda_nn.cu — pooling, row reductions, batch norm, padding (float types, computed in float).
#include <algorithm>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// NCHW: one thread per output element, the plane's pixels one apart. Channels-last: consecutive
// threads take consecutive channels of one output pixel (coalesced reads), pixels C apart.
template <typename T, bool kNhwc>
__global__ void pool2d_kernel(const T* x, T* y, PoolParams p) {
  const int64_t n = p.nc * p.oh * p.ow;
  KILN_GRID_LOOP(i, n) {
    int64_t ox, oy, step;
    const T* plane;
    if (kNhwc) {
      const int64_t ch = i % p.c, pix = i / p.c;
      ox = pix % p.ow;
      oy = pix / p.ow % p.oh;
      plane = x + pix / (p.ow * p.oh) * p.h * p.w * p.c + ch;
      step = p.c;
    } else {
      ox = i % p.ow;
      oy = i / p.ow % p.oh;
      plane = x + i / (p.ow * p.oh) * p.h * p.w;
      step = 1;
    }
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
        const float v = convert<float>(plane[(iy * p.w + ix) * step]);
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

// Global pooling, channels-last: block (32 channels, 8 pixel lanes), grid (channel tiles, N, splits of
// HW). Each block reduces its HW slice; one split writes Y, several write float partials.
template <typename T>
__global__ void global_pool_nhwc_kernel(const T* x, T* y, float* partial, int64_t n, int64_t hw, int64_t c,
                                        int64_t per_split, bool max) {
  __shared__ float part[8][33];
  const int64_t ch = blockIdx.x * 32 + threadIdx.x, b = blockIdx.y;
  const int64_t s0 = blockIdx.z * per_split, s1 = min(hw, s0 + per_split);
  float acc = max ? -INFINITY : 0.f;
  if (ch < c)
    for (int64_t s = s0 + threadIdx.y; s < s1; s += 8) {
      const float e = convert<float>(x[(b * hw + s) * c + ch]);
      acc = max ? fmaxf(acc, e) : acc + e;
    }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= c) return;
  for (int k = 1; k < 8; ++k) acc = max ? fmaxf(acc, part[k][threadIdx.x]) : acc + part[k][threadIdx.x];
  if (gridDim.z == 1) y[b * c + ch] = convert<T>(max ? acc : acc / static_cast<float>(hw));
  else partial[(blockIdx.z * n + b) * c + ch] = acc;
}

template <typename T>
__global__ void global_pool_finish_kernel(const float* partial, T* y, int64_t nc, int64_t splits, int64_t hw, bool max) {
  KILN_GRID_LOOP(i, nc) {
    float acc = partial[i];
    for (int64_t s = 1; s < splits; ++s) acc = max ? fmaxf(acc, partial[s * nc + i]) : acc + partial[s * nc + i];
    y[i] = convert<T>(max ? acc : acc / static_cast<float>(hw));
  }
}

// Channels-last pooling, V = 16 bytes of channels per thread (c % V == 0, 16-byte aligned tensors):
// one 16-byte load per window pixel; 32-bit indices when the tensors are small enough, so the
// index arithmetic does not dominate (64-bit division is slow on the GPU).
template <typename T, typename Idx>
__global__ void pool2d_nhwc_vec_kernel(const T* x, T* y, PoolParams p) {
  constexpr int V = 16 / sizeof(T);
  const Idx c = static_cast<Idx>(p.c), cv = c / V, h = static_cast<Idx>(p.h), w = static_cast<Idx>(p.w);
  const Idx oh = static_cast<Idx>(p.oh), ow = static_cast<Idx>(p.ow);
  const Idx n = static_cast<Idx>(p.nc / p.c) * oh * ow * cv;
  for (Idx i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const Idx vc = i % cv, pix = i / cv, ox = pix % ow, oy = pix / ow % oh, b = pix / (ow * oh);
    const T* base = x + b * h * w * c + vc * V;
    const Idx y0 = oy * static_cast<Idx>(p.sh) - static_cast<Idx>(p.pad_top);
    const Idx x0 = ox * static_cast<Idx>(p.sw) - static_cast<Idx>(p.pad_left);
    float acc[V];
    for (int v = 0; v < V; ++v) acc[v] = p.max ? -INFINITY : 0.f;
    int count = 0, padded_count = 0;
    for (Idx ky = 0; ky < static_cast<Idx>(p.kh); ++ky) {
      const Idx iy = y0 + ky * static_cast<Idx>(p.dh);
      if (iy >= h + static_cast<Idx>(p.pad_bottom)) break;
      for (Idx kx = 0; kx < static_cast<Idx>(p.kw); ++kx) {
        const Idx ix = x0 + kx * static_cast<Idx>(p.dw);
        if (ix >= w + static_cast<Idx>(p.pad_right)) break;
        ++padded_count;
        if (iy < 0 || ix < 0 || iy >= h || ix >= w) continue;
        const uint4 raw = *reinterpret_cast<const uint4*>(base + (iy * w + ix) * c);
        const T* e = reinterpret_cast<const T*>(&raw);
        for (int v = 0; v < V; ++v) {
          const float f = convert<float>(e[v]);
          acc[v] = p.max ? fmaxf(acc[v], f) : acc[v] + f;
        }
        ++count;
      }
    }
    const int div = p.count_include_pad ? padded_count : count;
    uint4 out;
    T* o = reinterpret_cast<T*>(&out);
    for (int v = 0; v < V; ++v) o[v] = convert<T>(p.max ? acc[v] : (div > 0 ? acc[v] / static_cast<float>(div) : 0.f));
    *reinterpret_cast<uint4*>(y + i * V) = out;
  }
}

template <typename T, typename Idx>
__global__ void pad_rows_kernel(const T* x, T* y, Idx rows, Idx c, Idx cp) {
  for (Idx i = blockIdx.x * blockDim.x + threadIdx.x; i < rows * cp; i += gridDim.x * blockDim.x) {
    const Idx r = i / cp, k = i % cp;
    y[i] = k < c ? x[r * c + k] : T(0);
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
    constexpr int V = 16 / sizeof(T);
    const bool vec = p.c > 0 && p.c % V == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(y) % 16 == 0;
    const bool small = p.nc * std::max(p.h * p.w, p.oh * p.ow) < (int64_t{1} << 31);
    if (vec && small)
      pool2d_nhwc_vec_kernel<T, int32_t><<<grid_for(n / V), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
    else if (vec)
      pool2d_nhwc_vec_kernel<T, int64_t><<<grid_for(n / V), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
    else if (p.c > 0)
      pool2d_kernel<T, true><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
    else pool2d_kernel<T, false><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), p);
    return static_cast<int>(cudaGetLastError());
  });
}

int64_t global_pool_splits(int64_t n, int64_t hw, int64_t c) {
  // Enough blocks for two waves on a large GPU; a split keeps at least 64 pixels.
  const int64_t blocks = (c + 31) / 32 * n;
  const int64_t want = (264 + blocks - 1) / blocks;
  return std::max<int64_t>(1, std::min<int64_t>(want, hw / 64));
}

int launch_global_pool_nhwc(int elem, const void* x, void* y, void* workspace, int64_t n, int64_t hw, int64_t c, bool max,
                            cudaStream_t stream) {
  if (n <= 0 || c <= 0) return cudaSuccess;
  const int64_t splits = global_pool_splits(n, hw, c);
  if (splits > 1 && !workspace) return static_cast<int>(cudaErrorInvalidValue);
  const int64_t per_split = (hw + splits - 1) / splits;
  const dim3 grid(static_cast<unsigned>((c + 31) / 32), static_cast<unsigned>(n), static_cast<unsigned>(splits));
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    float* partial = static_cast<float*>(workspace);
    global_pool_nhwc_kernel<<<grid, dim3(32, 8), 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), partial, n, hw, c,
                                                              per_split, max);
    if (splits > 1)
      global_pool_finish_kernel<<<grid_for(n * c), kThreads, 0, stream>>>(partial, static_cast<T*>(y), n * c, splits, hw, max);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_pad_rows(int elem_bytes, const void* x, void* y, int64_t rows, int64_t c, int64_t cp, cudaStream_t stream) {
  if (rows * cp <= 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto t) {
    using T = decltype(t);
    if (rows * cp < (int64_t{1} << 31))
      pad_rows_kernel<T, int32_t><<<grid_for(rows * cp), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), static_cast<int32_t>(rows), static_cast<int32_t>(c), static_cast<int32_t>(cp));
    else
      pad_rows_kernel<T, int64_t><<<grid_for(rows * cp), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, c,
                                                                              cp);
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
