// backends/cuda/cuda_norm_misc.cu — group-wise normalizations, LRN, window functions and the direct
// batched MatMul for the types cuBLASLt is not used for.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// The element offsets of batch entry bt in A and B (broadcast batch dims have stride 0).
__device__ __forceinline__ void batch_offsets(const MatMulIndex& ix, int64_t bt, int64_t& ao, int64_t& bo) {
  ao = bo = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    const int64_t cd = bt % ix.dims[d];
    bt /= ix.dims[d];
    ao += cd * ix.a_strides[d];
    bo += cd * ix.b_strides[d];
  }
}

template <typename T>
__global__ void group_norm_kernel(const T* x, const T* scale, const T* bias, bool per_channel, T* y, int64_t n, int64_t c,
                                  int64_t s, int64_t groups, double eps) {
  const int64_t cg = c / groups, len = cg * s;
  KILN_GRID_LOOP(ng, n * groups) {
    const T* p = x + ng * len;
    double sum = 0;
    for (int64_t i = 0; i < len; ++i) sum += convert<double>(p[i]);
    const double mean = len ? sum / len : 0;
    double q = 0;
    for (int64_t i = 0; i < len; ++i) {
      const double d = convert<double>(p[i]) - mean;
      q += d * d;
    }
    const double inv = 1.0 / sqrt((len ? q / len : 0) + eps);
    const int64_t g = ng % groups;
    for (int64_t k = 0; k < cg; ++k) {
      const int64_t ch = g * cg + k;
      const double sc = convert<double>(scale[per_channel ? ch : g]), bb = convert<double>(bias[per_channel ? ch : g]);
      for (int64_t i = 0; i < s; ++i) y[ng * len + k * s + i] = convert<T>((convert<double>(p[k * s + i]) - mean) * inv * sc + bb);
    }
  }
}

template <typename T>
__global__ void lrn_kernel(const T* x, T* y, int64_t n, int64_t c, int64_t s, int64_t size, double alpha, double beta,
                           double bias) {
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  KILN_GRID_LOOP(t, n * c * s) {
    const int64_t i = t % s, ch = t / s % c, b = t / (s * c);
    const int64_t c0 = ch - before < 0 ? 0 : ch - before, c1 = ch + after > c - 1 ? c - 1 : ch + after;
    double sq = 0;
    for (int64_t k = c0; k <= c1; ++k) {
      const double v = convert<double>(x[(b * c + k) * s + i]);
      sq += v * v;
    }
    y[t] = convert<T>(convert<double>(x[t]) / pow(bias + alpha / size * sq, beta));
  }
}

template <typename T>
__global__ void window_kernel(int kind, T* y, int64_t n, bool periodic) {
  const double denom = static_cast<double>(periodic ? n : n - 1);
  KILN_GRID_LOOP(i, n) {
    const double a = 2 * 3.14159265358979323846 * static_cast<double>(i) / denom;
    double v;
    if (kind == 0) v = 0.5 - 0.5 * cos(a);
    else if (kind == 1) v = 25.0 / 46.0 - (1 - 25.0 / 46.0) * cos(a);
    else v = 0.42 - 0.5 * cos(a) + 0.08 * cos(2 * a);
    y[i] = convert<T>(v);
  }
}

template <typename T>
__global__ void matmul_direct_kernel(const T* a, const T* b, T* y, MatMulIndex ix) {
  int64_t batches = 1;
  for (int d = 0; d < ix.rank; ++d) batches *= ix.dims[d];
  KILN_GRID_LOOP(t, batches * ix.m * ix.n) {
    const int64_t j = t % ix.n, i = t / ix.n % ix.m, bt = t / (ix.n * ix.m);
    int64_t ao, bo;
    batch_offsets(ix, bt, ao, bo);
    compute_t<T> acc = 0;
    for (int64_t k = 0; k < ix.k; ++k) acc += convert<compute_t<T>>(a[ao + i * ix.k + k]) * convert<compute_t<T>>(b[bo + k * ix.n + j]);
    y[t] = convert<T>(acc);
  }
}

