// backends/cpu/nn_pool.cpp — MaxPool, AveragePool, LpPool, their Global* forms and MaxUnpool on
// the CPU. One generic N-d window walk; the per-window reduction is the only difference.
#include <cmath>
#include <limits>
#include <type_traits>

#include "backends/cpu/nn_common.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_nn.h"

namespace kiln::cpu::nn {
namespace {

enum class PoolKind { kMax, kAvg, kLp };

// What an average pool sums in: float for float32 and the 16-bit floats, double for double; every
// path (N-d, 2-D planes, channels-last) adds a window's elements in window order and divides once,
// so they agree to the bit. Float sums, as ONNX Runtime's MLAS does: a window of k elements is off by
// at most about k * 2^-24 relative (the global pools, over whole images, sum in double).
template <typename C>
using AvgAcc = std::conditional_t<std::is_same_v<C, double>, double, float>;

struct PoolAttrs {
  PoolKind kind = PoolKind::kMax;
  ops::WindowAttrs w;
  bool count_include_pad = false;
  bool column_major = false;  // MaxPool storage_order for Indices
  double p = 2;
};

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// Pools every [N*C] plane of x (spatial dims `in`) into y (dims g.out); idx gets MaxPool's flat
// input indices when non-null.
template <typename C>
void pool_planes(const PoolAttrs& a, const ops::WindowGeometry& g, const std::vector<int64_t>& in, int64_t planes,
                 const C* x, C* y, int64_t* idx) {
  const size_t n = in.size();
  const int64_t isz = prod(in), osz = prod(g.out);
  SmallDims<> cm_stride(n, 1), rm_stride(n, 1);
  for (size_t d = 1; d < n; ++d) cm_stride[d] = cm_stride[d - 1] * in[d - 1];
  for (size_t d = n - 1; d-- > 0;) rm_stride[d] = rm_stride[d + 1] * in[d + 1];
  parallel_for(planes * osz, 256, [&](int64_t b, int64_t e) {
    SmallDims<> oc(n), lo(n), hi(n), start(n), j(n);
    for (int64_t t = b; t < e; ++t) {
      const int64_t plane = t / osz;
      int64_t o = t % osz;
      for (size_t d = n; d-- > 0;) {
        oc[d] = o % g.out[d];
        o /= g.out[d];
      }
      int64_t padded_count = 1;  // window positions inside the padded input (count_include_pad)
      bool empty = false;
      for (size_t d = 0; d < n; ++d) {
        const int64_t s = oc[d] * g.strides[d] - g.pads[d], dil = g.dilations[d], k = g.kernel[d];
        start[d] = s;
        // first/last window step whose position lies inside [0, in)
        lo[d] = s >= 0 ? 0 : (-s + dil - 1) / dil;
        const int64_t last = in[d] - 1 - s;  // largest allowed offset
        hi[d] = last < 0 ? -1 : std::min(k - 1, last / dil);
        const int64_t plast = in[d] + g.pads[n + d] - 1 - s;
        padded_count *= plast < 0 ? 0 : std::min(k, plast / dil + 1);
        if (lo[d] > hi[d]) empty = true;
      }
      const C* xp = x + plane * isz;
      double acc = a.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
      AvgAcc<C> sum = 0;  // an average's sum, in window order
      int64_t best = -1, count = 0;
      if (!empty) {
        for (size_t d = 0; d < n; ++d) j[d] = lo[d];
        while (true) {
          int64_t off = 0;
          for (size_t d = 0; d < n; ++d) off += (start[d] + j[d] * g.dilations[d]) * rm_stride[d];
          const double v = static_cast<double>(xp[off]);
          if (a.kind == PoolKind::kMax) {
            if (v > acc || best < 0) { acc = v; best = off; }
          } else if (a.kind == PoolKind::kAvg) {
            sum += static_cast<AvgAcc<C>>(xp[off]);
          } else {
            acc += std::pow(std::fabs(v), a.p);
          }
          ++count;
          size_t d = n;
          while (d-- > 0) {
            if (++j[d] <= hi[d]) break;
            j[d] = lo[d];
          }
          if (d == static_cast<size_t>(-1)) break;
        }
      }
      C out;
      if (a.kind == PoolKind::kMax) out = static_cast<C>(acc);
      else if (a.kind == PoolKind::kAvg) {
        const int64_t div = a.count_include_pad ? padded_count : count;
        out = static_cast<C>(div ? sum / static_cast<AvgAcc<C>>(div) : std::numeric_limits<AvgAcc<C>>::quiet_NaN());
      } else {
        out = static_cast<C>(std::pow(acc, 1.0 / a.p));
      }
      y[t] = out;
      if (idx) {
        int64_t flat = 0;
        if (best >= 0) {
          int64_t r = best;
          for (size_t d = 0; d < n; ++d) {
            flat += (a.column_major ? cm_stride[d] : rm_stride[d]) * (r / rm_stride[d]);
            r %= rm_stride[d];
          }
        }
        idx[t] = plane * isz + flat;
      }
    }
  });
}

// The common case, 2-D max/average pooling of float32 without Indices: the same results as
// pool_planes (the first element of a window starts a max, later ones replace it when greater;
// averages sum in float in window order and divide once), with the window bounds per output row and
// column worked out once instead of an N-d walk per element.
// Per output row (or column): the first and last window step inside [0, in), and the padded window's
// count (count_include_pad). Made once per shape signature.
struct Span {
  int64_t lo, hi, padded;
};
std::vector<Span> window_spans(int64_t out, int64_t in_len, int64_t stride, int64_t pad_b, int64_t pad_e, int64_t dil, int64_t k) {
  std::vector<Span> v(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t s = o * stride - pad_b;
    const int64_t lo = s >= 0 ? 0 : (-s + dil - 1) / dil;
    const int64_t last = in_len - 1 - s;
    const int64_t hi = last < 0 ? -1 : std::min(k - 1, last / dil);
    const int64_t plast = in_len + pad_e - 1 - s;
    v[o] = {lo, hi, plast < 0 ? 0 : std::min(k, plast / dil + 1)};
  }
  return v;
}

void pool_planes_2d(const PoolAttrs& a, const ops::WindowGeometry& g, const std::vector<int64_t>& in, int64_t planes,
                    const std::vector<Span>& rows, const std::vector<Span>& cols, const float* x, float* y) {
  const int64_t H = in[0], W = in[1], OH = g.out[0], OW = g.out[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], ph = g.pads[0], pw = g.pads[1], dh = g.dilations[0], dw = g.dilations[1];
  const int64_t kh = g.kernel[0], kw = g.kernel[1];
  const bool is_max = a.kind == PoolKind::kMax;
  parallel_for(planes * OH, std::max<int64_t>(1, 4096 / std::max<int64_t>(OW * kh * kw, 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t plane = t / OH, oh = t % OH;
      const Span& r = rows[oh];
      const float* xp = x + plane * H * W;
      const int64_t h0 = oh * sh - ph;  // the window's first row (may lie in the padding)
      float* yp = y + t * OW;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const Span& c = cols[ow];
        const int64_t w0 = ow * sw - pw;
        if (r.lo > r.hi || c.lo > c.hi) {
          yp[ow] = is_max ? -std::numeric_limits<float>::infinity()
                          : (a.count_include_pad && r.padded * c.padded ? 0.0f : std::numeric_limits<float>::quiet_NaN());
          continue;
        }
        if (is_max) {
          float m = xp[(h0 + r.lo * dh) * W + w0 + c.lo * dw];
          for (int64_t i = r.lo; i <= r.hi; ++i) {
            const float* row = xp + (h0 + i * dh) * W;
            for (int64_t j = i == r.lo ? c.lo + 1 : c.lo; j <= c.hi; ++j) {
              const float v = row[w0 + j * dw];
              m = v > m ? v : m;
            }
          }
          yp[ow] = m;
        } else {
          float acc = 0;
          for (int64_t i = r.lo; i <= r.hi; ++i) {
            const float* row = xp + (h0 + i * dh) * W;
            for (int64_t j = c.lo; j <= c.hi; ++j) acc += row[w0 + j * dw];
          }
          const int64_t div = a.count_include_pad ? r.padded * c.padded : (r.hi - r.lo + 1) * (c.hi - c.lo + 1);
          yp[ow] = acc / static_cast<float>(div);
        }
      }
    }
  });
}

// One output pixel of a channels-last max pool: y[c] = the maximum over the window's taps, starting
// from its first tap (pool_planes' order and NaN rule: `x > m ? x : m`). Channels go in blocks of 32
// whose running maxima stay in registers across the taps (one load per tap and channel, one store).
struct PoolWindow {  // one output pixel's window of a channels-last pool (max_window, mean_window)
  const float* x;    // the window's first row's first tap
  int64_t rows, cols, row_step, col_step, C;
};
template <int kBlock>
[[gnu::always_inline]] inline void max_window_block(const PoolWindow& w, int64_t c0, float* __restrict y) {
  float m[kBlock];
  for (int c = 0; c < kBlock; ++c) m[c] = w.x[c0 + c];
  for (int64_t i = 0; i < w.rows; ++i)
    for (int64_t j = i == 0 ? 1 : 0; j < w.cols; ++j) {
      const float* __restrict xp = w.x + i * w.row_step + j * w.col_step + c0;
      for (int c = 0; c < kBlock; ++c) m[c] = xp[c] > m[c] ? xp[c] : m[c];
    }
  for (int c = 0; c < kBlock; ++c) y[c0 + c] = m[c];
}
[[gnu::always_inline]] inline void max_window(const PoolWindow& w, float* __restrict y) {
  int64_t c0 = 0;
  for (; c0 + 32 <= w.C; c0 += 32) max_window_block<32>(w, c0, y);
  for (; c0 + 8 <= w.C; c0 += 8) max_window_block<8>(w, c0, y);
  for (; c0 < w.C; ++c0) max_window_block<1>(w, c0, y);
}
[[gnu::target("avx2,fma")]] void max_window_avx2(const PoolWindow& w, float* y) { max_window(w, y); }
[[gnu::target(KILN_TARGET_AVX512)]] void max_window_avx512(const PoolWindow& w, float* y) { max_window(w, y); }
void max_window_base(const PoolWindow& w, float* y) { max_window(w, y); }

// One output pixel of a channels-last average pool: blocks of 32 channels whose float sums stay in
// registers across the taps, contiguous loads, each channel summed in window order as the NCHW paths
// sum it (AvgAcc: the same bits), then divided by `div`. (Inception v3's 3x3 average over 35x35x288
// at 1 thread on the AVX2 machine: 0.6-0.8 ms with double sums, 0.37 with float ones, ORT 0.38.)
template <int kBlock>
[[gnu::always_inline]] inline void mean_window_block(const PoolWindow& w, int64_t c0, int64_t div, float* __restrict y) {
  float acc[kBlock];
  for (int c = 0; c < kBlock; ++c) acc[c] = 0;
  for (int64_t i = 0; i < w.rows; ++i)
    for (int64_t j = 0; j < w.cols; ++j) {
      const float* __restrict xp = w.x + i * w.row_step + j * w.col_step + c0;
      for (int c = 0; c < kBlock; ++c) acc[c] += xp[c];
    }
  for (int c = 0; c < kBlock; ++c) y[c0 + c] = acc[c] / static_cast<float>(div);
}
[[gnu::always_inline]] inline void mean_window(const PoolWindow& w, int64_t div, float* __restrict y) {
  int64_t c0 = 0;
  for (; c0 + 32 <= w.C; c0 += 32) mean_window_block<32>(w, c0, div, y);
  for (; c0 + 8 <= w.C; c0 += 8) mean_window_block<8>(w, c0, div, y);
  for (; c0 < w.C; ++c0) mean_window_block<1>(w, c0, div, y);
}
[[gnu::target("avx2,fma")]] void mean_window_avx2(const PoolWindow& w, int64_t div, float* y) { mean_window(w, div, y); }
[[gnu::target(KILN_TARGET_AVX512)]] void mean_window_avx512(const PoolWindow& w, int64_t div, float* y) { mean_window(w, div, y); }
void mean_window_base(const PoolWindow& w, int64_t div, float* y) { mean_window(w, div, y); }

// Global average pools sum their pixels in chunks of kGlobalChunk: a double sum over each chunk in
// order, then the chunks' sums in order. The NCHW and channels-last kernels both do exactly this (the
// same bits), and the channels-last one can split a batch-1 image's pixels among threads by chunk.
constexpr int64_t kGlobalChunk = 1024;

// Channels-last: the double sums over `pixels` pixels of channels [0, nc) (of C per pixel) into
// sums[0, nc), in blocks of 16 channels whose sums stay in registers.
template <int kBlock>
[[gnu::always_inline]] inline void sum_pixels_block(const float* x, int64_t pixels, int64_t C, double* __restrict sums) {
  double acc[kBlock] = {};
  for (int64_t p = 0; p < pixels; ++p) {
    const float* __restrict xp = x + p * C;
    for (int c = 0; c < kBlock; ++c) acc[c] += static_cast<double>(xp[c]);
  }
  for (int c = 0; c < kBlock; ++c) sums[c] = acc[c];
}
[[gnu::always_inline]] inline void sum_pixels(const float* x, int64_t pixels, int64_t C, int64_t nc, double* sums) {
  int64_t c = 0;
  for (; c + 16 <= nc; c += 16) sum_pixels_block<16>(x + c, pixels, C, sums + c);
  for (; c + 4 <= nc; c += 4) sum_pixels_block<4>(x + c, pixels, C, sums + c);
  for (; c < nc; ++c) sum_pixels_block<1>(x + c, pixels, C, sums + c);
}
[[gnu::target("avx2,fma")]] void sum_pixels_avx2(const float* x, int64_t pixels, int64_t C, int64_t nc, double* sums) {
  sum_pixels(x, pixels, C, nc, sums);
}
void sum_pixels_base(const float* x, int64_t pixels, int64_t C, int64_t nc, double* sums) { sum_pixels(x, pixels, C, nc, sums); }
[[gnu::target(KILN_TARGET_AVX512)]] void sum_pixels_avx512(const float* x, int64_t pixels, int64_t C, int64_t nc, double* sums) {
  sum_pixels(x, pixels, C, nc, sums);
}

// Channels-last GlobalAveragePool of X [N, P pixels, C]: tasks of one chunk of pixels and up to 64
// channels write their sums to `partial` [N, chunks, C] (the kernel's workspace); then each channel
// adds its chunks' sums in order.
void global_mean_nhwc(int64_t N, int64_t P, int64_t C, const float* x, double* partial, float* y) {
  if (N * C == 0) return;
  if (P == 0) {  // an empty image: no pixels to average (the NCHW kernel's NaN)
    std::fill_n(y, N * C, std::numeric_limits<float>::quiet_NaN());
    return;
  }
  const int64_t chunks = (P + kGlobalChunk - 1) / kGlobalChunk, groups = (C + 63) / 64;
  const bool avx2 = has_avx2_fma(), avx512 = has_avx512();
  parallel_for(N * chunks * groups, std::max<int64_t>(1, 16384 / (std::min(P, kGlobalChunk) * std::min<int64_t>(C, 64))),
               [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / (chunks * groups), k = t / groups % chunks, c0 = t % groups * 64;
      const int64_t p0 = k * kGlobalChunk, np = std::min(kGlobalChunk, P - p0), nc = std::min<int64_t>(64, C - c0);
      const float* xp = x + (n * P + p0) * C + c0;
      double* sums = partial + (n * chunks + k) * C + c0;
      if (avx512) sum_pixels_avx512(xp, np, C, nc, sums);
      else if (avx2) sum_pixels_avx2(xp, np, C, nc, sums);
      else sum_pixels_base(xp, np, C, nc, sums);
    }
  });
  parallel_for(N * C, 4096, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / C, c = t % C;
      double acc = 0;
      for (int64_t k = 0; k < chunks; ++k) acc += partial[(n * chunks + k) * C + c];
      y[t] = static_cast<float>(acc / P);
    }
  });
}

