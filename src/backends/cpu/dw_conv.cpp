// backends/cpu/dw_conv.cpp — the "dw-direct" channels-last depthwise convolution (see dw_conv.h).
//
// In NHWC a depthwise convolution is, per output pixel, a weighted sum of kh*kw input pixels' channel
// vectors with a weight vector per tap: no reduction across channels, so it vectorizes along C with
// contiguous loads and no shuffles. Undilated 3-, 5- and 7-wide windows at stride 1 or 2 (nearly
// every depthwise layer) slide along the output row 4 pixels at a time: each input vector of the row
// is loaded once and multiplied into every one of the 4 pixels whose window holds it, with the
// window's weight vectors in registers; columns outside the input (padding, the row's end) are
// skipped, so the edges take the same path. Other windows take a block of 4 pixels x 2 vectors that
// loads the tap's weights once for the 4 pixels, and edge pixels one at a time with the taps inside.
// Channels past the last whole block take two or one half-width vectors, then one at a time; rows of
// the window outside the input are skipped for the whole output row. Accumulators start at the bias;
// the residual and the activation follow on each task's output while it is in cache.
//
// A tactic next to oneDNN's NHWC depthwise kernel (brdgmm_dw), which took 10-20% longer than ORT's
// MLAS on the AVX-512 host and hardly sped up at 2 threads there on 14x14 and 7x7 layers
// (EfficientNet-B0 stages 4-7; bench/results/cpu_host_h200_2026-11-26.md). Tasks here are output rows
// x channel chunks, enough to split evenly among the threads. On the Zen 4 development machine
// oneDNN's kernel measured ~12% faster (the 16 depthwise layers of EfficientNet-B0, 1 and 2
// threads), so it is the tuner's to pick, not the untuned default (nn_conv.cpp, dw_eligible).
#include "backends/cpu/dw_conv.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/fused_common.h"

#pragma GCC diagnostic ignored "-Wpsabi"

