// backends/cuda/cuda_gemm_direct.cu — the direct batched MatMul for the types cuBLASLt is not used for,
// and the 8-bit MatMulInteger / QLinearMatMul.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// The element offsets of batch entry bt in A and B (broadcast batch dims have stride 0).
__device__ __forceinline__ void batch_offsets(const MatMulIndex& ix, int64_t bt, int64_t& ao, int64_t& bo) {
  ao = bo = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    const int64_t cd = bt % ix.dims[d];
    bt /= ix.dims[d];
    ao += cd * ix.a_strides[d];
    bo += cd * ix.b_strides[d];
  }
}

template <typename T>
__global__ void matmul_direct_kernel(const T* a, const T* b, T* y, MatMulIndex ix) {
  int64_t batches = 1;
  for (int d = 0; d < ix.rank; ++d) batches *= ix.dims[d];
  KILN_GRID_LOOP(t, batches * ix.m * ix.n) {
    const int64_t j = t % ix.n, i = t / ix.n % ix.m, bt = t / (ix.n * ix.m);
    int64_t ao, bo;
    batch_offsets(ix, bt, ao, bo);
    compute_t<T> acc = 0;
    for (int64_t k = 0; k < ix.k; ++k) acc += convert<compute_t<T>>(a[ao + i * ix.k + k]) * convert<compute_t<T>>(b[bo + k * ix.n + j]);
    y[t] = convert<T>(acc);
  }
}

__device__ __forceinline__ int32_t q8(const void* p, bool is_signed, int64_t i) {
  return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
}
__device__ __forceinline__ float scale_at(const void* p, bool f16) {
  return f16 ? __half2float(static_cast<const __half*>(p)[0]) : static_cast<const float*>(p)[0];
}

__global__ void qmatmul_kernel(QMatMulArgs q) {
  const MatMulIndex& ix = q.index;
  int64_t batches = 1;
  for (int d = 0; d < ix.rank; ++d) batches *= ix.dims[d];
  const int32_t za = q.za ? q8(q.za, q.a_signed, 0) : 0, zb = q.zb ? q8(q.zb, q.b_signed, 0) : 0;
  KILN_GRID_LOOP(t, batches * ix.m * ix.n) {
    const int64_t j = t % ix.n, i = t / ix.n % ix.m, bt = t / (ix.n * ix.m);
    int64_t ao, bo;
    batch_offsets(ix, bt, ao, bo);
    int32_t acc = 0;
    for (int64_t k = 0; k < ix.k; ++k)
      acc += (q8(q.a, q.a_signed, ao + i * ix.k + k) - za) * (q8(q.b, q.b_signed, bo + k * ix.n + j) - zb);
    if (!q.qlinear) {
      static_cast<int32_t*>(q.y)[t] = acc;
      continue;
    }
    const float f = scale_at(q.sa, q.scale_f16) * scale_at(q.sb, q.scale_f16) / scale_at(q.sy, q.scale_f16);
    double v = rint(static_cast<double>(acc) * static_cast<double>(f) + (q.zy ? q8(q.zy, q.y_signed, 0) : 0));
    const double lo = q.y_signed ? -128.0 : 0.0, hi = q.y_signed ? 127.0 : 255.0;
    v = v < lo ? lo : v > hi ? hi : v;
    if (q.y_signed) static_cast<int8_t*>(q.y)[t] = static_cast<int8_t>(v);
    else static_cast<uint8_t*>(q.y)[t] = static_cast<uint8_t>(v);
  }
}

}  // namespace

int launch_qmatmul(const QMatMulArgs& a, cudaStream_t stream) {
  int64_t total = a.index.m * a.index.n;
  for (int d = 0; d < a.index.rank; ++d) total *= a.index.dims[d];
  if (total == 0) return cudaSuccess;
  qmatmul_kernel<<<grid_for(total), kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_matmul_direct(int elem, const void* a, const void* b, void* y, const MatMulIndex& index, cudaStream_t stream) {
  int64_t total = index.m * index.n;
  for (int d = 0; d < index.rank; ++d) total *= index.dims[d];
  if (total == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      matmul_direct_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                        static_cast<T*>(y), index);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

}  // namespace kiln::cuda
