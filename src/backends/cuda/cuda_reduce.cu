// backends/cuda/cuda_reduce.cu — reductions over any axes, ArgMax/ArgMin, softmax and layer
// normalization (with skip/bias and RMS forms), for float types (16-bit floats compute in float).
#include <cfloat>
#include <climits>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// The accumulator type of a storage type: float for f16/bf16/f32, double for f64, int64 for integers.
template <typename T> struct Acc { using type = int64_t; };
template <> struct Acc<float> { using type = float; };
template <> struct Acc<__half> { using type = float; };
template <> struct Acc<__nv_bfloat16> { using type = float; };
template <> struct Acc<double> { using type = double; };

template <typename A>
__device__ __forceinline__ A lowest() {
  if constexpr (std::is_floating_point<A>::value) return -INFINITY;
  else return LLONG_MIN;
}
template <typename A>
__device__ __forceinline__ A highest() {
  if constexpr (std::is_floating_point<A>::value) return INFINITY;
  else return LLONG_MAX;
}

template <typename A>
__device__ __forceinline__ A combine(ReduceOp op, A a, A b) {
  switch (op) {
    case ReduceOp::kMax: return (a != a || a > b) ? a : b;
    case ReduceOp::kMin: return (a != a || a < b) ? a : b;
    case ReduceOp::kProd: return a * b;
    default: return a + b;
  }
}

template <typename A>
__device__ __forceinline__ A warp_combine(ReduceOp op, A v) {
  for (int off = 16; off > 0; off >>= 1) v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ int64_t out_base(const ReduceIndex& idx, int64_t o) {
  int64_t base = 0;
  for (int d = idx.out_rank - 1; d >= 0; --d) {
    base += (o % idx.out_dims[d]) * idx.out_strides[d];
    o /= idx.out_dims[d];
  }
  return base;
}
__device__ __forceinline__ int64_t red_offset(const ReduceIndex& idx, int64_t r) {
  if (idx.red_rank == 1) return r * idx.red_strides[0];
  int64_t off = 0;
  for (int d = idx.red_rank - 1; d >= 0; --d) {
    off += (r % idx.red_dims[d]) * idx.red_strides[d];
    r /= idx.red_dims[d];
  }
  return off;
}

// One warp per output element; lanes stride over the reduced elements.
template <typename T>
__global__ void reduce_kernel(ReduceOp op, const T* __restrict__ x, T* __restrict__ y, int64_t n_out, ReduceIndex idx) {
  using A = typename Acc<T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t o = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; o < n_out; o += warps) {
    const T* xo = x + out_base(idx, o);
    // LogSumExp: the maximum first, so exp never overflows.
    A shift = A(0);
    if (op == ReduceOp::kLogSumExp) {
      A m = lowest<A>();
      for (int64_t r = lane; r < idx.red_count; r += 32) m = combine(ReduceOp::kMax, m, convert<A>(xo[red_offset(idx, r)]));
      shift = warp_combine(ReduceOp::kMax, m);
      if (shift == lowest<A>()) shift = A(0);
    }
    const ReduceOp how = (op == ReduceOp::kMax || op == ReduceOp::kMin || op == ReduceOp::kProd) ? op : ReduceOp::kSum;
    A acc = op == ReduceOp::kMax ? lowest<A>() : op == ReduceOp::kMin ? highest<A>() : op == ReduceOp::kProd ? A(1) : A(0);
    for (int64_t r = lane; r < idx.red_count; r += 32) {
      A v = convert<A>(xo[red_offset(idx, r)]);
      if constexpr (std::is_floating_point<A>::value) {
        if (op == ReduceOp::kSumSquare || op == ReduceOp::kL2) v = v * v;
        else if (op == ReduceOp::kL1) v = v < A(0) ? -v : v;
        else if (op == ReduceOp::kLogSumExp) v = exp(v - shift);
      }
      acc = combine(how, acc, v);
    }
    acc = warp_combine(how, acc);
    if (lane == 0) {
      if constexpr (std::is_floating_point<A>::value) {
        if (op == ReduceOp::kMean) acc = acc / static_cast<A>(idx.red_count);
        else if (op == ReduceOp::kL2) acc = sqrt(acc);
        else if (op == ReduceOp::kLogSum) acc = log(acc);
        else if (op == ReduceOp::kLogSumExp) acc = log(acc) + shift;
      } else {
        if (op == ReduceOp::kMean) acc = idx.red_count ? acc / idx.red_count : 0;
      }
      y[o] = convert<T>(acc);
    }
  }
}

