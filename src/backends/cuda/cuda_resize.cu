// backends/cuda/cuda_resize.cu — Resize on the GPU: one thread per output element, the taps of
// ops/resize_math.h (the CPU kernel's own) along each resized axis, accumulated in double.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

struct TapSink {
  int64_t* idx;
  double* w;
  int n;
  __host__ __device__ void operator()(int64_t i, double weight) {
    if (n < 4) {  // at most 4 taps without antialias (cubic); the host refuses antialias
      idx[n] = i;
      w[n] = weight;
      ++n;
    }
  }
};

template <typename T>
__global__ void resize_kernel(const T* x, T* y, int64_t n, ResizeIndex p, resize::Coef c, double extrapolation) {
  KILN_GRID_LOOP(i, n) {
    int64_t coord[kMaxRank];
    int64_t rem = i;
    for (int d = p.rank - 1; d >= 0; --d) {
      coord[d] = rem % p.out_dims[d];
      rem /= p.out_dims[d];
    }
    int64_t tap_idx[kMaxRank][4];
    double tap_w[kMaxRank][4];
    int taps[kMaxRank];
    int64_t base = 0;
    bool extrapolate = false;
    for (int d = 0; d < p.rank; ++d) {
      taps[d] = 1;
      if (!p.resized[d]) {
        base += coord[d] * p.in_strides[d];
        tap_idx[d][0] = 0;
        tap_w[d][0] = 1;
        continue;
      }
      TapSink sink{tap_idx[d], tap_w[d], 0};
      extrapolate |= resize::for_each_tap(c, p.axes[d], coord[d], sink);
      taps[d] = sink.n;
    }
    if (extrapolate) {
      y[i] = convert<T>(static_cast<float>(extrapolation));
      continue;
    }
    // Every combination of one tap per axis (odometer over the axes' tap counts).
    int pick[kMaxRank] = {};
    double acc = 0;
    for (;;) {
      int64_t off = base;
      double w = 1;
      for (int d = 0; d < p.rank; ++d) {
        if (!p.resized[d]) continue;
        off += tap_idx[d][pick[d]] * p.in_strides[d];
        w *= tap_w[d][pick[d]];
      }
      acc += w * static_cast<double>(convert<float>(x[off]));
      int d = p.rank - 1;
      while (d >= 0 && ++pick[d] >= taps[d]) pick[d--] = 0;
      if (d < 0) break;
    }
    y[i] = convert<T>(static_cast<float>(acc));
  }
}

}  // namespace

int launch_resize(int elem, const void* x, void* y, int64_t n, const ResizeIndex& index, const resize::Coef& coef,
                  double extrapolation, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_float(elem, [&](auto tag) {
    using T = decltype(tag);
    resize_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, index, coef,
                                                          extrapolation);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
