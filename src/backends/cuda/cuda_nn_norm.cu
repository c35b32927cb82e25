// backends/cuda/cuda_nn_norm.cu — group-wise normalizations, LRN and LpNormalization.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

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

template <typename T, typename C>
__global__ void lp_norm_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, int p) {
  KILN_GRID_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * len * inner + t % inner;
    C norm = 0;
    for (int64_t k = 0; k < len; ++k) {
      const C v = convert<C>(x[base + k * inner]);
      norm += p == 1 ? (v < 0 ? -v : v) : v * v;
    }
    if (p == 2) norm = sqrt(norm);
    for (int64_t k = 0; k < len; ++k) y[base + k * inner] = convert<T>(norm == 0 ? C(0) : convert<C>(x[base + k * inner]) / norm);
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

int launch_lp_norm(int elem, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, int p, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  if (elem == kElemF64) {
    lp_norm_kernel<double, double><<<grid_for(outer * inner), kThreads, 0, stream>>>(
        static_cast<const double*>(x), static_cast<double*>(y), outer, len, inner, p);
    return static_cast<int>(cudaGetLastError());
  }
  return dispatch_float(elem, [&](auto tag) {
    using T = decltype(tag);
    lp_norm_kernel<T, float><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                               outer, len, inner, p);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
