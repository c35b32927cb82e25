// backends/cuda/cuda_reduce_topk.cu — TopK: a block per line, sorted in shared memory or selected, as the
// CPU kernel orders it.
#include <algorithm>
#include <type_traits>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// TopK's order as one unsigned key per element, smaller first, ties by index: the value mapped so that
// unsigned order is the value's order (floats through double, with -0 = +0; integers exactly), NaN
// after every number (ONNX sorts NaN as the largest value), then inverted for `largest`, which puts NaN
// first there as well, as the CPU kernel does.
template <typename T>
__device__ __forceinline__ uint64_t topk_key(T x, bool largest) {
  uint64_t k;
  if constexpr (std::is_integral<T>::value) {
    k = std::is_signed<T>::value ? static_cast<uint64_t>(static_cast<int64_t>(x)) ^ (1ull << 63) : static_cast<uint64_t>(x);
  } else {
    double v = convert<double>(x);
    if (v != v) return largest ? 0 : ~0ull;
    if (v == 0) v = 0;  // -0 and +0 are equal
    const uint64_t b = static_cast<uint64_t>(__double_as_longlong(v));
    k = (b >> 63) ? ~b : b | (1ull << 63);
    if (k == ~0ull) k = ~0ull - 1;  // keep the NaN key for NaN
  }
  return largest ? ~k : k;
}

// (key, index) pairs in TopK's order.
__device__ __forceinline__ bool pair_before(uint64_t ka, uint32_t ia, uint64_t kb, uint32_t ib) {
  return ka < kb || (ka == kb && ia < ib);
}

// Lines of up to kTopkSortMax elements: one block sorts a whole line in shared memory (bitonic, the line
// padded to a power of two with keys that sort last) and writes its first k. For SSDlite's 91 TopKs of
// k = 300 over 3,234 scores this replaced a selection of k passes over the line by one thread.
constexpr int kTopkSortMax = 4096;  // 4096 x (8 + 4) bytes = 48 KiB of shared memory

template <typename T>
__global__ void topk_sort_kernel(const T* x, T* vals, int64_t* idx, int64_t lines, int64_t n, int64_t inner, int64_t k,
                                 bool largest, int cap) {
  __shared__ uint64_t key[kTopkSortMax];
  __shared__ uint32_t pos[kTopkSortMax];
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const int64_t o = line / inner, i = line % inner;
    const T* xp = x + o * n * inner + i;
    for (int j = threadIdx.x; j < cap; j += blockDim.x) {
      key[j] = j < n ? topk_key(xp[j * inner], largest) : ~0ull;
      pos[j] = j < n ? static_cast<uint32_t>(j) : ~0u;
    }
    __syncthreads();
    for (int size = 2; size <= cap; size <<= 1) {
      for (int stride = size >> 1; stride > 0; stride >>= 1) {
        for (int j = threadIdx.x; j < cap; j += blockDim.x) {
          const int partner = j ^ stride;
          if (partner <= j) continue;
          const bool up = (j & size) == 0;  // this run sorts ascending
          const bool swap = up ? pair_before(key[partner], pos[partner], key[j], pos[j])
                               : pair_before(key[j], pos[j], key[partner], pos[partner]);
          if (swap) {
            const uint64_t tk = key[j];
            key[j] = key[partner];
            key[partner] = tk;
            const uint32_t tp = pos[j];
            pos[j] = pos[partner];
            pos[partner] = tp;
          }
        }
        __syncthreads();
      }
    }
    for (int64_t r = threadIdx.x; r < k; r += blockDim.x) {
      const int64_t best = pos[r];
      vals[(o * k + r) * inner + i] = xp[best * inner];
      idx[(o * k + r) * inner + i] = best;
    }
    __syncthreads();  // the next line reuses the shared arrays
  }
}

// Longer lines: one block per line takes the k elements one after another, each the first in TopK's
// order after the one taken before, found by the whole block (each thread scans a stride of the line,
// then the block reduces): k passes over the line, shared by the block's threads.
constexpr int kTopkSelectThreads = 512;

template <typename T>
__global__ void topk_select_kernel(const T* x, T* vals, int64_t* idx, int64_t lines, int64_t n, int64_t inner, int64_t k,
                                   bool largest) {
  __shared__ uint64_t warp_key[kTopkSelectThreads / 32];
  __shared__ uint32_t warp_pos[kTopkSelectThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int64_t line = blockIdx.x; line < lines; line += gridDim.x) {
    const int64_t o = line / inner, i = line % inner;
    const T* xp = x + o * n * inner + i;
    uint64_t prev_key = 0;
    uint32_t prev_pos = 0;
    bool any_prev = false;
    for (int64_t r = 0; r < k; ++r) {
      uint64_t bk = ~0ull;
      uint32_t bp = ~0u;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const uint64_t kj = topk_key(xp[j * inner], largest);
        const uint32_t pj = static_cast<uint32_t>(j);
        if (any_prev && !pair_before(prev_key, prev_pos, kj, pj)) continue;  // taken already
        if (pair_before(kj, pj, bk, bp)) {
          bk = kj;
          bp = pj;
        }
      }
      for (int off = 16; off > 0; off >>= 1) {
        const uint64_t ok = __shfl_down_sync(0xffffffffu, bk, off);
        const uint32_t op = __shfl_down_sync(0xffffffffu, bp, off);
        if (pair_before(ok, op, bk, bp)) {
          bk = ok;
          bp = op;
        }
      }
      if (lane == 0) {
        warp_key[warp] = bk;
        warp_pos[warp] = bp;
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < warps; ++w)
          if (pair_before(warp_key[w], warp_pos[w], warp_key[0], warp_pos[0])) {
            warp_key[0] = warp_key[w];
            warp_pos[0] = warp_pos[w];
          }
        vals[(o * k + r) * inner + i] = xp[static_cast<int64_t>(warp_pos[0]) * inner];
        idx[(o * k + r) * inner + i] = warp_pos[0];
      }
      __syncthreads();
      prev_key = warp_key[0];
      prev_pos = warp_pos[0];
      any_prev = true;
      __syncthreads();  // every thread has read the choice before the next round overwrites it
    }
  }
}

}  // namespace

int launch_topk(int elem, const void* x, void* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k,
                bool largest, cudaStream_t stream) {
  if (outer * inner * k == 0) return cudaSuccess;
  if (n >= static_cast<int64_t>(UINT32_MAX)) return cudaErrorInvalidValue;  // positions are 32-bit here
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      const int64_t lines = outer * inner;
      const unsigned grid = static_cast<unsigned>(std::min<int64_t>(lines, 1 << 20));
      if (n <= kTopkSortMax) {
        int cap = 1;
        while (cap < n) cap <<= 1;
        const int threads = std::max(32, std::min(512, cap / 2));
        topk_sort_kernel<T><<<grid, threads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(values), indices, lines,
                                                          n, inner, k, largest, cap);
      } else {
        topk_select_kernel<T><<<grid, kTopkSelectThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(values),
                                                                        indices, lines, n, inner, k, largest);
      }
      return static_cast<int>(cudaGetLastError());
    }
  });
}

}  // namespace kiln::cuda
