// backends/cuda/cuda_einsum.cu — Einsum as a general contraction loop, as the CPU kernel computes it.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void einsum_kernel(EinsumArgs a) {
  int64_t on = 1, rn = 1;
  for (int d = 0; d < a.out_rank; ++d) on *= a.out_sizes[d];
  for (int d = 0; d < a.red_rank; ++d) rn *= a.red_sizes[d];
  KILN_GRID_LOOP(o, on) {
    int64_t base[kMaxEinsumInputs] = {};
    int64_t rest = o;
    for (int d = a.out_rank - 1; d >= 0; --d) {
      const int64_t i = rest % a.out_sizes[d];
      rest /= a.out_sizes[d];
      for (int k = 0; k < a.inputs; ++k) base[k] += i * a.out_strides[k][d];
    }
    compute_t<T> acc = 0;
    for (int64_t r = 0; r < rn; ++r) {
      int64_t rr = r, off[kMaxEinsumInputs];
      for (int k = 0; k < a.inputs; ++k) off[k] = base[k];
      for (int d = a.red_rank - 1; d >= 0; --d) {
        const int64_t i = rr % a.red_sizes[d];
        rr /= a.red_sizes[d];
        for (int k = 0; k < a.inputs; ++k) off[k] += i * a.red_strides[k][d];
      }
      compute_t<T> p = 1;
      for (int k = 0; k < a.inputs; ++k) p *= convert<compute_t<T>>(static_cast<const T*>(a.in[k])[off[k]]);
      acc += p;
    }
    static_cast<T*>(a.y)[o] = convert<T>(acc);
  }
}

}  // namespace

int launch_einsum(const EinsumArgs& a, cudaStream_t stream) {
  int64_t on = 1;
  for (int d = 0; d < a.out_rank; ++d) on *= a.out_sizes[d];
  if (on == 0) return cudaSuccess;
  auto go = [&](auto tag) {
    using T = decltype(tag);
    einsum_kernel<T><<<grid_for(on), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  };
  switch (a.elem) {
    case kElemF64: return go(double{});
    case kElemI32: return go(int32_t{});
    case kElemI64: return go(int64_t{});
    default: return dispatch_float(a.elem, go);
  }
}

}  // namespace kiln::cuda
