// backends/cuda/cuda_index_one_hot.cu — OneHot: the on value where the index is, the off value elsewhere.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename I, typename T>
__global__ void one_hot_kernel(const I* ind, const T* values, T* y, int64_t outer, int64_t depth, int64_t inner) {
  KILN_GRID_LOOP(t, outer * depth * inner) {
    const int64_t i = t % inner, d = t / inner % depth, o = t / (inner * depth);
    int64_t v = static_cast<int64_t>(convert<double>(ind[o * inner + i]));
    if (v < 0) v += depth;
    y[t] = v == d ? values[1] : values[0];
  }
}

}  // namespace

int launch_one_hot(const void* indices, int index_elem, const void* values, void* y, int64_t outer, int64_t depth,
                   int64_t inner, int elem_bytes, cudaStream_t stream) {
  const int64_t n = outer * depth * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(index_elem, [&](auto it) {
    using I = decltype(it);
    return dispatch_bytes(elem_bytes, [&](auto vt) {
      using T = decltype(vt);
      one_hot_kernel<I, T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const I*>(indices), static_cast<const T*>(values),
                                                                 static_cast<T*>(y), outer, depth, inner);
      return static_cast<int>(cudaGetLastError());
    });
  });
}

}  // namespace kiln::cuda