__device__ __forceinline__ int32_t q8(const void* p, bool is_signed, int64_t i) {
  return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
}
__device__ __forceinline__ float scale_at(const void* p, bool f16) {
  return f16 ? __half2float(static_cast<const __half*>(p)[0]) : static_cast<const float*>(p)[0];
}

__global__ void qmatmul_kernel(QMatMulArgs q) {
  const MatMulIndex& ix = q.index;
  int64_t batches = 1;
  for (int d = 0; d < ix.rank; ++d) batches *= ix.dims[d];
  const int32_t za = q.za ? q8(q.za, q.a_signed, 0) : 0, zb = q.zb ? q8(q.zb, q.b_signed, 0) : 0;
  KILN_GRID_LOOP(t, batches * ix.m * ix.n) {
    const int64_t j = t % ix.n, i = t / ix.n % ix.m, bt = t / (ix.n * ix.m);
    int64_t ao, bo;
    batch_offsets(ix, bt, ao, bo);
    int32_t acc = 0;
    for (int64_t k = 0; k < ix.k; ++k)
      acc += (q8(q.a, q.a_signed, ao + i * ix.k + k) - za) * (q8(q.b, q.b_signed, bo + k * ix.n + j) - zb);
    if (!q.qlinear) {
      static_cast<int32_t*>(q.y)[t] = acc;
      continue;
    }
    const float f = scale_at(q.sa, q.scale_f16) * scale_at(q.sb, q.scale_f16) / scale_at(q.sy, q.scale_f16);
    double v = rint(static_cast<double>(acc) * static_cast<double>(f) + (q.zy ? q8(q.zy, q.y_signed, 0) : 0));
    const double lo = q.y_signed ? -128.0 : 0.0, hi = q.y_signed ? 127.0 : 255.0;
    v = v < lo ? lo : v > hi ? hi : v;
    if (q.y_signed) static_cast<int8_t*>(q.y)[t] = static_cast<int8_t>(v);
    else static_cast<uint8_t*>(q.y)[t] = static_cast<uint8_t>(v);
  }
}

template <typename F>
int dispatch_real(int elem, F&& f) {
  if (elem == kElemF64) return f(double{});
  return dispatch_float(elem, f);
}

}  // namespace

int launch_group_norm(int elem, const void* x, const void* scale, const void* bias, bool per_channel, void* y, int64_t n,
                      int64_t c, int64_t s, int64_t groups, double eps, cudaStream_t stream) {
  if (n * groups == 0 || groups < 1 || c % groups != 0) return n * groups == 0 ? cudaSuccess : cudaErrorInvalidValue;
  return dispatch_real(elem, [&](auto tag) {
    using T = decltype(tag);
    group_norm_kernel<T><<<grid_for(n * groups, 64), 64, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(scale),
                                                                      static_cast<const T*>(bias), per_channel, static_cast<T*>(y),
                                                                      n, c, s, groups, eps);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_lrn(int elem, const void* x, void* y, int64_t n, int64_t c, int64_t s, int64_t size, double alpha, double beta,
               double bias, cudaStream_t stream) {
  if (n * c * s == 0) return cudaSuccess;
  return dispatch_real(elem, [&](auto tag) {
    using T = decltype(tag);
    lrn_kernel<T><<<grid_for(n * c * s), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, c, s, size,
                                                                alpha, beta, bias);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_window(int kind, int elem, void* y, int64_t n, bool periodic, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    window_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(kind, static_cast<T*>(y), n, periodic);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_qmatmul(const QMatMulArgs& a, cudaStream_t stream) {
  int64_t total = a.index.m * a.index.n;
  for (int d = 0; d < a.index.rank; ++d) total *= a.index.dims[d];
  if (total == 0) return cudaSuccess;
  qmatmul_kernel<<<grid_for(total), kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_matmul_direct(int elem, const void* a, const void* b, void* y, const MatMulIndex& index, cudaStream_t stream) {
  int64_t total = index.m * index.n;
  for (int d = 0; d < index.rank; ++d) total *= index.dims[d];
  if (total == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      matmul_direct_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                        static_cast<T*>(y), index);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

}  // namespace kiln::cuda
