// backends/cuda/cuda_misc.cu — CumSum/CumProd (one thread per line along the axis, accumulated in
// the type's compute type, sequentially as the CPU kernel does) and Trilu (a masked copy).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void cumulative_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool product, bool exclusive,
                                  bool reverse) {
  using C = compute_t<T>;
  KILN_GRID_LOOP(t, outer * inner) {
    const int64_t o = t / inner, in = t % inner;
    const T* xp = x + o * len * inner + in;
    T* yp = y + o * len * inner + in;
    C acc = product ? C(1) : C(0);
    for (int64_t s = 0; s < len; ++s) {
      const int64_t k = reverse ? len - 1 - s : s;
      const C v = convert<C>(xp[k * inner]);
      if (exclusive) {
        yp[k * inner] = convert<T>(acc);
        acc = product ? C(acc * v) : C(acc + v);
      } else {
        acc = product ? C(acc * v) : C(acc + v);
        yp[k * inner] = convert<T>(acc);
      }
    }
  }
}

template <typename T>
__global__ void trilu_kernel(const T* x, T* y, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper) {
  KILN_GRID_LOOP(i, n) {
    const int64_t j = i % cols, r = i / cols % rows;
    const bool keep = upper ? j - r >= k : j - r <= k;
    y[i] = keep ? x[i] : T(0);
  }
}

}  // namespace

int launch_cumulative(int elem, bool product, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                      bool exclusive, bool reverse, cudaStream_t stream) {
  if (outer * inner == 0 || len == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      cumulative_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner, product, exclusive, reverse);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

int launch_trilu(const void* x, void* y, int elem_bytes, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper,
                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    trilu_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, rows, cols, k,
                                                         upper);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
