// backends/cuda/cuda_training.cu — the training optimizers (the update of ops/optimizer_math.h).
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

}  // namespace kiln::cuda