template <typename T>
__global__ void arg_reduce_kernel(bool max, bool last, const T* __restrict__ x, int64_t* __restrict__ y, int64_t n_out,
                                  ReduceIndex idx) {
  using A = typename Acc<T>::type;
  const int lane = threadIdx.x & 31;
  const int64_t warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t o = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) >> 5; o < n_out; o += warps) {
    const T* xo = x + out_base(idx, o);
    A best = max ? lowest<A>() : highest<A>();
    int64_t at = -1;
    for (int64_t r = lane; r < idx.red_count; r += 32) {
      const A v = convert<A>(xo[r * idx.red_strides[0]]);
      const bool better = max ? v > best : v < best;
      if (at < 0 || better || (last && v == best)) {
        best = v;
        at = r;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const A ov = __shfl_xor_sync(0xffffffffu, best, off);
      const int64_t oa = __shfl_xor_sync(0xffffffffu, at, off);
      if (oa < 0) continue;
      const bool better = at < 0 || (max ? ov > best : ov < best) || (ov == best && (last ? oa > at : oa < at));
      if (better) {
        best = ov;
        at = oa;
      }
    }
    if (lane == 0) y[o] = at < 0 ? 0 : at;
  }
}

// One block per row (outer index o, inner index i); the row's elements are `inner` apart.
template <typename T>
__global__ void softmax_kernel(const T* x, T* y, int64_t rows, int64_t axis, int64_t inner, bool log) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = (r / inner) * axis * inner + r % inner;
    float m = -FLT_MAX;
    for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) m = fmaxf(m, convert<float>(x[base + k * inner]));
    m = block_reduce(m, true);
    float s = 0.f;
    for (int64_t k = threadIdx.x; k < axis; k += blockDim.x) s += expf(convert<float>(x[base + k * inner]) - m);
    s = block_reduce(s, false);
    if (log) {
      const float ls = logf(s);
      for (int64_t k = threadIdx.x; k < axis; k += blockDim.x)
        y[base + k * inner] = convert<T>(convert<float>(x[base + k * inner]) - m - ls);
    } else {
      const float inv = 1.f / s;
      for (int64_t k = threadIdx.x; k < axis; k += blockDim.x)
        y[base + k * inner] = convert<T>(expf(convert<float>(x[base + k * inner]) - m) * inv);
    }
  }
}

template <typename T>
__global__ void layer_norm_kernel(LayerNormArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* skip = static_cast<const T*>(a.skip);
  const T* bias = static_cast<const T*>(a.bias);
  const T* gamma = static_cast<const T*>(a.gamma);
  const T* beta = static_cast<const T*>(a.beta);
  T* y = static_cast<T*>(a.y);
  T* sum = static_cast<T*>(a.sum);
  const int64_t n = a.n;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t off = r * n;
    const int64_t skip_off = (a.skip_rows ? r % a.skip_rows : r) * n;
    auto value = [&](int64_t k) {
      float v = convert<float>(x[off + k]);
      if (skip) v += convert<float>(skip[skip_off + k]);
      if (bias) v += convert<float>(bias[k]);
      return v;
    };
    float mean = 0.f;
    if (!a.rms || sum) {
      float s = 0.f;
      for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
        const float v = value(k);
        if (sum) sum[off + k] = convert<T>(v);
        s += v;
      }
      s = block_reduce(s, false);
      if (!a.rms) mean = s / static_cast<float>(n);
    }
    float q = 0.f;
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      const float d = value(k) - mean;
      q += d * d;
    }
    q = block_reduce(q, false);
    const float inv = rsqrtf(q / static_cast<float>(n) + a.epsilon);
    for (int64_t k = threadIdx.x; k < n; k += blockDim.x) {
      float v = (value(k) - mean) * inv * convert<float>(gamma[k]);
      if (beta) v += convert<float>(beta[k]);
      y[off + k] = convert<T>(v);
    }
    if (threadIdx.x == 0) {
      if (a.mean) a.mean[r] = mean;
      if (a.inv_std) a.inv_std[r] = inv;
    }
  }
}