namespace kiln::cpu {
namespace {

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

template <typename V>
[[gnu::always_inline]] inline V loadv(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <typename V>
[[gnu::always_inline]] inline void storev(float* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

constexpr int kPixels = 4;

// One output row's reading window: the image, the output row and the window rows [i0, i1) inside
// the input.
struct RowCtx {
  const float* img;
  int64_t oh, i0, i1;
};

// Output pixels [ow0, ow0 + P) of one row (P <= 4), channels [c, c + NV * lanes) (NV <= 2), taps j in
// [j0, j1) (all in range for every one of the P pixels). The accumulators are named variables, not an
// array: GCC keeps an array of vectors on the stack and adds into memory on every tap.
template <typename V, int NV, int P>
[[gnu::always_inline]] inline void pixels(const DwConv& d, const RowCtx& r, int64_t ow0, int64_t j0, int64_t j1, int64_t c,
                                          const float* bias, float* yrow) {
  static_assert(P >= 1 && P <= 4 && NV >= 1 && NV <= 2);
  const DwConvGeometry& g = d.g;
  constexpr int64_t L = sizeof(V) / sizeof(float);
  const V b0 = bias ? loadv<V>(bias + c) : V{};
  const V b1 = NV > 1 && bias ? loadv<V>(bias + c + L) : V{};
  V a00 = b0, a01 = b1, a10 = b0, a11 = b1, a20 = b0, a21 = b1, a30 = b0, a31 = b1;
  const int64_t step = g.stride_w * g.C;
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const int64_t ih = r.oh * g.stride_h - g.pad_top + i * g.dil_h;
    // The row's first column, and the column tap j of pixel ow0 reads (>= 0 for j >= j0): no pointer
    // is formed before the image.
    const float* xr = r.img + ih * g.W * g.C + c;
    const int64_t iw0 = ow0 * g.stride_w - g.pad_left;
    const float* wr = d.w.data() + i * g.kw * g.C + c;
    for (int64_t j = j0; j < j1; ++j) {
      const float* wp = wr + j * g.C;
      const float* xp = xr + (iw0 + j * g.dil_w) * g.C;
      const V w0 = loadv<V>(wp);
      a00 += loadv<V>(xp) * w0;
      if constexpr (P > 1) a10 += loadv<V>(xp + step) * w0;
      if constexpr (P > 2) a20 += loadv<V>(xp + 2 * step) * w0;
      if constexpr (P > 3) a30 += loadv<V>(xp + 3 * step) * w0;
      if constexpr (NV > 1) {
        const V w1 = loadv<V>(wp + L);
        a01 += loadv<V>(xp + L) * w1;
        if constexpr (P > 1) a11 += loadv<V>(xp + step + L) * w1;
        if constexpr (P > 2) a21 += loadv<V>(xp + 2 * step + L) * w1;
        if constexpr (P > 3) a31 += loadv<V>(xp + 3 * step + L) * w1;
      }
    }
  }
  float* yp = yrow + ow0 * g.C + c;
  storev(yp, a00);
  if constexpr (NV > 1) storev(yp + L, a01);
  if constexpr (P > 1) {
    storev(yp + g.C, a10);
    if constexpr (NV > 1) storev(yp + g.C + L, a11);
  }
  if constexpr (P > 2) {
    storev(yp + 2 * g.C, a20);
    if constexpr (NV > 1) storev(yp + 2 * g.C + L, a21);
  }
  if constexpr (P > 3) {
    storev(yp + 3 * g.C, a30);
    if constexpr (NV > 1) storev(yp + 3 * g.C + L, a31);
  }
}

// The same for one channel (the channels past the last whole vector).
[[gnu::always_inline]] inline void pixel_scalar(const DwConv& d, const RowCtx& r, int64_t ow, int64_t j0, int64_t j1, int64_t c,
                                                const float* bias, float* yrow) {
  const DwConvGeometry& g = d.g;
  float acc = bias ? bias[c] : 0.0f;
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const int64_t ih = r.oh * g.stride_h - g.pad_top + i * g.dil_h;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t iw = ow * g.stride_w - g.pad_left + j * g.dil_w;
      acc += r.img[(ih * g.W + iw) * g.C + c] * d.w[(i * g.kw + j) * g.C + c];
    }
  }
  yrow[ow * g.C + c] = acc;
}

// The window taps [t0, t1) that fall inside an input of `in` along one axis for output position o
// (the rows of a window for an output row, its columns for an output column).
[[gnu::always_inline]] inline void taps_inside(int64_t o, int64_t stride, int64_t pad, int64_t dil, int64_t k, int64_t in,
                                               int64_t* t0, int64_t* t1) {
  const int64_t lo = pad - o * stride;           // t * dil >= lo
  const int64_t hi = in - 1 + pad - o * stride;  // t * dil <= hi
  *t0 = lo <= 0 ? 0 : (lo + dil - 1) / dil;
  *t1 = hi < 0 ? 0 : std::min(k, hi / dil + 1);
  if (*t1 < *t0) *t1 = *t0;
}
[[gnu::always_inline]] inline void tap_range(const DwConvGeometry& g, int64_t ow, int64_t* j0, int64_t* j1) {
  taps_inside(ow, g.stride_w, g.pad_left, g.dil_w, g.kw, g.W, j0, j1);
}

// Output pixels [ow0, ow0 + np) (np <= 4) of one row at stride S, channels [c, c + lanes), undilated
// windows of KW taps: the pixels' windows overlap, so each input vector of the row is loaded once and
// multiplied into every pixel whose window holds it (S * 3 + KW input loads and KW weight loads for
// 4 * KW multiply-adds: 0.65 loads each at 5x5, against 1.25 one pixel at a time, and 4 independent
// sums). Input columns outside the row (the padding, or past the last of fewer than 4 pixels) are
// skipped, so the edges take this path too. The loops have constant bounds and unroll completely:
// the arrays are registers.
template <typename V, int KW, int S>
[[gnu::always_inline]] inline void slide(const DwConv& d, const RowCtx& r, int64_t ow0, int64_t np, int64_t c,
                                         const float* bias, float* yrow) {
  constexpr int P = kPixels, Q = S * (P - 1) + KW;
  const DwConvGeometry& g = d.g;
  const int64_t iw0 = ow0 * S - g.pad_left;  // the input column of q = 0
  const int64_t qlo = std::max<int64_t>(0, -iw0);
  const int64_t qhi = std::min<int64_t>(std::min<int64_t>(Q, S * (np - 1) + KW), g.W - iw0);
  const V b = bias ? loadv<V>(bias + c) : V{};
  V acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = b;
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const int64_t ih = r.oh * g.stride_h - g.pad_top + i * g.dil_h;
    const float* xr = r.img + ih * g.W * g.C + c;  // column iw0 + q is read, only for q >= qlo
    const float* wr = d.w.data() + i * KW * g.C + c;
    V w[KW];
#pragma GCC unroll 8
    for (int j = 0; j < KW; ++j) w[j] = loadv<V>(wr + j * g.C);
#pragma GCC unroll 32
    for (int q = 0; q < Q; ++q) {
      if (q < qlo || q >= qhi) continue;
      const V xv = loadv<V>(xr + (iw0 + q) * g.C);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const int j = q - S * p;
        if (j >= 0 && j < KW) acc[p] += xv * w[j];
      }
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
    if (p < np) storev(yrow + (ow0 + p) * g.C + c, acc[p]);
}

// A whole output row in blocks of 4 pixels by slide(), each of the NV vectors of the block on its own.
template <typename V, int NV, int KW, int S>
[[gnu::always_inline]] inline void slide_row(const DwConv& d, const RowCtx& r, int64_t c, const float* bias, float* yrow) {
  constexpr int64_t L = sizeof(V) / sizeof(float);
  for (int64_t ow = 0; ow < d.g.OW; ow += kPixels)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) slide<V, KW, S>(d, r, ow, std::min<int64_t>(kPixels, d.g.OW - ow), c + v * L, bias, yrow);
}