// kiln.ChannelsLastPool (passes/channels_last.cpp) on float32 X [N, H, W, C]: the same windows and
// arithmetic as pool_planes_2d per channel, with the channels innermost (contiguous, vectorizable).
// A global max pool has one window covering H x W (a global average goes to global_mean_nhwc).
void pool_nhwc_2d(const PoolAttrs& a, const ops::WindowGeometry& g, bool global, const std::vector<Span>& rows,
                  const std::vector<Span>& cols, int64_t N, int64_t H, int64_t W, int64_t C, const float* x, float* y) {
  const int64_t OH = g.out[0], OW = g.out[1];
  const int64_t sh = g.strides[0], sw = g.strides[1], ph = g.pads[0], pw = g.pads[1], dh = g.dilations[0], dw = g.dilations[1];
  const bool is_max = a.kind == PoolKind::kMax;
  const bool avx2 = has_avx2_fma(), avx512 = has_avx512();
  parallel_for(N * OH * OW, std::max<int64_t>(1, 4096 / std::max<int64_t>(C * g.kernel[0] * g.kernel[1], 1)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t n = t / (OH * OW), oh = (t / OW) % OH, ow = t % OW;
      const int64_t rlo = rows[oh].lo, rhi = rows[oh].hi, rpad = rows[oh].padded;
      const int64_t clo = cols[ow].lo, chi = cols[ow].hi, cpad = cols[ow].padded;
      float* __restrict yp = y + t * C;
      if (rlo > rhi || clo > chi) {
        const float v = is_max ? -std::numeric_limits<float>::infinity()
                               : (a.count_include_pad && rpad * cpad ? 0.0f : std::numeric_limits<float>::quiet_NaN());
        for (int64_t c = 0; c < C; ++c) yp[c] = v;
        continue;
      }
      const int64_t h0 = oh * sh - ph, w0 = ow * sw - pw;
      auto at = [&](int64_t i, int64_t j) { return x + ((n * H + h0 + i * dh) * W + w0 + j * dw) * C; };
      const PoolWindow w{at(rlo, clo), rhi - rlo + 1, chi - clo + 1, dh * W * C, dw * C, C};
      if (is_max && !global) {
        if (avx512) max_window_avx512(w, yp);
        else if (avx2) max_window_avx2(w, yp);
        else max_window_base(w, yp);
      } else if (is_max) {
        // A global pool starts from -inf (global_pool_kernel's std::max), where a window starts from
        // its first element (max_window): a NaN there is skipped as that kernel skips it.
        for (int64_t c = 0; c < C; ++c) yp[c] = -std::numeric_limits<float>::infinity();
        for (int64_t i = rlo; i <= rhi; ++i)
          for (int64_t j = clo; j <= chi; ++j) {
            const float* __restrict xp = at(i, j);
            for (int64_t c = 0; c < C; ++c) yp[c] = xp[c] > yp[c] ? xp[c] : yp[c];
          }
      } else {
        const int64_t div = a.count_include_pad ? rpad * cpad : w.rows * w.cols;
        if (avx512) mean_window_avx512(w, div, yp);
        else if (avx2) mean_window_avx2(w, div, yp);
        else mean_window_base(w, div, yp);
      }
    }
  });
}

