// backends/cuda/cuda_f8.cu — the activation side of kiln.F8MatMul (cuda_gemm.cpp): float32, float16
// or bfloat16 values to float8 E4M3 (x · inv_scale, nearest even, saturating at ±448; NaN stays NaN),
// as the CPU reference does it (backends/cpu/nn_qconv.cpp). Eight values per thread (a 16-byte load of
// 2-byte types, an 8-byte store) where the pointers are 16-byte aligned and n is a multiple of 8 (always,
// for F8MatMul: K is), else one.
#include <cuda_fp8.h>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

__device__ inline float to_float(float v) { return v; }
__device__ inline float to_float(__half v) { return __half2float(v); }
__device__ inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ inline uint8_t e4m3(float v) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

template <typename T>
__global__ void quantize_e4m3_kernel(const T* __restrict__ x, uint8_t* __restrict__ y, int64_t n, float inv) {
  const int64_t groups = n / 8;
  KILN_GRID_LOOP(g, groups) {
    T v[8];
    if constexpr (sizeof(T) == 2) {
      *reinterpret_cast<uint4*>(v) = reinterpret_cast<const uint4*>(x)[g];
    } else {
      *reinterpret_cast<float4*>(v) = reinterpret_cast<const float4*>(x)[2 * g];
      *reinterpret_cast<float4*>(v + 4) = reinterpret_cast<const float4*>(x)[2 * g + 1];
    }
    uint8_t q[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) q[j] = e4m3(to_float(v[j]) * inv);
    reinterpret_cast<uint2*>(y)[g] = *reinterpret_cast<const uint2*>(q);
  }
}

// One value per thread, for pointers without the vector kernel's alignment.
template <typename T>
__global__ void quantize_e4m3_scalar(const T* __restrict__ x, uint8_t* __restrict__ y, int64_t n, float inv) {
  KILN_GRID_LOOP(i, n) y[i] = e4m3(to_float(x[i]) * inv);
}

template <typename T>
void launch_typed(const void* x, uint8_t* y, int64_t n, float inv, cudaStream_t stream) {
  const T* xt = static_cast<const T*>(x);
  if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y)) % 16 != 0 || n % 8 != 0)
    quantize_e4m3_scalar<<<grid_for(n), kThreads, 0, stream>>>(xt, y, n, inv);
  else
    quantize_e4m3_kernel<<<grid_for(n / 8), kThreads, 0, stream>>>(xt, y, n, inv);
}

}  // namespace

int launch_quantize_e4m3(int elem, const void* x, uint8_t* y, int64_t n, float inv_scale, cudaStream_t stream) {
  if (n <= 0) return 0;
  switch (elem) {
    case kElemF32: launch_typed<float>(x, y, n, inv_scale, stream); break;
    case kElemF16: launch_typed<__half>(x, y, n, inv_scale, stream); break;
    case kElemBF16: launch_typed<__nv_bfloat16>(x, y, n, inv_scale, stream); break;
    default: return static_cast<int>(cudaErrorInvalidValue);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
