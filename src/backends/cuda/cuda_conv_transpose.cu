// backends/cuda/cuda_conv_transpose.cu — ConvTranspose as a direct gather: one thread per output
// element sums the input positions and kernel taps that land on it.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T, typename C>
__global__ void conv_transpose_kernel(ConvTransposeArgs a) {
  const int64_t isz = a.win.in_size(), osz = a.win.out_size(), ksz = a.win.kernel_size();
  const int64_t cg = a.c / a.group, mg = a.m / a.group;
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.w);
  const T* bias = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  KILN_GRID_LOOP(t, a.batch * a.m * osz) {
    const int64_t o_flat = t % osz, m = t / osz % a.m, n = t / (osz * a.m);
    const int64_t grp = m / mg, mi = m % mg;
    int64_t oc[6];
    int64_t rest = o_flat;
    for (int d = a.win.n - 1; d >= 0; --d) {
      oc[d] = rest % a.win.out[d];
      rest /= a.win.out[d];
    }
    C acc = bias ? convert<C>(bias[m]) : C(0);
    for (int64_t kf = 0; kf < ksz; ++kf) {
      // The input position this tap reads, if the output lands on the stride grid.
      int64_t koff = kf, ioff = 0;
      bool ok = true;
      for (int d = a.win.n - 1; d >= 0 && ok; --d) {
        const int64_t k = koff % a.win.kernel[d];
        koff /= a.win.kernel[d];
        const int64_t num = oc[d] + a.win.pad_begin[d] - k * a.win.dilations[d];
        if (num < 0 || num % a.win.strides[d] != 0) {
          ok = false;
          break;
        }
        const int64_t i = num / a.win.strides[d];
        if (i >= a.win.in[d]) ok = false;
        int64_t mul = 1;
        for (int e = d + 1; e < a.win.n; ++e) mul *= a.win.in[e];
        ioff += i * mul;
      }
      if (!ok) continue;
      for (int64_t c = 0; c < cg; ++c) {
        const int64_t ci = grp * cg + c;
        acc += convert<C>(x[(n * a.c + ci) * isz + ioff]) * convert<C>(w[(ci * mg + mi) * ksz + kf]);
      }
    }
    y[t] = convert<T>(acc);
  }
}

}  // namespace

int launch_conv_transpose(const ConvTransposeArgs& a, cudaStream_t stream) {
  if (a.win.n < 1 || a.win.n > 6 || a.group < 1) return cudaErrorInvalidValue;
  const int64_t total = a.batch * a.m * a.win.out_size();
  if (total == 0) return cudaSuccess;
  switch (a.elem) {
    case kElemF64:
      conv_transpose_kernel<double, double><<<grid_for(total), kThreads, 0, stream>>>(a);
      return static_cast<int>(cudaGetLastError());
    default:
      return dispatch_float(a.elem, [&](auto tag) {
        using T = decltype(tag);
        conv_transpose_kernel<T, float><<<grid_for(total), kThreads, 0, stream>>>(a);
        return static_cast<int>(cudaGetLastError());
      });
  }
}

}  // namespace kiln::cuda
