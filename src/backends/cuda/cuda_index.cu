// backends/cuda/cuda_index.cu — index-driven kernels (GatherElements, GatherND, ScatterElements,
// ScatterND) and the two losses (SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss).
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

__device__ __forceinline__ int64_t index_at(const void* ind, bool ind64, int64_t i) {
  return ind64 ? static_cast<const int64_t*>(ind)[i] : static_cast<const int32_t*>(ind)[i];
}

// Normalizes index v of a dim of size `dim`; false when outside [-dim, dim).
__device__ __forceinline__ bool in_range(int64_t& v, int64_t dim) {
  if (v < -dim || v >= dim) return false;
  if (v < 0) v += dim;
  return true;
}

// The data offset of element e of the indices, or -1 when its index is out of range.
__device__ int64_t elements_offset(const ElementsIndex& ix, const void* ind, bool ind64, int64_t e) {
  int64_t off = 0, rest = e;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t c = rest % ix.ind_dims[d];
    rest /= ix.ind_dims[d];
    if (d == ix.axis) {
      c = index_at(ind, ind64, e);
      if (!in_range(c, ix.axis_dim)) return -1;
    }
    off += c * ix.data_strides[d];
  }
  return off;
}

// The data offset of tuple t's block, or -1 when a component is out of range.
__device__ int64_t nd_offset(const NdIndex& ix, const void* ind, bool ind64, int64_t t) {
  int64_t off = (ix.per_batch ? t / ix.per_batch : 0) * ix.batch_stride;
  for (int j = 0; j < ix.k; ++j) {
    int64_t v = index_at(ind, ind64, t * ix.k + j);
    if (!in_range(v, ix.dims[j])) return -1;
    off += v * ix.strides[j];
  }
  return off;
}

template <typename T>
__global__ void gather_elements_kernel(const T* x, const void* ind, bool ind64, T* y, int64_t n, ElementsIndex ix) {
  KILN_GRID_LOOP(e, n) {
    const int64_t off = elements_offset(ix, ind, ind64, e);
    y[e] = off < 0 ? T(0) : x[off];
  }
}

template <typename T>
__global__ void gather_nd_kernel(const T* x, const void* ind, bool ind64, T* y, NdIndex ix) {
  KILN_GRID_LOOP(i, ix.tuples * ix.block) {
    const int64_t t = i / ix.block, j = i % ix.block;
    const int64_t off = nd_offset(ix, ind, ind64, t);
    y[i] = off < 0 ? T(0) : x[off + j];
  }
}

template <typename T>
__device__ __forceinline__ T combine(T a, T b, ScatterReduce r) {
  using C = compute_t<T>;
  const C x = convert<C>(a), v = convert<C>(b);
  switch (r) {
    case ScatterReduce::kAdd: return convert<T>(C(x + v));
    case ScatterReduce::kMul: return convert<T>(C(x * v));
    case ScatterReduce::kMax: return convert<T>(x > v ? x : v);
    case ScatterReduce::kMin: return convert<T>(x < v ? x : v);
    default: return b;
  }
}

template <typename T>
__global__ void scatter_elements_kernel(T* y, const void* ind, bool ind64, const T* upd, int64_t n, ElementsIndex ix) {
  KILN_GRID_LOOP(e, n) {
    const int64_t off = elements_offset(ix, ind, ind64, e);
    if (off >= 0) y[off] = upd[e];
  }
}

// Every write in index order, by one thread: duplicates combine in the order the CPU applies them.
template <typename T>
__global__ void scatter_elements_reduce_kernel(T* y, const void* ind, bool ind64, const T* upd, int64_t n,
                                               ElementsIndex ix, ScatterReduce r) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t off = elements_offset(ix, ind, ind64, e);
    if (off >= 0) y[off] = combine(y[off], upd[e], r);
  }
}

template <typename T>
__global__ void scatter_nd_kernel(T* y, const void* ind, bool ind64, const T* upd, NdIndex ix) {
  KILN_GRID_LOOP(i, ix.tuples * ix.block) {
    const int64_t t = i / ix.block, j = i % ix.block;
    const int64_t off = nd_offset(ix, ind, ind64, t);
    if (off >= 0) y[off + j] = upd[i];
  }
}

// One thread per element of the block, each applying the tuples in order.
template <typename T>
__global__ void scatter_nd_reduce_kernel(T* y, const void* ind, bool ind64, const T* upd, NdIndex ix, ScatterReduce r) {
  KILN_GRID_LOOP(j, ix.block) {
    for (int64_t t = 0; t < ix.tuples; ++t) {
      const int64_t off = nd_offset(ix, ind, ind64, t);
      if (off >= 0) y[off + j] = combine(y[off + j], upd[t * ix.block + j], r);
    }
  }
}

// ---- losses

