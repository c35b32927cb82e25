// backends/cuda/cuda_signal.cu — DFT (direct, in double) and the window functions, as the CPU kernels
// compute them.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

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
__global__ void dft_kernel(DftArgs a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t cin = a.complex_in ? 2 : 1;
  const double sign = a.inverse ? 1.0 : -1.0, scale = a.inverse ? 1.0 / static_cast<double>(a.n) : 1.0;
  KILN_GRID_LOOP(t, a.outer * a.m * a.inner) {
    const int64_t i = t % a.inner, kk = t / a.inner % a.m, o = t / (a.inner * a.m);
    auto in_at = [&](int64_t s, double& re, double& im) {
      const int64_t e = (o * a.len + s) * a.inner + i;
      re = convert<double>(x[e * cin]);
      im = a.complex_in ? convert<double>(x[e * cin + 1]) : 0.0;
    };
    double sr = 0, si = 0;
    int64_t tw = 0;
    for (int64_t s = 0; s < a.n; ++s) {
      double re = 0, im = 0;
      if (a.real_out) {  // Hermitian extension of the half spectrum (irfft)
        const int64_t half = a.n / 2;
        if (s <= half) {
          if (s < a.len) in_at(s, re, im);
        } else if (a.n - s < a.len) {
          in_at(a.n - s, re, im);
          im = -im;
        }
      } else if (s < a.len) {
        in_at(s, re, im);
      }
      const double ang = sign * 2 * 3.14159265358979323846 * static_cast<double>(tw) / static_cast<double>(a.n);
      const double c = cos(ang), sn = sin(ang);
      sr += re * c - im * sn;
      si += re * sn + im * c;
      tw += kk;
      if (tw >= a.n) tw %= a.n;
    }
    if (a.real_out) {
      y[t] = convert<T>(sr * scale);
    } else {
      y[2 * t] = convert<T>(sr * scale);
      y[2 * t + 1] = convert<T>(si * scale);
    }
  }
}

template <typename F>
int dispatch_real(int elem, F&& f) {
  if (elem == kElemF64) return f(double{});
  return dispatch_float(elem, f);
}

}  // namespace

int launch_window(int kind, int elem, void* y, int64_t n, bool periodic, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    window_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(kind, static_cast<T*>(y), n, periodic);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_dft(const DftArgs& a, cudaStream_t stream) {
  const int64_t total = a.outer * a.m * a.inner;
  if (total == 0) return cudaSuccess;
  return dispatch_real(a.elem, [&](auto tag) {
    using T = decltype(tag);
    dft_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