// 2-byte types with n % 8 == 0 and n <= 8 * kLanes * kIters, 16-byte aligned rows: a group of kLanes
// threads per row, each holding kIters 16-byte vectors in registers, so x and skip are read once, the
// statistics come from registers and y is written once (the generic kernel above reads the row three
// times). Groups of 8, 16 or 32 lanes sit inside one warp and sum by shuffles (no shared memory, no
// block barrier), 128 / kLanes rows per block: narrow rows (Swin's 96 to 768 channels over 10^4 to
// 10^5 tokens) keep every thread busy, where a block per row left most of it idle (96 channels: 12 of
// 128 threads). kLanes 128 is a block per row (wider rows, summed through shared memory). Same math:
// mean, then the centred sum of squares, in float.
template <int kLanes>
__device__ __forceinline__ float group_sum(float v) {
  if constexpr (kLanes > 32) {
    return block_reduce(v, false);
  } else {
#pragma unroll
    for (int off = kLanes / 2; off > 0; off /= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
    return v;
  }
}

template <typename T, int kLanes, int kIters>
__global__ void __launch_bounds__(128) layer_norm_rows_kernel(LayerNormArgs a) {
  constexpr int kRowsPerBlock = 128 / kLanes;
  const int vecs = static_cast<int>(a.n / 8);
  const int lane = threadIdx.x % kLanes;
  const uint4* x = static_cast<const uint4*>(a.x);
  const uint4* skip = static_cast<const uint4*>(a.skip);
  const uint4* bias = static_cast<const uint4*>(a.bias);
  const uint4* gamma = static_cast<const uint4*>(a.gamma);
  const uint4* beta = static_cast<const uint4*>(a.beta);
  uint4* y = static_cast<uint4*>(a.y);
  uint4* sum = static_cast<uint4*>(a.sum);
  const float nf = static_cast<float>(a.n);
  // Every thread of the block takes every trip (the sums need the whole warp, or block): a row past
  // the end only skips its loads and stores.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock; base < a.rows;
       base += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const int64_t r = base + threadIdx.x / kLanes;
    const bool row = r < a.rows;
    const int64_t off = r * vecs, skip_off = (a.skip_rows ? r % a.skip_rows : r) * vecs;
    float v[kIters][8];
    float s = 0.f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int k = lane + it * kLanes;
      const bool on = row && k < vecs;
#pragma unroll
      for (int j = 0; j < 8; ++j) v[it][j] = 0.f;
      if (!on) continue;
      uint4 raw = x[off + k];
      const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[it][j] = convert<float>(e[j]);
      if (skip) {
        raw = skip[skip_off + k];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[it][j] += convert<float>(e[j]);
      }
      if (bias) {
        raw = bias[k];
#pragma unroll
        for (int j = 0; j < 8; ++j) v[it][j] += convert<float>(e[j]);
      }
      if (sum) {
        uint4 out;
        T* o = reinterpret_cast<T*>(&out);
#pragma unroll
        for (int j = 0; j < 8; ++j) o[j] = convert<T>(v[it][j]);
        sum[off + k] = out;
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) s += v[it][j];
    }
    const float mean = a.rms ? 0.f : group_sum<kLanes>(s) / nf;
    float q = 0.f;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (!row || lane + it * kLanes >= vecs) continue;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float d = v[it][j] - mean;
        q += d * d;
      }
    }
    const float inv = rsqrtf(group_sum<kLanes>(q) / nf + a.epsilon);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int k = lane + it * kLanes;
      if (!row || k >= vecs) continue;
      uint4 gr = gamma[k], br{}, out;
      if (beta) br = beta[k];
      const T* g = reinterpret_cast<const T*>(&gr);
      const T* b = reinterpret_cast<const T*>(&br);
      T* o = reinterpret_cast<T*>(&out);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        float w = (v[it][j] - mean) * inv * convert<float>(g[j]);
        if (beta) w += convert<float>(b[j]);
        o[j] = convert<T>(w);
      }
      y[off + k] = out;
    }
    if (row && lane == 0) {
      if (a.mean) a.mean[r] = mean;
      if (a.inv_std) a.inv_std[r] = inv;
    }
  }
}

template <typename T, int kLanes, int kIters>
void launch_layer_norm_rows(const LayerNormArgs& a, cudaStream_t stream) {
  constexpr int64_t kRowsPerBlock = 128 / kLanes;
  layer_norm_rows_kernel<T, kLanes, kIters><<<rows_grid((a.rows + kRowsPerBlock - 1) / kRowsPerBlock), 128, 0, stream>>>(a);
}

}  // namespace

