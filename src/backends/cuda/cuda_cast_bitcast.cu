// backends/cuda/cuda_cast_bitcast.cu — BitCast's 4-bit case: the low nibble, sign-extended to int4.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

__global__ void nibble_kernel(const uint8_t* x, uint8_t* y, int64_t n, bool to_int4) {
  KILN_GRID_LOOP(i, n) {
    const uint8_t nib = x[i] & 0x0f;
    y[i] = to_int4 && (nib & 0x08) ? static_cast<uint8_t>(nib | 0xf0) : nib;
  }
}

}  // namespace

int launch_bitcast_nibbles(const uint8_t* x, uint8_t* y, int64_t n, bool to_int4, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  nibble_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, to_int4);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
