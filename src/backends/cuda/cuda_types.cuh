// backends/cuda/cuda_types.cuh — element types on the device (nvcc only): conversions between the
// storage types kiln tensors use and the types kernels compute in, and the launch geometry helpers
// shared by the *.cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "backends/cuda/cuda_kernels.h"

namespace kiln::cuda {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int threads = kThreads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8);  // grid-stride loops cover the rest
}
// Whether p may be read or written 16 bytes at a time (uint4, float4).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }
inline unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(rows < 2147483647 ? rows : 2147483647); }

#define KILN_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

// Reduces v over the block (sum or max); every thread gets the result.
__device__ inline float block_reduce(float v, bool max) {
  __shared__ float partial[32];
  __syncthreads();  // partial may still be read by a previous call
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = max ? fmaxf(v, o) : v + o;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = blockDim.x / 32;
  v = lane < warps ? partial[lane] : (max ? -FLT_MAX : 0.f);
  for (int off = 16; off > 0; off >>= 1) {
    const float o = __shfl_xor_sync(0xffffffffu, v, off);
    v = max ? fmaxf(v, o) : v + o;
  }
  return v;
}

// The type a storage type computes in: float for the 16-bit floats, itself otherwise.
template <typename T> struct Compute { using type = T; };
template <> struct Compute<__half> { using type = float; };
template <> struct Compute<__nv_bfloat16> { using type = float; };
template <typename T> using compute_t = typename Compute<T>::type;

template <typename To, typename From>
__device__ __forceinline__ To convert(From v) {
  if constexpr (std::is_same<From, __half>::value || std::is_same<From, __nv_bfloat16>::value) {
    return convert<To>(static_cast<float>(v));
  } else if constexpr (std::is_same<To, __half>::value) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same<To, __nv_bfloat16>::value) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else if constexpr (std::is_same<To, bool>::value) {
    return v != From(0);
  } else {
    return static_cast<To>(v);
  }
}

// Calls f(T{}) with T the storage type of `elem`; returns cudaErrorInvalidValue for other types.
template <typename F>
int dispatch_float(int elem, F&& f) {
  switch (elem) {
    case kElemF32: return f(float{});
    case kElemF16: return f(__half{});
    case kElemBF16: return f(__nv_bfloat16{});
    default: return cudaErrorInvalidValue;
  }
}
template <typename F>
int dispatch_numeric(int elem, F&& f) {
  switch (elem) {
    case kElemF32: return f(float{});
    case kElemF16: return f(__half{});
    case kElemBF16: return f(__nv_bfloat16{});
    case kElemF64: return f(double{});
    case kElemI8: return f(int8_t{});
    case kElemI16: return f(int16_t{});
    case kElemI32: return f(int32_t{});
    case kElemI64: return f(int64_t{});
    case kElemU8: return f(uint8_t{});
    case kElemU16: return f(uint16_t{});
    case kElemU32: return f(uint32_t{});
    case kElemU64: return f(uint64_t{});
    case kElemBool: return f(bool{});
    default: return cudaErrorInvalidValue;
  }
}
// The float types and the signed integers (what reductions take).
template <typename F>
int dispatch_signed(int elem, F&& f) {
  switch (elem) {
    case kElemF32: return f(float{});
    case kElemF16: return f(__half{});
    case kElemBF16: return f(__nv_bfloat16{});
    case kElemF64: return f(double{});
    case kElemI8: return f(int8_t{});
    case kElemI16: return f(int16_t{});
    case kElemI32: return f(int32_t{});
    case kElemI64: return f(int64_t{});
    default: return cudaErrorInvalidValue;
  }
}
// Calls f(T{}, C{}) with T the storage type of a float `elem` and C the type it computes in: float for
// the 16-bit floats and float32, double for float64.
template <typename F>
int dispatch_real_compute(int elem, F&& f) {
  switch (elem) {
    case kElemF32: return f(float{}, float{});
    case kElemF16: return f(__half{}, float{});
    case kElemBF16: return f(__nv_bfloat16{}, float{});
    case kElemF64: return f(double{}, double{});
    default: return cudaErrorInvalidValue;
  }
}
// By size only (data movement).
template <typename F>
int dispatch_bytes(int bytes, F&& f) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace kiln::cuda