int launch_reduce(ReduceOp op, int elem, const void* x, void* y, int64_t n_out, const ReduceIndex& index,
                  cudaStream_t stream) {
  if (n_out <= 0) return cudaSuccess;
  const unsigned grid = grid_for(n_out * 32);
  return dispatch_signed(elem, [&](auto t) {
    using T = decltype(t);
    reduce_kernel<<<grid, kThreads, 0, stream>>>(op, static_cast<const T*>(x), static_cast<T*>(y), n_out, index);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_arg_reduce(bool max, bool last, int elem, const void* x, int64_t* y, int64_t n_out, const ReduceIndex& index,
                      cudaStream_t stream) {
  if (n_out <= 0) return cudaSuccess;
  if (index.red_rank != 1) return cudaErrorInvalidValue;
  const unsigned grid = grid_for(n_out * 32);
  return dispatch_signed(elem, [&](auto t) {
    using T = decltype(t);
    arg_reduce_kernel<<<grid, kThreads, 0, stream>>>(max, last, static_cast<const T*>(x), y, n_out, index);
    return static_cast<int>(cudaGetLastError());
  });
}

namespace {
// float64: one thread per row, in double.
__global__ void softmax_f64_kernel(const double* x, double* y, int64_t rows, int64_t axis, int64_t inner, bool log) {
  KILN_GRID_LOOP(r, rows) {
    const int64_t o = r / inner, in = r % inner;
    const double* xp = x + o * axis * inner + in;
    double* yp = y + o * axis * inner + in;
    double mx = -INFINITY, sum = 0;
    for (int64_t k = 0; k < axis; ++k) mx = fmax(mx, xp[k * inner]);
    for (int64_t k = 0; k < axis; ++k) sum += exp(xp[k * inner] - mx);
    for (int64_t k = 0; k < axis; ++k) yp[k * inner] = log ? xp[k * inner] - mx - ::log(sum) : exp(xp[k * inner] - mx) / sum;
  }
}
}  // namespace

int launch_softmax(int elem, const void* x, void* y, int64_t outer, int64_t axis, int64_t inner, bool log,
                   cudaStream_t stream) {
  const int64_t rows = outer * inner;
  if (rows <= 0 || axis <= 0) return cudaSuccess;
  if (elem == kElemF64) {
    softmax_f64_kernel<<<grid_for(rows), kThreads, 0, stream>>>(static_cast<const double*>(x), static_cast<double*>(y), rows,
                                                                axis, inner, log);
    return static_cast<int>(cudaGetLastError());
  }
  return dispatch_float(elem, [&](auto t) {
    using T = decltype(t);
    softmax_kernel<<<rows_grid(rows), kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), rows, axis,
                                                             inner, log);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_layer_norm(const LayerNormArgs& a, cudaStream_t stream) {
  if (a.rows <= 0 || a.n <= 0) return cudaSuccess;
  const int threads = a.n <= 256 ? 64 : a.n <= 1024 ? 128 : 256;
  const bool vec = a.n % 8 == 0 && a.n <= 4096 && aligned16(a.x) && aligned16(a.y) && aligned16(a.gamma) &&
                   (!a.skip || aligned16(a.skip)) && (!a.bias || aligned16(a.bias)) && (!a.beta || aligned16(a.beta)) &&
                   (!a.sum || aligned16(a.sum));
  return dispatch_float(a.elem, [&](auto t) {
    using T = decltype(t);
    if (sizeof(T) == 2 && vec) {
      // Rows in registers (layer_norm_rows_kernel): 8 lanes per row up to 64 values, 16 up to 128, a
      // warp with 1 to 4 vectors per lane up to 1024, a block with 2 or 4 per thread up to 4096.
      const int64_t vecs = a.n / 8;
      if (vecs <= 8) launch_layer_norm_rows<T, 8, 1>(a, stream);
      else if (vecs <= 16) launch_layer_norm_rows<T, 16, 1>(a, stream);
      else if (vecs <= 32) launch_layer_norm_rows<T, 32, 1>(a, stream);
      else if (vecs <= 64) launch_layer_norm_rows<T, 32, 2>(a, stream);
      else if (vecs <= 96) launch_layer_norm_rows<T, 32, 3>(a, stream);
      else if (vecs <= 128) launch_layer_norm_rows<T, 32, 4>(a, stream);
      else if (vecs <= 256) launch_layer_norm_rows<T, 128, 2>(a, stream);
      else launch_layer_norm_rows<T, 128, 4>(a, stream);
      return static_cast<int>(cudaGetLastError());
    }
    layer_norm_kernel<T><<<rows_grid(a.rows), threads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
