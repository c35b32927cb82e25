// backends/cuda/cuda_tail.cu — TopK (selection per line), DFT (direct, in double) and Col2Im (gather)
// as the CPU kernels compute them.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

// Whether (a, ia) comes before (c, ic) in TopK's order.
__device__ __forceinline__ bool before(double a, int64_t ia, double c, int64_t ic, bool largest) {
  const bool an = a != a, cn = c != c;
  if (largest) {
    if (an || cn) return an && !cn ? true : (an && cn ? ia < ic : false);
    return a > c || (a == c && ia < ic);
  }
  if (an || cn) return !an && cn ? true : (an && cn ? ia < ic : false);
  return a < c || (a == c && ia < ic);
}

template <typename T>
__global__ void topk_kernel(const T* x, T* vals, int64_t* idx, int64_t outer, int64_t n, int64_t inner, int64_t k,
                            bool largest) {
  KILN_GRID_LOOP(line, outer * inner) {
    const int64_t o = line / inner, i = line % inner;
    const T* xp = x + o * n * inner + i;
    int64_t prev = -1;
    double pv = 0;
    for (int64_t r = 0; r < k; ++r) {
      int64_t best = -1;
      double bv = 0;
      for (int64_t j = 0; j < n; ++j) {
        const double v = convert<double>(xp[j * inner]);
        if (prev >= 0 && !before(pv, prev, v, j, largest)) continue;  // already taken
        if (best < 0 || before(v, j, bv, best, largest)) {
          best = j;
          bv = v;
        }
      }
      vals[(o * k + r) * inner + i] = xp[best * inner];
      idx[(o * k + r) * inner + i] = best;
      prev = best;
      pv = bv;
    }
  }
}

template <typename T>
__global__ void dft_kernel(DftArgs a) {
  const T* x = static_cast<const T*>(a.x);
  T* y = static_cast<T*>(a.y);
  const int64_t cin = a.complex_in ? 2 : 1;
  const double sign = a.inverse ? 1.0 : -1.0, scale = a.inverse ? 1.0 / static_cast<double>(a.n) : 1.0;
  KILN_GRID_LOOP(t, a.outer * a.m * a.inner) {
    const int64_t i = t % a.inner, kk = t / a.inner % a.m, o = t / (a.inner * a.m);
    auto in_at = [&](int64_t s, double& re, double& im) {
      const int64_t e = (o * a.len + s) * a.inner + i;
      re = convert<double>(x[e * cin]);
      im = a.complex_in ? convert<double>(x[e * cin + 1]) : 0.0;
    };
    double sr = 0, si = 0;
    int64_t tw = 0;
    for (int64_t s = 0; s < a.n; ++s) {
      double re = 0, im = 0;
      if (a.real_out) {  // Hermitian extension of the half spectrum (irfft)
        const int64_t half = a.n / 2;
        if (s <= half) {
          if (s < a.len) in_at(s, re, im);
        } else if (a.n - s < a.len) {
          in_at(a.n - s, re, im);
          im = -im;
        }
      } else if (s < a.len) {
        in_at(s, re, im);
      }
      const double ang = sign * 2 * 3.14159265358979323846 * static_cast<double>(tw) / static_cast<double>(a.n);
      const double c = cos(ang), sn = sin(ang);
      sr += re * c - im * sn;
      si += re * sn + im * c;
      tw += kk;
      if (tw >= a.n) tw %= a.n;
    }
    if (a.real_out) {
      y[t] = convert<T>(sr * scale);
    } else {
      y[2 * t] = convert<T>(sr * scale);
      y[2 * t + 1] = convert<T>(si * scale);
    }
  }
}

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

template <typename F>
int dispatch_real(int elem, F&& f) {
  if (elem == kElemF64) return f(double{});
  return dispatch_float(elem, f);
}

}  // namespace

int launch_topk(int elem, const void* x, void* values, int64_t* indices, int64_t outer, int64_t n, int64_t inner, int64_t k,
                bool largest, cudaStream_t stream) {
  if (outer * inner * k == 0) return cudaSuccess;
  return dispatch_numeric(elem, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same<T, bool>::value) {
      return static_cast<int>(cudaErrorInvalidValue);
    } else {
      topk_kernel<T><<<grid_for(outer * inner, 64), 64, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(values), indices,
                                                                     outer, n, inner, k, largest);
      return static_cast<int>(cudaGetLastError());
    }
  });
}

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

int launch_dft(const DftArgs& a, cudaStream_t stream) {
  const int64_t total = a.outer * a.m * a.inner;
  if (total == 0) return cudaSuccess;
  return dispatch_real(a.elem, [&](auto tag) {
    using T = decltype(tag);
    dft_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

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