template <typename T>
__global__ void loss_kernel(LossArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  T* logp_out = static_cast<T*>(a.log_prob);
  KILN_GRID_LOOP(k, a.n * a.d) {
    const int64_t n = k / a.d, d = k % a.d;
    const T* p = x + n * a.c * a.d + d;
    double lse = 0;
    if (a.softmax) {
      double mx = -INFINITY;
      for (int64_t c = 0; c < a.c; ++c) mx = fmax(mx, convert<double>(p[c * a.d]));
      double sum = 0;
      for (int64_t c = 0; c < a.c; ++c) sum += exp(convert<double>(p[c * a.d]) - mx);
      lse = mx + log(sum);
      if (logp_out)
        for (int64_t c = 0; c < a.c; ++c)
          logp_out[n * a.c * a.d + c * a.d + d] = convert<T>(convert<double>(p[c * a.d]) - lse);
    }
    const int64_t label = index_at(a.labels, a.labels64, k);
    double loss = 0, weight = 0;
    if (!(a.has_ignore && label == a.ignore_index)) {
      if (label < 0 || label >= a.c) {
        loss = NAN;
        weight = NAN;
      } else {
        weight = w ? convert<double>(w[label]) : 1.0;
        loss = -(convert<double>(p[label * a.d]) - lse) * weight;
      }
    }
    if (a.reduction == 0) {
      static_cast<T*>(a.y)[k] = convert<T>(loss);
    } else {
      a.workspace[k] = loss;
      a.workspace[a.n * a.d + k] = weight;
    }
  }
}

// One block: the sum of the losses (and of the weights), then sum or mean into y[0].
template <typename T>
__global__ void loss_reduce_kernel(LossArgs a) {
  __shared__ double part[2][kThreads];
  const int64_t m = a.n * a.d;
  double s = 0, w = 0;
  for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
    s += a.workspace[i];
    w += a.workspace[m + i];
  }
  part[0][threadIdx.x] = s;
  part[1][threadIdx.x] = w;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride >>= 1) {
    if (threadIdx.x < stride) {
      part[0][threadIdx.x] += part[0][threadIdx.x + stride];
      part[1][threadIdx.x] += part[1][threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0)
    static_cast<T*>(a.y)[0] = convert<T>(a.reduction == 1 ? part[0][0] : part[0][0] / part[1][0]);
}

template <typename F>
int dispatch_loss(int elem, F&& f) {
  switch (elem) {
    case kElemF32: return f(float{});
    case kElemF16: return f(__half{});
    case kElemBF16: return f(__nv_bfloat16{});
    case kElemF64: return f(double{});
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int launch_gather_elements(const void* x, const void* ind, bool ind64, void* y, int64_t n, const ElementsIndex& index,
                           int elem_bytes, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    gather_elements_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), ind, ind64,
                                                                    static_cast<T*>(y), n, index);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_gather_nd(const void* x, const void* ind, bool ind64, void* y, const NdIndex& index, int elem_bytes,
                     cudaStream_t stream) {
  if (index.tuples * index.block == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    gather_nd_kernel<T><<<grid_for(index.tuples * index.block), kThreads, 0, stream>>>(static_cast<const T*>(x), ind, ind64,
                                                                                       static_cast<T*>(y), index);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_scatter_elements(void* y, const void* ind, bool ind64, const void* upd, int64_t n, const ElementsIndex& index,
                            int elem, ScatterReduce reduce, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if (reduce == ScatterReduce::kNone) {
      scatter_elements_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), ind, ind64,
                                                                       static_cast<const T*>(upd), n, index);
    } else if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      scatter_elements_reduce_kernel<T><<<1, 1, 0, stream>>>(static_cast<T*>(y), ind, ind64, static_cast<const T*>(upd), n,
                                                             index, reduce);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_scatter_nd(void* y, const void* ind, bool ind64, const void* upd, const NdIndex& index, int elem,
                      ScatterReduce reduce, cudaStream_t stream) {
  if (index.tuples * index.block == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if (reduce == ScatterReduce::kNone) {
      scatter_nd_kernel<T><<<grid_for(index.tuples * index.block), kThreads, 0, stream>>>(
          static_cast<T*>(y), ind, ind64, static_cast<const T*>(upd), index);
    } else if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      scatter_nd_reduce_kernel<T><<<grid_for(index.block), kThreads, 0, stream>>>(static_cast<T*>(y), ind, ind64,
                                                                                  static_cast<const T*>(upd), index, reduce);
    }
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_loss(const LossArgs& a, cudaStream_t stream) {
  const int64_t m = a.n * a.d;
  return dispatch_loss(a.elem, [&](auto tag) {
    using T = decltype(tag);
    if (m > 0) loss_kernel<T><<<grid_for(m), kThreads, 0, stream>>>(a);
    if (a.reduction != 0) loss_reduce_kernel<T><<<1, kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