struct NhwcPoolState {
  ops::WindowGeometry g;
  bool global = false;
  std::vector<Span> rows, cols;
};

Status nhwc_pool_reshape(ReshapeContext& rc, const PoolAttrs& a, bool global) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
  const Shape& x = rc.in[0].shape;
  if (x.size() != 4) return rc.error("channels-last pooling takes X [N, H, W, C], got " + shape_to_string(x));
  if (rc.in[0].dtype != DataType::kFloat32) return rc.error("channels-last pooling takes float32");
  auto st = std::make_shared<NhwcPoolState>();
  st->global = global;
  if (global) {
    st->g.kernel = {x[1], x[2]};
    st->g.strides = {1, 1};
    st->g.dilations = {1, 1};
    st->g.pads = {0, 0, 0, 0};
    st->g.out = {1, 1};
  } else {
    if (a.w.kernel.size() != 2) return rc.error("channels-last pooling is 2-D");
    auto g = ops::window_geometry(a.w, {x[1], x[2]}, {});
    if (!g.ok()) return rc.error(g.status().message());
    st->g = *g;
  }
  rc.out[0] = {DataType::kFloat32, {x[0], st->g.out[0], st->g.out[1], x[3]}};
  if (global && a.kind == PoolKind::kAvg) {  // global_mean_nhwc's chunk sums
    const int64_t chunks = (x[1] * x[2] + kGlobalChunk - 1) / kGlobalChunk;
    rc.workspace_bytes = static_cast<size_t>(x[0] * chunks * x[3]) * sizeof(double);
  }
  const ops::WindowGeometry& g = st->g;
  st->rows = window_spans(g.out[0], x[1], g.strides[0], g.pads[0], g.pads[2], g.dilations[0], g.kernel[0]);
  st->cols = window_spans(g.out[1], x[2], g.strides[1], g.pads[1], g.pads[3], g.dilations[1], g.kernel[1]);
  rc.state = std::move(st);
  return Status::Ok();
}

