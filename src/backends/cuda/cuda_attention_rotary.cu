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

// kiln.Rotary on 2-byte types, V = 8 pairs a thread: one 16-byte load of each of x's halves and of
// the tables' (contiguous along d) two halves, and 32-bit index arithmetic (rows * d < 2^31), once
// per 8 pairs where the kernel above does its 64-bit divisions for each.
template <typename T>
__global__ void rotary_half8_kernel(RotaryHalfArgs a) {
  constexpr int V = 8;
  const T* x = static_cast<const T*>(a.x);
  const T* cs = static_cast<const T*>(a.cos);
  const T* sn = static_cast<const T*>(a.sin);
  T* y = static_cast<T*>(a.y);
  const uint32_t h = static_cast<uint32_t>(a.d / 2), hv = h / V, n = static_cast<uint32_t>(a.rows) * hv;
  for (uint32_t t = blockIdx.x * blockDim.x + threadIdx.x; t < n; t += blockDim.x * gridDim.x) {
    uint32_t row = t / hv;
    const uint32_t i = (t - row * hv) * V, base = row * static_cast<uint32_t>(a.d) + i;
    uint32_t co = 0, so = 0;
    for (int k = a.outer_rank - 1; k >= 0; --k) {
      const uint32_t dim = static_cast<uint32_t>(a.outer[k]), c = row % dim;
      row /= dim;
      co += c * static_cast<uint32_t>(a.cos_outer[k]);
      so += c * static_cast<uint32_t>(a.sin_outer[k]);
    }
    alignas(16) T x1[V], x2[V], c1[V], c2[V], s1[V], s2[V], y1[V], y2[V];
    *reinterpret_cast<uint4*>(x1) = *reinterpret_cast<const uint4*>(x + base);
    *reinterpret_cast<uint4*>(x2) = *reinterpret_cast<const uint4*>(x + base + h);
    *reinterpret_cast<uint4*>(c1) = *reinterpret_cast<const uint4*>(cs + co + i);
    *reinterpret_cast<uint4*>(c2) = *reinterpret_cast<const uint4*>(cs + co + i + h);
    *reinterpret_cast<uint4*>(s1) = *reinterpret_cast<const uint4*>(sn + so + i);
    *reinterpret_cast<uint4*>(s2) = *reinterpret_cast<const uint4*>(sn + so + i + h);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float a1 = convert<float>(x1[k]), a2 = convert<float>(x2[k]);
      y1[k] = convert<T>(a1 * convert<float>(c1[k]) - a2 * convert<float>(s1[k]));
      y2[k] = convert<T>(a2 * convert<float>(c2[k]) + a1 * convert<float>(s2[k]));
    }
    *reinterpret_cast<uint4*>(y + base) = *reinterpret_cast<const uint4*>(y1);
    *reinterpret_cast<uint4*>(y + base + h) = *reinterpret_cast<const uint4*>(y2);
  }
}

// Whether rotary_half8_kernel applies: 2-byte values, d a multiple of 16, tables contiguous along d
// with every row offset a multiple of 8, 16-byte aligned pointers, offsets in 32 bits.
bool rotary_half8_fits(const RotaryHalfArgs& a, int bytes) {
  if (bytes != 2 || a.d % 16 || a.cos_last != 1 || a.sin_last != 1) return false;
  if (!aligned16(a.x) || !aligned16(a.y) || !aligned16(a.cos) || !aligned16(a.sin)) return false;
  if (a.rows > (int64_t{1} << 31) / a.d) return false;
  int64_t cos_end = a.d, sin_end = a.d;  // one past the last table element read, bounded as x's are
  for (int k = 0; k < a.outer_rank; ++k) {
    if (a.cos_outer[k] % 8 || a.sin_outer[k] % 8 || a.cos_outer[k] < 0 || a.sin_outer[k] < 0) return false;
    cos_end += (a.outer[k] - 1) * a.cos_outer[k];
    sin_end += (a.outer[k] - 1) * a.sin_outer[k];
  }
  return cos_end < (int64_t{1} << 31) && sin_end < (int64_t{1} << 31);
}

}  // namespace

int launch_rotary_half(const RotaryHalfArgs& a, cudaStream_t stream) {
  const int64_t n = a.rows * (a.d / 2);
  if (n == 0) return cudaSuccess;
  if (a.outer_rank < 0 || a.outer_rank > kMaxRank) return cudaErrorInvalidValue;
  return dispatch_float(a.elem, [&](auto t) {
    using T = decltype(t);
    if (rotary_half8_fits(a, sizeof(T)))
      rotary_half8_kernel<T><<<grid_for(n / 8), kThreads, 0, stream>>>(a);
    else
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
