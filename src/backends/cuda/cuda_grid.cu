// backends/cuda/cuda_grid.cu — GridSample (one thread per output position, every channel) and
// AffineGrid (one thread per grid point), with ops/grid_math.h's rules.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void grid_sample_kernel(GridSampleArgs a) {
  int64_t out_sp = 1, in_sp = 1;
  for (int i = 0; i < a.r; ++i) {
    out_sp *= a.out[i];
    in_sp *= a.in[i];
  }
  int64_t stride[4];
  for (int i = a.r - 1, s = 1; i >= 0; --i) {
    stride[i] = s;
    s *= static_cast<int>(a.in[i]);
  }
  const T* x = static_cast<const T*>(a.x);
  const T* g = static_cast<const T*>(a.grid);
  T* y = static_cast<T*>(a.y);
  KILN_GRID_LOOP(t, a.n * out_sp) {
    const int64_t n = t / out_sp, p = t % out_sp;
    grid::Tap taps[4][4];
    int ntaps[4], odo[4];
    for (int i = 0; i < a.r; ++i) {
      ntaps[i] = grid::dim_taps(a.rule, convert<double>(g[t * a.r + (a.r - 1 - i)]), a.in[i], taps[i]);
      odo[i] = 0;
    }
    for (int64_t c = 0; c < a.c; ++c) {
      const T* xc = x + (n * a.c + c) * in_sp;
      double acc = 0;
      for (int i = 0; i < a.r; ++i) odo[i] = 0;
      while (true) {  // every combination of one tap per dimension
        double w = 1;
        int64_t off = 0;
        for (int i = 0; i < a.r; ++i) {
          const grid::Tap& tp = taps[i][odo[i]];
          w *= tp.weight;
          if (tp.index < 0) off = -1;
          if (off >= 0) off += tp.index * stride[i];
        }
        if (off >= 0 && w != 0) acc += w * convert<double>(xc[off]);
        int i = a.r - 1;
        while (i >= 0 && ++odo[i] == ntaps[i]) odo[i--] = 0;
        if (i < 0) break;
      }
      y[(n * a.c + c) * out_sp + p] = convert<T>(acc);
    }
  }
}

struct AffineSizes {
  int64_t d[3];
};

template <typename T>
__global__ void affine_grid_kernel(const T* theta, T* y, int64_t n_batch, int r, AffineSizes sz, int64_t sp, bool align) {
  KILN_GRID_LOOP(t, n_batch * sp) {
    const int64_t n = t / sp;
    int64_t rem = t % sp;
    double pos[4];  // (x, y, z) order: the last spatial dim first, then 1
    for (int i = r - 1; i >= 0; --i) {
      const int64_t d = sz.d[i];
      pos[r - 1 - i] = grid::base_coord(rem % d, d, align);
      rem /= d;
    }
    pos[r] = 1.0;
    const T* th = theta + n * r * (r + 1);
    for (int o = 0; o < r; ++o) {
      double v = 0;
      for (int k = 0; k <= r; ++k) v += convert<double>(th[o * (r + 1) + k]) * pos[k];
      y[t * r + o] = convert<T>(v);
    }
  }
}

template <typename F>
int dispatch_real(int elem, F&& f) {
  if (elem == kElemF64) return f(double{});
  return dispatch_float(elem, f);
}

}  // namespace

int launch_grid_sample(const GridSampleArgs& a, cudaStream_t stream) {
  if (a.r < 1 || a.r > 4) return cudaErrorInvalidValue;
  int64_t m = a.n;
  for (int i = 0; i < a.r; ++i) m *= a.out[i];
  if (m == 0 || a.c == 0) return cudaSuccess;
  return dispatch_real(a.elem, [&](auto tag) {
    using T = decltype(tag);
    grid_sample_kernel<T><<<grid_for(m), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_affine_grid(int elem, const void* theta, void* y, int64_t n, int r, const int64_t* sizes, bool align,
                       cudaStream_t stream) {
  if (r < 2 || r > 3) return cudaErrorInvalidValue;
  AffineSizes sz{};
  int64_t sp = 1;
  for (int i = 0; i < r; ++i) {
    sz.d[i] = sizes[i];
    sp *= sizes[i];
  }
  if (n * sp == 0) return cudaSuccess;
  return dispatch_real(elem, [&](auto tag) {
    using T = decltype(tag);
    affine_grid_kernel<T><<<grid_for(n * sp), kThreads, 0, stream>>>(static_cast<const T*>(theta), static_cast<T*>(y), n, r,
                                                                      sz, sp, align);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