Status nhwc_pool_kernel(KernelContext& ctx, const PoolAttrs& a) {
  const NhwcPoolState& st = shape_state<NhwcPoolState>(ctx);
  const Tensor& x = ctx.input(0);
  if (st.global && a.kind == PoolKind::kAvg) {
    global_mean_nhwc(x.dim(0), x.dim(1) * x.dim(2), x.dim(3), x.data<float>(), static_cast<double*>(ctx.workspace()),
                     ctx.output(0).data<float>());
    return Status::Ok();
  }
  pool_nhwc_2d(a, st.g, st.global, st.rows, st.cols, x.dim(0), x.dim(1), x.dim(2), x.dim(3), x.data<float>(), ctx.output(0).data<float>());
  return Status::Ok();
}

bool pool_dtype_ok(DataType dt, PoolKind k) {
  return is_real(dt) || (k == PoolKind::kMax && (dt == DataType::kInt8 || dt == DataType::kUInt8));
}

// Pooling's per-shape state: the window geometry over the spatial dims.
struct PoolState {
  std::vector<int64_t> in;
  ops::WindowGeometry g;
  std::vector<Span> rows, cols;  // 2-D: pool_planes_2d's window bounds
};

Status pool_reshape(ReshapeContext& rc, const PoolAttrs& a) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
  const Shape& x = rc.in[0].shape;
  if (x.size() < 3) return rc.error("X must have rank >= 3 ([N, C, spatial...]), got " + shape_to_string(x));
  if (!pool_dtype_ok(rc.in[0].dtype, a.kind)) return rc.error(std::string("unsupported dtype ") + dtype_name(rc.in[0].dtype));
  if (a.w.kernel.empty()) return rc.error("kernel_shape is required");
  auto st = std::make_shared<PoolState>();
  st->in.assign(x.begin() + 2, x.end());
  auto g = ops::window_geometry(a.w, st->in, {});
  if (!g.ok()) return rc.error(g.status().message());
  st->g = *g;
  if (st->in.size() == 2) {
    st->rows = window_spans(g->out[0], st->in[0], g->strides[0], g->pads[0], g->pads[2], g->dilations[0], g->kernel[0]);
    st->cols = window_spans(g->out[1], st->in[1], g->strides[1], g->pads[1], g->pads[3], g->dilations[1], g->kernel[1]);
  }
  Shape ys = {x[0], x[1]};
  ys.insert(ys.end(), g->out.begin(), g->out.end());
  rc.out[0] = {rc.in[0].dtype, ys};
  if (rc.out.size() > 1) rc.out[1] = {DataType::kInt64, ys};
  rc.state = std::move(st);
  return Status::Ok();
}

