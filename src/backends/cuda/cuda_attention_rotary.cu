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

// kiln.Rotary: one thread per pair (i, i + d/2) of a row.
template <typename T>
__global__ void rotary_half_kernel(RotaryHalfArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const int64_t h = a.d / 2;
  KILN_GRID_LOOP(t, a.rows * h) {
    int64_t row = t / h;
    const int64_t i = t % h;
    int64_t co = 0, so = 0;
    for (int k = a.outer_rank - 1; k >= 0; --k) {
      const int64_t c = row % a.outer[k];
      row /= a.outer[k];
      co += c * a.cos_outer[k];
      so += c * a.sin_outer[k];
    }
    const int64_t base = (t / h) * a.d;
    const float x1 = convert<float>(x[base + i]), x2 = convert<float>(x[base + i + h]);
    y[base + i] = convert<T>(x1 * convert<float>(cs[co + i * a.cos_last]) - x2 * convert<float>(sn[so + i * a.sin_last]));
    y[base + i + h] =
        convert<T>(x2 * convert<float>(cs[co + (i + h) * a.cos_last]) + x1 * convert<float>(sn[so + (i + h) * a.sin_last]));
  }
}

}  // namespace

int launch_rotary_half(const RotaryHalfArgs& a, cudaStream_t stream) {
  const int64_t n = a.rows * (a.d / 2);
  if (n == 0) return cudaSuccess;
  if (a.outer_rank < 0 || a.outer_rank > kMaxRank) return cudaErrorInvalidValue;
  return dispatch_float(a.elem, [&](auto t) {
    using T = decltype(t);
    rotary_half_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

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