// Every output column of one row for channels [c, c + NV * lanes): undilated 3, 5 and 7 wide windows
// at stride 1 or 2 slide along the row; others take the left edge one pixel at a time, the interior
// [owl, owr) 4 pixels at a time, then the right edge.
template <typename V, int NV>
[[gnu::always_inline]] inline void columns(const DwConv& d, const RowCtx& r, int64_t c, int64_t owl, int64_t owr,
                                           const float* bias, float* yrow) {
  const DwConvGeometry& g = d.g;
  const int slide_kind = g.dil_w != 1 || g.stride_w > 2 ? 0 : static_cast<int>(g.kw * 10 + g.stride_w);
  switch (slide_kind) {
    case 31: return slide_row<V, NV, 3, 1>(d, r, c, bias, yrow);
    case 32: return slide_row<V, NV, 3, 2>(d, r, c, bias, yrow);
    case 51: return slide_row<V, NV, 5, 1>(d, r, c, bias, yrow);
    case 52: return slide_row<V, NV, 5, 2>(d, r, c, bias, yrow);
    case 71: return slide_row<V, NV, 7, 1>(d, r, c, bias, yrow);
    case 72: return slide_row<V, NV, 7, 2>(d, r, c, bias, yrow);
    default: break;
  }
  int64_t j0, j1;
  for (int64_t ow = 0; ow < owl; ++ow) {
    tap_range(g, ow, &j0, &j1);
    pixels<V, NV, 1>(d, r, ow, j0, j1, c, bias, yrow);
  }
  int64_t ow = owl;
  for (; ow + kPixels <= owr; ow += kPixels) pixels<V, NV, kPixels>(d, r, ow, 0, g.kw, c, bias, yrow);
  for (; ow < owr; ++ow) pixels<V, NV, 1>(d, r, ow, 0, g.kw, c, bias, yrow);
  for (ow = std::max(owr, owl); ow < g.OW; ++ow) {
    tap_range(g, ow, &j0, &j1);
    pixels<V, NV, 1>(d, r, ow, j0, j1, c, bias, yrow);
  }
}

// Task t (task = (image and output row) x channel chunk of `chunk` channels): blocks of NV vectors
// V, then of two and one narrower vectors V8, then single channels.
template <typename V, int NV, typename V8>
[[gnu::always_inline]] inline void task_body(const DwConv& d, const float* x, const float* bias, int64_t chunk, int64_t owl,
                                             int64_t owr, float* y, int64_t t) {
  const DwConvGeometry& g = d.g;
  constexpr int64_t B = NV * static_cast<int64_t>(sizeof(V) / sizeof(float));
  constexpr int64_t kSmall = sizeof(V8) / sizeof(float);
  const int64_t chunks = (g.C + chunk - 1) / chunk;
  const int64_t row = t / chunks, c0 = t % chunks * chunk, c1 = std::min(g.C, c0 + chunk);
  const int64_t n = row / g.OH, oh = row % g.OH;
  RowCtx r;
  r.img = x + n * g.H * g.W * g.C;
  r.oh = oh;
  taps_inside(oh, g.stride_h, g.pad_top, g.dil_h, g.kh, g.H, &r.i0, &r.i1);
  float* yrow = y + row * g.OW * g.C;
  int64_t c = c0;
  for (; c + B <= c1; c += B) columns<V, NV>(d, r, c, owl, owr, bias, yrow);
  for (; c + 2 * kSmall <= c1; c += 2 * kSmall) columns<V8, 2>(d, r, c, owl, owr, bias, yrow);
  for (; c + kSmall <= c1; c += kSmall) columns<V8, 1>(d, r, c, owl, owr, bias, yrow);
  for (; c < c1; ++c) {
    int64_t j0, j1;
    for (int64_t ow = 0; ow < g.OW; ++ow) {
      tap_range(g, ow, &j0, &j1);
      pixel_scalar(d, r, ow, j0, j1, c, bias, yrow);
    }
  }
}

