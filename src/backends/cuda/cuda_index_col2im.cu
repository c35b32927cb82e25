// backends/cuda/cuda_index_col2im.cu — Col2Im as a gather: each image element sums the blocks that
// cover it.
#include <type_traits>

#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void col2im_kernel(Col2ImArgs a) {
  int64_t isz = 1;
  for (int d = 0; d < a.s; ++d) isz *= a.img[d];
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  KILN_GRID_LOOP(t, a.nc * isz) {
    const int64_t nc = t / isz, p = t % isz;
    int64_t pos[6];
    int64_t prest = p;
    for (int d = a.s - 1; d >= 0; --d) {
      pos[d] = prest % a.img[d];
      prest /= a.img[d];
    }
    compute_t<T> acc = 0;
    for (int64_t kk = 0; kk < a.kprod; ++kk) {
      int64_t rest = kk, l = 0;
      bool ok = true;
      int64_t kpos[6];
      for (int d = a.s - 1; d >= 0; --d) {
        kpos[d] = rest % a.blk[d];
        rest /= a.blk[d];
      }
      for (int d = 0; d < a.s && ok; ++d) {
        const int64_t num = pos[d] + a.pad[d] - kpos[d] * a.dil[d];
        if (num < 0 || num % a.str[d] != 0 || num / a.str[d] >= a.nblk[d]) ok = false;
        else l = l * a.nblk[d] + num / a.str[d];
      }
      if (ok) acc += convert<compute_t<T>>(x[(nc * a.kprod + kk) * a.l + l]);
    }
    y[t] = convert<T>(acc);
  }
}

}  // namespace

int launch_col2im(const Col2ImArgs& a, cudaStream_t stream) {
  int64_t total = a.nc;
  for (int d = 0; d < a.s; ++d) total *= a.img[d];
  if (total == 0) return cudaSuccess;
  return dispatch_numeric(a.elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      col2im_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(a);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

}  // namespace kiln::cuda
