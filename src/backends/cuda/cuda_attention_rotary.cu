// backends/cuda/cuda_attention_rotary.cu — RotaryEmbedding as the CPU computes it
// (backends/cpu/attention_rotary.cpp).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T, typename C>
__global__ void rotary_kernel(RotaryArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const int64_t half = a.rd / 2;
  KILN_GRID_LOOP(t, a.b * a.s * a.h) {
    const int64_t b = t / (a.s * a.h), s = (t / a.h) % a.s, h = t % a.h;
    const int64_t off = a.packed ? ((b * a.s + s) * a.h + h) * a.dh : ((b * a.h + h) * a.s + s) * a.dh;
    int64_t row = a.positions ? a.positions[b * a.s + s] : a.per_batch_rows ? b * a.s + s : s;
    const bool bad = row < 0 || row >= a.cache_rows;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t i1 = a.interleaved ? 2 * i : i, i2 = a.interleaved ? 2 * i + 1 : i + half;
      const C x1 = convert<C>(x[off + i1]), x2 = convert<C>(x[off + i2]);
      const C c = bad ? C(NAN) : convert<C>(cs[row * half + i]), sv = bad ? C(NAN) : convert<C>(sn[row * half + i]);
      y[off + i1] = convert<T>(c * x1 - sv * x2);
      y[off + i2] = convert<T>(sv * x1 + c * x2);
    }
    for (int64_t i = a.rd; i < a.dh; ++i) y[off + i] = x[off + i];
  }
}

}  // namespace

int launch_rotary(const RotaryArgs& a, cudaStream_t stream) {
  const int64_t n = a.b * a.s * a.h;
  if (n == 0) return cudaSuccess;
  return dispatch_real_compute(a.elem, [&](auto tt, auto ct) {
    using T = decltype(tt);
    using C = decltype(ct);
    rotary_kernel<T, C><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