Status pool_kernel(KernelContext& ctx, const PoolAttrs& a) {
  const PoolState& st = shape_state<PoolState>(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  int64_t* idx = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : nullptr;
  const int64_t planes = x.dim(0) * x.dim(1);
  if (x.dtype() == DataType::kFloat32 && !idx && st.in.size() == 2 && a.kind != PoolKind::kLp) {
    pool_planes_2d(a, st.g, st.in, planes, st.rows, st.cols, x.data<float>(), y.data<float>());
    return Status::Ok();
  }
  if (x.dtype() == DataType::kFloat64) {
    pool_planes<double>(a, st.g, st.in, planes, x.data<double>(), y.data<double>(), idx);
  } else {
    ReadAs<float> xv(x);
    WriteAs<float> out(y);
    pool_planes<float>(a, st.g, st.in, planes, xv.data(), out.data(), idx);
    out.commit();
  }
  return Status::Ok();
}

Status global_pool_reshape(ReshapeContext& rc, const PoolAttrs&) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("X is required");
  const Shape& x = rc.in[0].shape;
  if (x.size() < 2) return rc.error("X must have rank >= 2");
  if (!is_real(rc.in[0].dtype)) return rc.error(std::string("unsupported dtype ") + dtype_name(rc.in[0].dtype));
  Shape ys = {x[0], x[1]};
  for (size_t i = 2; i < x.size(); ++i) ys.push_back(1);
  rc.out[0] = {rc.in[0].dtype, ys};
  return Status::Ok();
}

