// backends/cuda/cuda_shape_eye_like.cu — EyeLike: ones on the k-th diagonal.
#include <cstring>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void eye_kernel(T* y, int64_t rows, int64_t cols, int64_t k, T one) {
  KILN_GRID_LOOP(i, rows * cols) y[i] = (i % cols) - (i / cols) == k ? one : T(0);
}

}  // namespace

int launch_eye(void* y, int64_t rows, int64_t cols, int64_t k, int elem_bytes, uint64_t one_bits, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    T one;
    memcpy(&one, &one_bits, sizeof(T));
    eye_kernel<T><<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(y), rows, cols, k, one);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
