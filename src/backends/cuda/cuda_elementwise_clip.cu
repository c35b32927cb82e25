// backends/cuda/cuda_elementwise_clip.cu — Clip for the types launch_unary does not take (the
// elementwise table's Clip row: cuda_elementwise.cpp).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void clip_kernel(const T* x, T* y, int64_t n, T lo, T hi) {
  KILN_GRID_LOOP(i, n) {
    // max(v, lo) then min(., hi), as numpy's clip and the CPU kernel: max wins when min > max; NaN stays
    const T v = x[i] < lo ? lo : x[i];
    y[i] = v > hi ? hi : v;
  }
}

}  // namespace

int launch_clip(int elem, const void* x, void* y, int64_t n, double lo, double hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value || sizeof(T) == 2 && !std::is_integral<T>::value) {
      return static_cast<int>(cudaErrorInvalidValue);  // bool; the 16-bit floats go through launch_unary
    } else {
      clip_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<T>(lo),
                                                           static_cast<T>(hi));
      return static_cast<int>(cudaGetLastError());
    }
  });
}

}  // namespace kiln::cuda
