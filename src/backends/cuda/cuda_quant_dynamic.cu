// backends/cuda/cuda_quant_dynamic.cu — DynamicQuantizeLinear: the range of x (with 0), then uint8.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// One block: min and max over x (with 0 in range), then scale and zero point.
__global__ void dq_params_kernel(const float* x, int64_t n, float* scale, uint8_t* zp) {
  __shared__ float lo[kThreads], hi[kThreads];
  float mn = 0, mx = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    mn = fminf(mn, x[i]);
    mx = fmaxf(mx, x[i]);
  }
  lo[threadIdx.x] = mn;
  hi[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      lo[threadIdx.x] = fminf(lo[threadIdx.x], lo[threadIdx.x + s]);
      hi[threadIdx.x] = fmaxf(hi[threadIdx.x], hi[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float sc = (hi[0] == lo[0] ? 1.0f : hi[0] - lo[0]) / 255.0f;
    const float z = rintf(fminf(fmaxf(0.0f - lo[0] / sc, 0.0f), 255.0f));
    scale[0] = sc;
    zp[0] = static_cast<uint8_t>(z);
  }
}

__global__ void dq_apply_kernel(const float* x, uint8_t* y, const float* scale, const uint8_t* zp, int64_t n) {
  const float sc = scale[0], z = zp[0];
  KILN_GRID_LOOP(i, n) {
    const float q = rintf(x[i] / sc) + z;
    y[i] = static_cast<uint8_t>(fminf(fmaxf(q, 0.0f), 255.0f));
  }
}

}  // namespace

int launch_dynamic_quantize(const float* x, uint8_t* y, float* scale, uint8_t* zp, int64_t n, cudaStream_t stream) {
  dq_params_kernel<<<1, kThreads, 0, stream>>>(x, n, scale, zp);
  if (n > 0) dq_apply_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, scale, zp, n);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