Status global_pool_kernel(KernelContext& ctx, const PoolAttrs& a) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  const int64_t planes = x.dim(0) * x.dim(1), isz = planes ? x.numel() / planes : 0;
  visit_real(x.dtype(), [&](auto tag) {
    using C = typename decltype(tag)::type;
    ReadAs<C> xv(x);
    WriteAs<C> out(y);
    parallel_for(planes, 16, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        const C* xp = xv.data() + p * isz;
        double acc = a.kind == PoolKind::kMax ? -std::numeric_limits<double>::infinity() : 0.0;
        if (a.kind == PoolKind::kAvg) {
          // In chunks, as global_mean_nhwc sums (the same bits on either layout).
          for (int64_t i0 = 0; i0 < isz; i0 += kGlobalChunk) {
            double chunk = 0;
            for (int64_t i = i0; i < std::min(isz, i0 + kGlobalChunk); ++i) chunk += static_cast<double>(xp[i]);
            acc += chunk;
          }
        } else {
          for (int64_t i = 0; i < isz; ++i) {
            const double v = xp[i];
            if (a.kind == PoolKind::kMax) acc = std::max(acc, v);
            else acc += std::pow(std::fabs(v), a.p);
          }
        }
        if (a.kind == PoolKind::kAvg) acc = isz ? acc / isz : std::numeric_limits<double>::quiet_NaN();
        if (a.kind == PoolKind::kLp) acc = std::pow(acc, 1.0 / a.p);
        out[p] = static_cast<C>(acc);
      }
    });
    out.commit();
  });
  return Status::Ok();
}

