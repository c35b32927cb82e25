// backends/cuda/cuda_conv_causal.cu — CausalConvWithState as the CPU computes it
// (backends/cpu/nn_conv_causal.cpp).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__device__ __forceinline__ float round_to(float v) {
  return convert<float>(convert<T>(v));
}

template <typename T, typename C>
__global__ void causal_conv_kernel(CausalConvArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* bias = static_cast<const T*>(a.bias);
  const T* past = static_cast<const T*>(a.past);
  T* y = static_cast<T*>(a.y);
  T* present = static_cast<T*>(a.present);
  const int64_t p = a.k - 1;
  // The padded sequence of (b, c) at position j: past for j < p, x after.
  auto seq = [&](int64_t bc, int64_t j) -> C {
    if (j < p) return past ? convert<C>(past[bc * p + j]) : C(0);
    return convert<C>(x[bc * a.l + (j - p)]);
  };
  KILN_GRID_LOOP(i, a.b * a.c * a.l) {
    const int64_t bc = i / a.l, t = i % a.l, c = bc % a.c;
    C acc = bias ? convert<C>(bias[c]) : C(0);
    for (int64_t j = 0; j < a.k; ++j) acc += convert<C>(w[c * a.k + j]) * seq(bc, t + j);
    if (a.silu) {
      if constexpr (!std::is_same<T, float>::value && !std::is_same<T, double>::value) acc = round_to<T>(acc);
      acc = acc / (C(1) + exp(-acc));
    }
    y[i] = convert<T>(acc);
  }
  if (present)
    KILN_GRID_LOOP(i, a.b * a.c * p) {
      const int64_t bc = i / p, j = i % p;
      present[i] = convert<T>(seq(bc, a.l + j));
    }
}

}  // namespace

int launch_causal_conv(const CausalConvArgs& a, cudaStream_t stream) {
  const int64_t n = a.b * a.c * (a.l > a.k ? a.l : a.k);
  if (n == 0) return cudaSuccess;
  return dispatch_real_compute(a.elem, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    causal_conv_kernel<T, C><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
