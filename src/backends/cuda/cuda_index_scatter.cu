// backends/cuda/cuda_index_scatter.cu — TensorScatter: the update written into the cache at each batch's
// write index.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void tensor_scatter_kernel(T* y, const T* upd, const int64_t* widx, int64_t prefix, int64_t per_batch,
                                      int64_t max_len, int64_t len, int64_t inner, bool circular) {
  KILN_GRID_LOOP(i, prefix * len * inner) {
    const int64_t in = i % inner, s = i / inner % len, p = i / (inner * len);
    const int64_t b = p / (per_batch > 0 ? per_batch : 1);
    int64_t dst = (widx ? widx[b] : 0) + s;
    if (circular) dst = ((dst % max_len) + max_len) % max_len;
    if (dst < 0 || dst >= max_len) continue;
    y[(p * max_len + dst) * inner + in] = upd[i];
  }
}

}  // namespace

int launch_tensor_scatter(void* y, const void* update, const int64_t* write_indices, int64_t prefix, int64_t per_batch,
                          int64_t max_len, int64_t len, int64_t inner, int elem_bytes, bool circular, cudaStream_t stream) {
  const int64_t n = prefix * len * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    tensor_scatter_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(update),
                                                                   write_indices, prefix, per_batch, max_len, len, inner,
                                                                   circular);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