// MaxUnpool: scatters X into zeros at the flat positions given by I (MaxPool's Indices). The
// indices address the shape inferred from kernel_shape/strides/pads; an output_shape input only
// enlarges the output, the inferred block sitting at its origin (onnx's reference, whose data the
// conformance tests hold).
Status max_unpool_kernel(KernelContext& ctx, const PoolAttrs& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& ind = ctx.input(1);
  if (x.rank() < 3) return ctx.error("X must have rank >= 3");
  if (ind.shape() != x.shape()) return ctx.error("I must have the shape of X");
  if (!is_real(x.dtype())) return ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
  const size_t n = x.rank() - 2;
  if (a.w.kernel.size() != n) return ctx.error("kernel_shape must have one entry per spatial dim");
  // The node may come from an engine file, whose params nothing else held against X's rank: a short
  // strides or pads list was read past its end here (#49).
  if (!a.w.strides.empty() && a.w.strides.size() != n) return ctx.error("strides must have one entry per spatial dim");
  if (!a.w.pads.empty() && a.w.pads.size() != 2 * n) return ctx.error("pads must have two entries per spatial dim");
  Shape inferred = {x.dim(0), x.dim(1)};
  for (size_t d = 0; d < n; ++d) {
    const int64_t s = a.w.strides.empty() ? 1 : a.w.strides[d];
    const int64_t pb = a.w.pads.empty() ? 0 : a.w.pads[d], pe = a.w.pads.empty() ? 0 : a.w.pads[n + d];
    int64_t dim = 0;
    if (s < 1 || __builtin_mul_overflow(x.dim(static_cast<int>(d) + 2) - 1, s, &dim) ||
        __builtin_add_overflow(dim, a.w.kernel[d], &dim) || __builtin_sub_overflow(dim, pb, &dim) ||
        __builtin_sub_overflow(dim, pe, &dim) || dim < 0)
      return ctx.error("strides, kernel_shape and pads give spatial dim " + std::to_string(d) + " no valid size");
    inferred.push_back(dim);
  }
  Shape ys = inferred;
  if (ctx.has_input(2)) {
    const Tensor& os = ctx.input(2);
    ys.clear();
    for (int64_t i = 0; i < os.numel(); ++i) ys.push_back(load_as<int64_t>(os, i));
    if (static_cast<int>(ys.size()) != x.rank()) return ctx.error("output_shape must have the rank of X");
    for (int d = 0; d < x.rank(); ++d)
      if (ys[d] < inferred[d])
        return ctx.error("output_shape " + shape_to_string(ys) + " is smaller than the unpooled shape " +
                         shape_to_string(inferred));
  }
  Tensor& y = ctx.output(0, x.dtype(), ys);
  const size_t esz = dtype_size(x.dtype());
  std::memset(y.raw(), 0, y.numel() * esz);
  const int64_t total = shape_numel(inferred);
  const bool same = ys == inferred;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t j = load_as<int64_t>(ind, i);
    if (j < 0 || j >= total) return ctx.error("index " + std::to_string(j) + " is outside the output");
    int64_t at = j;
    if (!same) {  // j's coordinates in the inferred shape, placed in the larger output
      at = 0;
      int64_t rest = j, stride = 1;
      for (int d = x.rank() - 1; d >= 0; --d) {
        at += (rest % inferred[d]) * stride;
        rest /= inferred[d];
        stride *= ys[d];
      }
    }
    std::memcpy(static_cast<char*>(y.raw()) + at * esz, static_cast<const char*>(x.raw()) + i * esz, esz);
  }
  return Status::Ok();
}

