// backends/cuda/cuda_more.cu — small whole-tensor kernels: EyeLike, OneHot, LpNormalization and
// BitCast's 4-bit case.
#include <cstring>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void eye_kernel(T* y, int64_t rows, int64_t cols, int64_t k, T one) {
  KILN_GRID_LOOP(i, rows * cols) y[i] = (i % cols) - (i / cols) == k ? one : T(0);
}

template <typename I, typename T>
__global__ void one_hot_kernel(const I* ind, const T* values, T* y, int64_t outer, int64_t depth, int64_t inner) {
  KILN_GRID_LOOP(t, outer * depth * inner) {
    const int64_t i = t % inner, d = t / inner % depth, o = t / (inner * depth);
    int64_t v = static_cast<int64_t>(convert<double>(ind[o * inner + i]));
    if (v < 0) v += depth;
    y[t] = v == d ? values[1] : values[0];
  }
}

template <typename T, typename C>
__global__ void lp_norm_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, int p) {
  KILN_GRID_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * len * inner + t % inner;
    C norm = 0;
    for (int64_t k = 0; k < len; ++k) {
      const C v = convert<C>(x[base + k * inner]);
      norm += p == 1 ? (v < 0 ? -v : v) : v * v;
    }
    if (p == 2) norm = sqrt(norm);
    for (int64_t k = 0; k < len; ++k) y[base + k * inner] = convert<T>(norm == 0 ? C(0) : convert<C>(x[base + k * inner]) / norm);
  }
}

__global__ void nibble_kernel(const uint8_t* x, uint8_t* y, int64_t n, bool to_int4) {
  KILN_GRID_LOOP(i, n) {
    const uint8_t nib = x[i] & 0x0f;
    y[i] = to_int4 && (nib & 0x08) ? static_cast<uint8_t>(nib | 0xf0) : nib;
  }
}

template <typename T>
__global__ void clip_kernel(const T* x, T* y, int64_t n, T lo, T hi) {
  KILN_GRID_LOOP(i, n) {
    // max(v, lo) then min(., hi), as numpy's clip and the CPU kernel: max wins when min > max; NaN stays
    const T v = x[i] < lo ? lo : x[i];
    y[i] = v > hi ? hi : v;
  }
}

}  // namespace

int launch_clip(int elem, const void* x, void* y, int64_t n, double lo, double hi, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value || sizeof(T) == 2 && !std::is_integral<T>::value) {
      return static_cast<int>(cudaErrorInvalidValue);  // bool; the 16-bit floats go through launch_unary
    } else {
      clip_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, static_cast<T>(lo),
                                                           static_cast<T>(hi));
      return static_cast<int>(cudaGetLastError());
    }
  });
}

int launch_eye(void* y, int64_t rows, int64_t cols, int64_t k, int elem_bytes, uint64_t one_bits, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    T one;
    memcpy(&one, &one_bits, sizeof(T));
    eye_kernel<T><<<grid_for(rows * cols), kThreads, 0, stream>>>(static_cast<T*>(y), rows, cols, k, one);
    return static_cast<int>(cudaGetLastError());
  });
}

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

int launch_lp_norm(int elem, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, int p, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  if (elem == kElemF64) {
    lp_norm_kernel<double, double><<<grid_for(outer * inner), kThreads, 0, stream>>>(
        static_cast<const double*>(x), static_cast<double*>(y), outer, len, inner, p);
    return static_cast<int>(cudaGetLastError());
  }
  return dispatch_float(elem, [&](auto tag) {
    using T = decltype(tag);
    lp_norm_kernel<T, float><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y),
                                                                               outer, len, inner, p);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_bitcast_nibbles(const uint8_t* x, uint8_t* y, int64_t n, bool to_int4, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  nibble_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, n, to_int4);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::cuda
