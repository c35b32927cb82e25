// backends/cuda/cuda_misc.cu — CumSum/CumProd (one thread per line along the axis, accumulated in
// the type's compute type, sequentially as the CPU kernel does), Trilu (a masked copy), Pad (every
// mode; Tile and CenterCropPad are pads), Hardmax and IsInf.
#include <cstring>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void cumulative_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool product, bool exclusive,
                                  bool reverse) {
  using C = compute_t<T>;
  KILN_GRID_LOOP(t, outer * inner) {
    const int64_t o = t / inner, in = t % inner;
    const T* xp = x + o * len * inner + in;
    T* yp = y + o * len * inner + in;
    C acc = product ? C(1) : C(0);
    for (int64_t s = 0; s < len; ++s) {
      const int64_t k = reverse ? len - 1 - s : s;
      const C v = convert<C>(xp[k * inner]);
      if (exclusive) {
        yp[k * inner] = convert<T>(acc);
        acc = product ? C(acc * v) : C(acc + v);
      } else {
        acc = product ? C(acc * v) : C(acc + v);
        yp[k * inner] = convert<T>(acc);
      }
    }
  }
}

template <typename T>
__global__ void trilu_kernel(const T* x, T* y, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper) {
  KILN_GRID_LOOP(i, n) {
    const int64_t j = i % cols, r = i / cols % rows;
    const bool keep = upper ? j - r >= k : j - r <= k;
    y[i] = keep ? x[i] : T(0);
  }
}

__device__ __forceinline__ int64_t pad_source(int64_t i, int64_t n, int mode) {
  if (i >= 0 && i < n) return i;
  if (n == 0) return -1;
  switch (mode) {
    case 2: return i < 0 ? 0 : n - 1;
    case 3: return ((i % n) + n) % n;
    case 1: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      const int64_t m = ((i % period) + period) % period;
      return m < n ? m : period - m;
    }
    default: return -1;
  }
}

template <typename T>
__global__ void pad_kernel(const T* x, T* y, int64_t n, PadIndex ix, T value) {
  KILN_GRID_LOOP(i, n) {
    int64_t rest = i, off = 0;
    bool inside = true;
    for (int d = ix.rank - 1; d >= 0; --d) {
      const int64_t c = rest % ix.out_dims[d];
      rest /= ix.out_dims[d];
      const int64_t s = pad_source(c - ix.before[d], ix.in_dims[d], ix.mode);
      if (s < 0) inside = false;
      else off += s * ix.in_strides[d];
    }
    y[i] = inside ? x[off] : value;
  }
}

template <typename T>
__global__ void hardmax_kernel(const T* x, T* y, int64_t outer, int64_t len, int64_t inner) {
  KILN_GRID_LOOP(t, outer * inner) {
    const int64_t o = t / inner, in = t % inner;
    const T* xp = x + o * len * inner + in;
    T* yp = y + o * len * inner + in;
    int64_t best = 0;
    float mx = len ? convert<float>(xp[0]) : 0.f;
    for (int64_t k = 1; k < len; ++k) {
      const float v = convert<float>(xp[k * inner]);
      if (v > mx) {
        mx = v;
        best = k;
      }
    }
    for (int64_t k = 0; k < len; ++k) yp[k * inner] = convert<T>(k == best ? 1.f : 0.f);
  }
}

template <typename T>
__global__ void isinf_kernel(const T* x, bool* y, int64_t n, bool positive, bool negative) {
  KILN_GRID_LOOP(i, n) {
    const double v = convert<double>(x[i]);
    y[i] = (positive && v == INFINITY) || (negative && v == -INFINITY);
  }
}

}  // namespace

int launch_pad(const void* x, void* y, int64_t n, int elem_bytes, const PadIndex& index, uint64_t value_bits,
               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    T value;
    memcpy(&value, &value_bits, sizeof(T));  // little-endian: the element's bytes are the low bytes
    pad_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, index, value);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_hardmax(int elem, const void* x, void* y, int64_t outer, int64_t len, int64_t inner, cudaStream_t stream) {
  if (outer * inner == 0) return cudaSuccess;
  return dispatch_float(elem, [&](auto tag) {
    using T = decltype(tag);
    hardmax_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), outer,
                                                                        len, inner);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_isinf(int elem, const void* x, bool* y, int64_t n, bool positive, bool negative, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    isinf_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), y, n, positive, negative);
    return static_cast<int>(cudaGetLastError());
  };
  if (elem == kElemF64) return go(double{});
  return dispatch_float(elem, go);
}

int launch_cumulative(int elem, bool product, const void* x, void* y, int64_t outer, int64_t len, int64_t inner,
                      bool exclusive, bool reverse, cudaStream_t stream) {
  if (outer * inner == 0 || len == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      cumulative_kernel<T><<<grid_for(outer * inner), kThreads, 0, stream>>>(
          static_cast<const T*>(x), static_cast<T*>(y), outer, len, inner, product, exclusive, reverse);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

int launch_trilu(const void* x, void* y, int elem_bytes, int64_t n, int64_t rows, int64_t cols, int64_t k, bool upper,
                 cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    trilu_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), n, rows, cols, k,
                                                         upper);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