PoolAttrs pool_attrs(const ops::PoolParams& p, PoolKind k) {
  PoolAttrs a;
  a.kind = k;
  a.w = p.window;
  a.count_include_pad = p.count_include_pad;
  a.column_major = p.column_major;
  a.p = p.p;
  return a;
}

template <PoolKind K, Status (*Fn)(KernelContext&, const PoolAttrs&)>
Expected<KernelPtr> make_pool(const ir::Node& n, KernelInit&) {
  PoolAttrs a = pool_attrs(ops::parse_pool(n), K);
  return make_kernel([a](KernelContext& ctx) { return Fn(ctx, a); });
}

template <PoolKind K, Status (*Reshape)(ReshapeContext&, const PoolAttrs&), Status (*Fn)(KernelContext&, const PoolAttrs&)>
Expected<KernelPtr> make_staged_pool(const ir::Node& n, KernelInit&) {
  PoolAttrs a = pool_attrs(ops::parse_pool(n), K);
  return make_staged([a](ReshapeContext& rc) { return Reshape(rc, a); }, [a](KernelContext& ctx) { return Fn(ctx, a); });
}


}  // namespace

void register_pool(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_real(n, 0); };
  r.add({"MaxPool", "", 1, 1 << 30, "cpu.MaxPool.any.generic",
         [](const ir::Node& n) {
           return require_dtypes(n, 0, {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16,
                                        DataType::kBFloat16, DataType::kInt8, DataType::kUInt8});
         },
         make_staged_pool<PoolKind::kMax, pool_reshape, pool_kernel>});
  r.add({"AveragePool", "", 1, 1 << 30, "cpu.AveragePool.any.generic", real, make_staged_pool<PoolKind::kAvg, pool_reshape, pool_kernel>});
  r.add({"LpPool", "", 1, 1 << 30, "cpu.LpPool.any.generic", real, make_staged_pool<PoolKind::kLp, pool_reshape, pool_kernel>});
  r.add({"GlobalMaxPool", "", 1, 1 << 30, "cpu.GlobalMaxPool.any", real, make_staged_pool<PoolKind::kMax, global_pool_reshape, global_pool_kernel>});
  r.add({"GlobalAveragePool", "", 1, 1 << 30, "cpu.GlobalAveragePool.any", real,
         make_staged_pool<PoolKind::kAvg, global_pool_reshape, global_pool_kernel>});
  r.add({"GlobalLpPool", "", 1, 1 << 30, "cpu.GlobalLpPool.any", real, make_staged_pool<PoolKind::kLp, global_pool_reshape, global_pool_kernel>});
  r.add({"MaxUnpool", "", 9, 1 << 30, "cpu.MaxUnpool.any", real, make_pool<PoolKind::kMax, max_unpool_kernel>});
  r.add({"ChannelsLastPool", "kiln", 1, 1 << 30, "cpu.ChannelsLastPool.f32",
         [](const ir::Node& n) -> std::string {
           if (!ops::parse_channels_last_pool(n).known)
             return "op must be MaxPool, AveragePool, GlobalMaxPool or GlobalAveragePool";
           return require_dtypes(n, 0, {DataType::kFloat32});
         },
         [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
           const ops::ChannelsLastPoolParams p = ops::parse_channels_last_pool(n);
           const bool global = p.global;
           PoolAttrs a = pool_attrs(p.pool, p.max ? PoolKind::kMax : PoolKind::kAvg);
           return make_staged([a, global](ReshapeContext& rc) { return nhwc_pool_reshape(rc, a, global); },
                              [a](KernelContext& ctx) { return nhwc_pool_kernel(ctx, a); });
         }});
}

}  // namespace kiln::cpu::nn
