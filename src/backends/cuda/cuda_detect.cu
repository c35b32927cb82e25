// backends/cuda/cuda_detect.cu — Det, DeformConv and MaxUnpool as the CPU kernels compute them.
#include "backends/cuda/cuda_types.cuh"

namespace kiln::cuda {
namespace {

template <typename T>
__global__ void det_kernel(const T* x, T* y, double* ws, int64_t count, int64_t m) {
  KILN_GRID_LOOP(i, count) {
    double* a = ws + i * m * m;
    for (int64_t k = 0; k < m * m; ++k) a[k] = convert<double>(x[i * m * m + k]);
    double d = 1;
    for (int64_t c = 0; c < m && d != 0; ++c) {
      int64_t p = c;
      for (int64_t r = c + 1; r < m; ++r)
        if (fabs(a[r * m + c]) > fabs(a[p * m + c])) p = r;
      if (a[p * m + c] == 0) {
        d = 0;
        break;
      }
      if (p != c) {
        for (int64_t k = 0; k < m; ++k) {
          const double t = a[p * m + k];
          a[p * m + k] = a[c * m + k];
          a[c * m + k] = t;
        }
        d = -d;
      }
      d *= a[c * m + c];
      for (int64_t r = c + 1; r < m; ++r) {
        const double f = a[r * m + c] / a[c * m + c];
        for (int64_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
      }
    }
    y[i] = convert<T>(d);
  }
}

template <typename T>
__device__ double deform_sample(const T* p, int64_t H, int64_t W, double h, double w) {
  if (h <= -1 || h >= static_cast<double>(H) || w <= -1 || w >= static_cast<double>(W)) return 0;
  const int64_t h0 = static_cast<int64_t>(floor(h)), w0 = static_cast<int64_t>(floor(w));
  const double lh = h - static_cast<double>(h0), lw = w - static_cast<double>(w0);
  auto at = [&](int64_t yy, int64_t xx) { return yy >= 0 && yy < H && xx >= 0 && xx < W ? convert<double>(p[yy * W + xx]) : 0.0; };
  return (1 - lh) * (1 - lw) * at(h0, w0) + (1 - lh) * lw * at(h0, w0 + 1) + lh * (1 - lw) * at(h0 + 1, w0) +
         lh * lw * at(h0 + 1, w0 + 1);
}

template <typename T>
__global__ void deform_conv_kernel(DeformConvArgs a) {
  const T* x = static_cast<const T*>(a.x);
  const T* wt = static_cast<const T*>(a.weight);
  const T* off = static_cast<const T*>(a.offset);
  const T* bias = static_cast<const T*>(a.bias);
  const T* mask = static_cast<const T*>(a.mask);
  const int64_t K = a.kh * a.kw, cpg = a.c / a.group, ocpg = a.oc / a.group, cpog = a.c / a.offset_group;
  KILN_GRID_LOOP(t, a.n * a.oc * a.oh * a.ow) {
    const int64_t ow = t % a.ow, oh = t / a.ow % a.oh, oc = t / (a.ow * a.oh) % a.oc, n = t / (a.ow * a.oh * a.oc);
    const int64_t g = oc / ocpg;
    double acc = bias ? convert<double>(bias[oc]) : 0.0;
    for (int64_t ci = 0; ci < cpg; ++ci) {
      const int64_t c = g * cpg + ci, og = c / cpog;
      for (int64_t i = 0; i < a.kh; ++i)
        for (int64_t j = 0; j < a.kw; ++j) {
          const int64_t kk = i * a.kw + j;
          const double offh = convert<double>(off[((((n * a.offset_group + og) * K + kk) * 2) * a.oh + oh) * a.ow + ow]);
          const double offw = convert<double>(off[((((n * a.offset_group + og) * K + kk) * 2 + 1) * a.oh + oh) * a.ow + ow]);
          const double m = mask ? convert<double>(mask[(((n * a.offset_group + og) * K + kk) * a.oh + oh) * a.ow + ow]) : 1.0;
          const double hh = static_cast<double>(oh * a.sh - a.pt + i * a.dh) + offh;
          const double ww = static_cast<double>(ow * a.sw - a.pl + j * a.dw) + offw;
          const double v = m * deform_sample(x + (n * a.c + c) * a.h * a.w, a.h, a.w, hh, ww);
          acc += convert<double>(wt[(oc * cpg + ci) * K + kk]) * v;
        }
    }
    static_cast<T*>(a.y)[t] = convert<T>(acc);
  }
}

template <typename T>
__global__ void unpool_kernel(const T* x, const int64_t* ind, T* y, int64_t n, UnpoolIndex ix) {
  int64_t total = 1;
  for (int d = 0; d < ix.rank; ++d) total *= ix.inferred[d];
  KILN_GRID_LOOP(i, n) {
    const int64_t j = ind[i];
    if (j < 0 || j >= total) continue;
    int64_t at = j;
    if (!ix.same) {
      at = 0;
      int64_t rest = j, stride = 1;
      for (int d = ix.rank - 1; d >= 0; --d) {
        at += (rest % ix.inferred[d]) * stride;
        rest /= ix.inferred[d];
        stride *= ix.out[d];
      }
    }
    y[at] = x[i];
  }
}

__device__ __forceinline__ int32_t q8v(const void* p, bool is_signed, int64_t i) {
  return is_signed ? static_cast<const int8_t*>(p)[i] : static_cast<const uint8_t*>(p)[i];
}

__global__ void qconv_kernel(QConvArgs a) {
  const int64_t isz = a.win.in_size(), osz = a.win.out_size(), ksz = a.win.kernel_size();
  const int64_t cg = a.c / a.group, mg = a.m / a.group;
  const int32_t xz = a.xz ? q8v(a.xz, a.x_signed, 0) : 0;
  KILN_GRID_LOOP(t, a.batch * a.m * osz) {
    const int64_t o_flat = t % osz, m = t / osz % a.m, n = t / (osz * a.m), grp = m / mg;
    const int32_t wz = a.wz ? q8v(a.wz, a.w_signed, a.wz_per_m ? m : 0) : 0;
    int64_t oc[3];
    int64_t rest = o_flat;
    for (int d = a.win.n - 1; d >= 0; --d) {
      oc[d] = rest % a.win.out[d];
      rest /= a.win.out[d];
    }
    int32_t acc = 0;
    for (int64_t kf = 0; kf < ksz; ++kf) {
      int64_t koff = kf, ioff = 0, mul = 1;
      bool ok = true;
      for (int d = a.win.n - 1; d >= 0; --d) {
        const int64_t k = koff % a.win.kernel[d];
        koff /= a.win.kernel[d];
        const int64_t i = oc[d] * a.win.strides[d] - a.win.pad_begin[d] + k * a.win.dilations[d];
        if (i < 0 || i >= a.win.in[d]) ok = false;
        ioff += i * mul;
        mul *= a.win.in[d];
      }
      if (!ok) continue;
      for (int64_t c = 0; c < cg; ++c) {
        const int64_t ci = grp * cg + c;
        acc += (q8v(a.x, a.x_signed, (n * a.c + ci) * isz + ioff) - xz) * (q8v(a.w, a.w_signed, (m * cg + c) * ksz + kf) - wz);
      }
    }
    if (!a.qlinear) {
      static_cast<int32_t*>(a.y)[t] = acc;
      continue;
    }
    const int32_t v = acc + (a.bias ? a.bias[m] : 0);
    const float scale = a.xs[0] * a.ws[a.ws_per_m ? m : 0] / a.ys[0];
    const double lo = a.y_signed ? -128.0 : 0.0, hi = a.y_signed ? 127.0 : 255.0;
    double q = rint(static_cast<double>(v) * scale) + (a.yz ? q8v(a.yz, a.y_signed, 0) : 0);
    q = q < lo ? lo : q > hi ? hi : q;
    if (a.y_signed) static_cast<int8_t*>(a.y)[t] = static_cast<int8_t>(q);
    else static_cast<uint8_t*>(a.y)[t] = static_cast<uint8_t>(q);
  }
}

template <typename F>
int dispatch_real(int elem, F&& f) {
  if (elem == kElemF64) return f(double{});
  return dispatch_float(elem, f);
}

}  // namespace

int launch_qconv(const QConvArgs& a, cudaStream_t stream) {
  const int64_t total = a.batch * a.m * a.win.out_size();
  if (total == 0) return cudaSuccess;
  if (a.win.n < 1 || a.win.n > 3 || a.group < 1) return cudaErrorInvalidValue;
  qconv_kernel<<<grid_for(total), kThreads, 0, stream>>>(a);
  return static_cast<int>(cudaGetLastError());
}

int launch_det(int elem, const void* x, void* y, double* workspace, int64_t count, int64_t m, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  return dispatch_real(elem, [&](auto tag) {
    using T = decltype(tag);
    det_kernel<T><<<grid_for(count, 64), 64, 0, stream>>>(static_cast<const T*>(x), static_cast<T*>(y), workspace, count, m);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_deform_conv(const DeformConvArgs& a, cudaStream_t stream) {
  const int64_t total = a.n * a.oc * a.oh * a.ow;
  if (total == 0) return cudaSuccess;
  return dispatch_real(a.elem, [&](auto tag) {
    using T = decltype(tag);
    deform_conv_kernel<T><<<grid_for(total), kThreads, 0, stream>>>(a);
    return static_cast<int>(cudaGetLastError());
  });
}

int launch_max_unpool(int elem_bytes, const void* x, const int64_t* ind, void* y, int64_t n, int64_t y_numel,
                      const UnpoolIndex& index, cudaStream_t stream) {
  if (y_numel > 0) {
    const int err = cudaMemsetAsync(y, 0, static_cast<size_t>(y_numel) * elem_bytes, stream);
    if (err != cudaSuccess) return err;
  }
  if (n == 0) return cudaSuccess;
  return dispatch_bytes(elem_bytes, [&](auto tag) {
    using T = decltype(tag);
    unpool_kernel<T><<<grid_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x), ind, static_cast<T*>(y), n, index);
    return static_cast<int>(cudaGetLastError());
  });
}

}  // namespace kiln::cuda