[[gnu::target(KILN_TARGET_AVX512)]] void task_avx512(const DwConv& d, const float* x, const float* bias, int64_t chunk,
                                                      int64_t owl, int64_t owr, float* y, int64_t t) {
  task_body<v16f, 2, v8f>(d, x, bias, chunk, owl, owr, y, t);
}
[[gnu::target("avx2,fma")]] void task_avx2(const DwConv& d, const float* x, const float* bias, int64_t chunk, int64_t owl,
                                           int64_t owr, float* y, int64_t t) {
  task_body<v8f, 2, v4f>(d, x, bias, chunk, owl, owr, y, t);
}
void task_base(const DwConv& d, const float* x, const float* bias, int64_t chunk, int64_t owl, int64_t owr, float* y,
               int64_t t) {
  task_body<v4f, 2, v4f>(d, x, bias, chunk, owl, owr, y, t);
}

}  // namespace

bool dw_conv_eligible(const DwConvGeometry& g) {
  return g.N > 0 && g.C > 0 && g.kh >= 1 && g.kw >= 1 && g.kh * g.kw <= kDwConvMaxTaps && g.stride_h >= 1 &&
         g.stride_w >= 1 && g.dil_h >= 1 && g.dil_w >= 1 && g.pad_top >= 0 && g.pad_left >= 0 && g.OH > 0 && g.OW > 0;
}

Expected<std::shared_ptr<DwConv>> pack_dw_conv(const DwConvGeometry& g, const float* w) {
  if (!dw_conv_eligible(g)) return invalid_argument("dw-direct: the depthwise kernel does not take this geometry");
  auto d = std::make_shared<DwConv>();
  d->g = g;
  const int64_t taps = g.kh * g.kw;
  d->w.resize(static_cast<size_t>(taps * g.C));
  for (int64_t c = 0; c < g.C; ++c)
    for (int64_t t = 0; t < taps; ++t) d->w[t * g.C + c] = w[c * taps + t];
  return d;
}

void dw_conv(const DwConv& d, const float* x, const float* bias, const float* z, const Activation& act, float* y) {
  const DwConvGeometry& g = d.g;
  // The interior columns: every tap inside the input.
  const int64_t owl = std::min(g.OW, (g.pad_left + g.stride_w - 1) / g.stride_w);
  const int64_t last = g.W - 1 + g.pad_left - (g.kw - 1) * g.dil_w;  // ow * stride_w <= last
  const int64_t owr = last < 0 ? owl : std::max(owl, std::min(g.OW, last / g.stride_w + 1));
  // Channel chunks (multiples of 32) only where the rows alone are too few to share out evenly.
  const int64_t rows = g.N * g.OH, threads = std::max(1, omp_get_max_threads());
  int64_t chunk = g.C;
  if (threads > 1 && rows < 8 * threads) {
    const int64_t want = (8 * threads + rows - 1) / rows;
    chunk = std::max<int64_t>(32, (g.C / want + 31) / 32 * 32);
  }
  const int64_t chunks = (g.C + chunk - 1) / chunk;
  const bool epilogue = z || act.kind != ActKind::kNone;
  const fused::EpilogueRowsFn fin = fused::epilogue_rows_for(act.kind);
  // Each task's residual and activation right after the task, while its output is in cache.
  parallel_for(rows * chunks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (has_avx512()) task_avx512(d, x, bias, chunk, owl, owr, y, t);
      else if (has_avx2_fma()) task_avx2(d, x, bias, chunk, owl, owr, y, t);
      else task_base(d, x, bias, chunk, owl, owr, y, t);
      if (!epilogue) continue;
      const int64_t row = t / chunks, c0 = t % chunks * chunk, width = std::min(g.C, c0 + chunk) - c0;
      float* yr = y + row * g.OW * g.C + c0;
      const float* zr = z ? z + row * g.OW * g.C + c0 : nullptr;
      if (width == g.C) {  // the whole row is one contiguous run
        if (zr)
          for (int64_t i = 0; i < g.OW * g.C; ++i) yr[i] += zr[i];
        fin(yr, 0, 1, g.OW * g.C, nullptr, act);
        continue;
      }
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        float* yp = yr + ow * g.C;
        if (zr)
          for (int64_t i = 0; i < width; ++i) yp[i] += zr[ow * g.C + i];
        fin(yp, 0, 1, width, nullptr, act);
      }
    }
  });
}

}  // namespace kiln::cpu
