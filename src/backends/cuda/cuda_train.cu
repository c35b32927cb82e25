// backends/cuda/cuda_train.cu — the training optimizers, DynamicQuantizeLinear and TensorScatter.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void optimizer_kernel(OptimizerArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.g);
  const T* s1 = static_cast<const T*>(a.s1);
  const T* s2 = static_cast<const T*>(a.s2);
  KILN_GRID_LOOP(e, a.n) {
    double x_new, st1, st2;
    optimizer::step(a.attrs, a.r, a.t, convert<double>(x[e]), convert<double>(g[e]), convert<double>(s1[e]),
                    s2 ? convert<double>(s2[e]) : 0.0, x_new, st1, st2);
    if (a.xo) static_cast<T*>(a.xo)[e] = convert<T>(x_new);
    if (a.s1o) static_cast<T*>(a.s1o)[e] = convert<T>(st1);
    if (a.s2o) static_cast<T*>(a.s2o)[e] = convert<T>(st2);
  }
}

// One block: min and max over x (with 0 in range), then scale and zero point.
__global__ void dq_params_kernel(const float* x, int64_t n, float* scale, uint8_t* zp) {
  __shared__ float lo[kThreads], hi[kThreads];
  float mn = 0, mx = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    mn = fminf(mn, x[i]);
    mx = fmaxf(mx, x[i]);
  }
  lo[threadIdx.x] = mn;
  hi[threadIdx.x] = mx;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      lo[threadIdx.x] = fminf(lo[threadIdx.x], lo[threadIdx.x + s]);
      hi[threadIdx.x] = fmaxf(hi[threadIdx.x], hi[threadIdx.x + s]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const float sc = (hi[0] == lo[0] ? 1.0f : hi[0] - lo[0]) / 255.0f;
    const float z = rintf(fminf(fmaxf(0.0f - lo[0] / sc, 0.0f), 255.0f));
    scale[0] = sc;
    zp[0] = static_cast<uint8_t>(z);
  }
}

__global__ void dq_apply_kernel(const float* x, uint8_t* y, const float* scale, const uint8_t* zp, int64_t n) {
  const float sc = scale[0], z = zp[0];
  KILN_GRID_LOOP(i, n) {
    const float q = rintf(x[i] / sc) + z;
    y[i] = static_cast<uint8_t>(fminf(fmaxf(q, 0.0f), 255.0f));
  }
}

template <typename T>
__global__ void tensor_scatter_kernel(T* y, const T* upd, const int64_t* widx, int64_t prefix, int64_t per_batch,
                                      int64_t max_len, int64_t len, int64_t inner, bool circular) {
  KILN_GRID_LOOP(i, prefix * len * inner) {
    const int64_t in = i % inner, s = i / inner % len, p = i / (inner * len);
    const int64_t b = p / (per_batch > 0 ? per_batch : 1);
    int64_t dst = (widx ? widx[b] : 0) + s;
    if (circular) dst = ((dst % max_len) + max_len) % max_len;
    if (dst < 0 || dst >= max_len) continue;
    y[(p * max_len + dst) * inner + in] = upd[i];
  }
}

}  // namespace

int launch_optimizer(const OptimizerArgs& a, cudaStream_t stream) {
  if (a.n == 0) return cudaSuccess;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    optimizer_kernel<T><<<grid_for(a.n), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  };
  if (a.elem == kElemF64) return go(double{});
  return dispatch_float(a.elem, go);
}

int launch_dynamic_quantize(const float* x, uint8_t* y, float* scale, uint8_t* zp, int64_t n, cudaStream_t stream) {
  dq_params_kernel<<<1, kThreads, 0, stream>>>(x, n, scale, zp);
  if (n > 0) dq_apply_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, y, scale, zp, n);
  return static_cast<int>(cudaGetLastError());
}

int launch_tensor_scatter(void* y, const void* update, const int64_t* write_indices, int64_t prefix, int64_t per_batch,
                          int64_t max_len, int64_t len, int64_t inner, int elem_bytes, bool circular, cudaStream_t stream) {
  const int64_t n = prefix * len * inner;
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    tensor_scatter_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<T*>(y), static_cast<const T*>(update),
                                                                   write_indices, prefix, per_batch, max_len, len, inner,
                                                                   circular);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
