// backends/cpu/nn_conv.cpp — Conv, ConvTranspose, ConvInteger, QLinearConv on the CPU:
// im2col (or the input itself for 1x1 windows) times the weights through gemm, col2im for the
// transposed convolution.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>
#include <type_traits>

#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "backends/cpu/conv_shapes.h"
#include "backends/cpu/dw_conv.h"
#include "backends/cpu/fused_common.h"
#include "backends/cpu/nn_common.h"
#include "backends/cpu/packed_conv.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_nn.h"
#include "util/log.h"

namespace kiln::cpu::nn {
namespace {

using ops::WindowGeometry;

int64_t prod(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// Decodes flat index `i` over the first `n` of `dims` into `coord` (row-major).
void unflatten(int64_t i, const std::vector<int64_t>& dims, size_t n, SmallDims<>& coord) {
  for (size_t d = n; d-- > 0;) {
    coord[d] = i % dims[d];
    i /= dims[d];
  }
}
void unflatten(int64_t i, const std::vector<int64_t>& dims, SmallDims<>& coord) { unflatten(i, dims, dims.size(), coord); }

// col[c * K + k][o] = x[c][o * stride - pad + k * dilation] (0 outside), for K window offsets and
// O output positions. x holds `channels` planes of `in` dims.
template <typename T>
void im2col(const T* x, int64_t channels, const std::vector<int64_t>& in, const WindowGeometry& g, T* col) {
  const size_t n = in.size();
  const int64_t ksz = prod(g.kernel), osz = prod(g.out), isz = prod(in);
  const int64_t OL = g.out[n - 1], IL = in[n - 1], SL = g.strides[n - 1], PL = g.pads[n - 1], DL = g.dilations[n - 1];
  const int64_t outer = OL ? osz / OL : 0;
  parallel_for(channels * ksz, std::max<int64_t>(1, 8192 / std::max<int64_t>(osz, 1)), [&](int64_t r0, int64_t r1) {
    SmallDims<> kk(n), oc(n);
    for (int64_t r = r0; r < r1; ++r) {
      const T* xc = x + (r / ksz) * isz;
      unflatten(r % ksz, g.kernel, kk);
      T* dst = col + r * osz;
      for (int64_t o = 0; o < outer; ++o, dst += OL) {
        unflatten(o, g.out, n - 1, oc);
        int64_t off = 0;
        bool valid = true;
        for (size_t d = 0; d + 1 < n; ++d) {
          const int64_t id = oc[d] * g.strides[d] - g.pads[d] + kk[d] * g.dilations[d];
          valid = valid && id >= 0 && id < in[d];
          off = off * in[d] + id;
        }
        if (!valid) {
          std::fill(dst, dst + OL, T(0));
          continue;
        }
        const T* base = xc + off * IL;
        const int64_t shift = kk[n - 1] * DL - PL;
        for (int64_t ol = 0; ol < OL; ++ol) {
          const int64_t il = ol * SL + shift;
          dst[ol] = il >= 0 && il < IL ? base[il] : T(0);
        }
      }
    }
  });
}

// y[m][i * stride - pad + k * dilation] += col[m * K + k][i], the adjoint of im2col.
template <typename T>
void col2im(const T* col, int64_t channels, const std::vector<int64_t>& in, const WindowGeometry& g, T* y) {
  const size_t n = in.size();
  const int64_t ksz = prod(g.kernel), osz = prod(g.out), isz = prod(in);
  parallel_for(channels, 1, [&](int64_t c0, int64_t c1) {
    SmallDims<> kk(n), ic(n);
    for (int64_t c = c0; c < c1; ++c) {
      T* yc = y + c * osz;
      for (int64_t k = 0; k < ksz; ++k) {
        unflatten(k, g.kernel, kk);
        const T* src = col + (c * ksz + k) * isz;
        for (int64_t i = 0; i < isz; ++i) {
          unflatten(i, in, ic);
          int64_t off = 0;
          bool valid = true;
          for (size_t d = 0; d < n && valid; ++d) {
            const int64_t od = ic[d] * g.strides[d] - g.pads[d] + kk[d] * g.dilations[d];
            valid = od >= 0 && od < g.out[d];
            off = off * g.out[d] + od;
          }
          if (valid) yc[off] += src[i];
        }
      }
    }
  });
}

// Column buffers conv_forward needs: `count` of `each` elements (none for pointwise windows).
// Depthwise 2-D convolution: one filter per channel (group == C == M), as MobileNet, EfficientNet
// and ConvNeXt use it. As one GEMM per (image, channel) it is a 1-row product over an im2col copy;
// here each tap instead adds w·(a row of x) into the output row, over the output columns where the
// tap lands inside x: short vectorizable row loops, no column buffer, the output row in L1.
bool is_depthwise(const ConvShapes& s) { return s.g.kernel.size() == 2 && s.group == s.C && s.M == s.C; }

struct DwGeom {
  int64_t IH, IW, OH, OW, KH, KW, SH, SW, DH, DW, PH, PW;
};

template <typename T>
[[gnu::always_inline]] inline void dw_plane(const DwGeom g, const T* xp, const T* wp, T b0, T* yp) {
  for (int64_t oh = 0; oh < g.OH; ++oh) {
    T* __restrict yr = yp + oh * g.OW;
    for (int64_t ow = 0; ow < g.OW; ++ow) yr[ow] = b0;
    for (int64_t kh = 0; kh < g.KH; ++kh) {
      const int64_t ih = oh * g.SH - g.PH + kh * g.DH;
      if (ih < 0 || ih >= g.IH) continue;
      const T* __restrict xr = xp + ih * g.IW;
      for (int64_t kw = 0; kw < g.KW; ++kw) {
        const T wv = wp[kh * g.KW + kw];
        const int64_t off = kw * g.DW - g.PW;  // input column of output column ow: ow·SW + off
        const int64_t lo = off >= 0 ? 0 : (-off + g.SW - 1) / g.SW;
        const int64_t hi = off >= g.IW ? 0 : std::min(g.OW, (g.IW - 1 - off) / g.SW + 1);
        if (g.SW == 1) {
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow + off];
        } else {
          for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * g.SW + off];
        }
      }
    }
  }
}

// The float plane compiled twice: for AVX2+FMA, chosen at run time where the CPU has them, and for
// the baseline x86-64 the library is built for.
[[gnu::target("avx2,fma")]] void dw_plane_avx2(const DwGeom& g, const float* x, const float* w, float b, float* y) {
  dw_plane<float>(g, x, w, b, y);
}
void dw_plane_base(const DwGeom& g, const float* x, const float* w, float b, float* y) { dw_plane<float>(g, x, w, b, y); }

template <typename T>
void depthwise2d(const ConvShapes& s, const T* x, const T* w, const T* bias, T* y) {
  const DwGeom g{s.in[0],        s.in[1],        s.g.out[0],       s.g.out[1],       s.g.kernel[0], s.g.kernel[1],
                 s.g.strides[0], s.g.strides[1], s.g.dilations[0], s.g.dilations[1], s.g.pads[0],   s.g.pads[1]};
  const bool avx2 = has_avx2_fma();
  parallel_for(s.N * s.C, 1, [&](int64_t b, int64_t e) {
    for (int64_t plane = b; plane < e; ++plane) {
      const int64_t c = plane % s.C;
      const T* xp = x + plane * g.IH * g.IW;
      const T* wp = w + c * g.KH * g.KW;
      T* yp = y + plane * g.OH * g.OW;
      const T b0 = bias ? bias[c] : T(0);
      if constexpr (std::is_same_v<T, float>) {
        if (avx2) dw_plane_avx2(g, xp, wp, b0, yp);
        else dw_plane_base(g, xp, wp, b0, yp);
      } else {
        dw_plane<T>(g, xp, wp, b0, yp);
      }
    }
  });
}

// How conv_forward splits its (image, group) jobs, and the column buffers that takes.
// The tactics (conv_tactics): "depthwise" / "im2col" for depthwise convolutions (the row-wise kernel
// or the generic im2col + GEMM per channel); "jobs-parallel" / "jobs-serial" for several (image,
// group) GEMMs (in parallel, one thread each, or one after another, each GEMM threaded). Without a
// tactic: the row-wise depthwise kernel, and jobs in parallel when grouped or small.
struct ColBuffers {
  bool parallel_jobs = false;  // jobs run in parallel (each GEMM is small); else one after another
  bool generic_depthwise = false;  // a depthwise convolution through im2col + GEMM ("im2col")
  int64_t count = 0, each = 0;
};
ColBuffers col_buffers(const ConvShapes& s, int max_threads, const std::string& tactic = {}) {
  const int64_t Cg = s.C / s.group, Mg = s.M / s.group, ksz = prod(s.g.kernel), osz = prod(s.g.out);
  const int64_t rows = Cg * ksz, jobs = s.N * s.group;
  ColBuffers cb;
  cb.generic_depthwise = is_depthwise(s) && tactic == "im2col";
  cb.parallel_jobs = s.group > 1 || Mg * osz * rows < (1 << 16);
  if (tactic == "jobs-parallel") cb.parallel_jobs = true;
  if (tactic == "jobs-serial") cb.parallel_jobs = false;
  if (is_pointwise(s.g) || (is_depthwise(s) && !cb.generic_depthwise) || jobs == 0) return cb;
  cb.count = cb.parallel_jobs ? std::max<int64_t>(1, std::min<int64_t>(jobs, max_threads)) : 1;
  cb.each = rows * osz;
  return cb;
}

// y[N, M, out] = conv(x[N, C, in], w[M, C/g, k]) (+ bias[M] when given). `cols` holds
// col_buffers(s).count buffers of .each elements.
template <typename T>
void conv_forward(const ConvShapes& s, const T* x, const T* w, const T* bias, T* y, T* cols, const ColBuffers& cb) {
  const int64_t Cg = s.C / s.group, Mg = s.M / s.group, ksz = prod(s.g.kernel), osz = prod(s.g.out), isz = prod(s.in);
  if (is_depthwise(s) && !cb.generic_depthwise) {
    depthwise2d<T>(s, x, w, bias, y);
    return;
  }
  const int64_t rows = Cg * ksz;
  const bool direct = is_pointwise(s.g);
  auto one = [&](int64_t n, int64_t grp, T* col) {
    const T* xg = x + (n * s.C + grp * Cg) * isz;
    const T* src = xg;
    if (!direct) {
      im2col<T>(xg, Cg, s.in, s.g, col);
      src = col;
    }
    T* yg = y + (n * s.M + grp * Mg) * osz;
    gemm<T>(false, false, Mg, osz, rows, T(1), w + grp * Mg * rows, rows, src, osz, T(0), yg, osz);
    if (rows == 0) std::fill(yg, yg + Mg * osz, T(0));
  };
  const int64_t jobs = s.N * s.group;
  if (cb.parallel_jobs) {
    // Job ranges, one column buffer each (never more ranges than buffers, whatever the threads).
    const int64_t parts = std::max<int64_t>(1, direct ? std::min<int64_t>(jobs, omp_get_max_threads()) : cb.count);
    parallel_for(parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t part = b; part < e; ++part) {
        T* col = direct ? nullptr : cols + part * cb.each;
        for (int64_t j = part * jobs / parts; j < (part + 1) * jobs / parts; ++j) one(j / s.group, j % s.group, col);
      }
    });
  } else {
    for (int64_t j = 0; j < jobs; ++j) one(j / s.group, j % s.group, cols);
  }
  if (bias) {
    parallel_for(s.N * s.M, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        T* p = y + i * osz;
        const T v = bias[i % s.M];
        for (int64_t o = 0; o < osz; ++o) p[o] += v;
      }
    });
  }
}

// conv_forward with column buffers of its own (quantized and legacy paths).
template <typename T>
void conv_forward_alloc(const ConvShapes& s, const T* x, const T* w, const T* bias, T* y) {
  const ColBuffers cb = col_buffers(s, omp_get_max_threads());
  std::vector<T> cols(static_cast<size_t>(cb.count * cb.each));
  conv_forward<T>(s, x, w, bias, y, cols.data(), cb);
}

struct ConvAttrs {
  ops::WindowAttrs w;
  int64_t group = 1;
  // channels_last (passes/channels_last.cpp, kiln.FusedConv of CPU engines): X [N,H,W,C],
  // W [M,kh,kw,C/group], Y [N,OH,OW,M]; run by oneDNN's primitive on the NHWC buffers themselves
  // (no reorder into a blocked layout and back around each layer) where oneDNN has a kernel for them.
  bool nhwc = false;
  // kiln.FusedConv: Y = act(conv(X, W) + B + Z), Z (input 3, optional) a residual of Y's shape. oneDNN
  // applies both as post-ops where it can (no pass over Y after the convolution); otherwise the
  // epilogue below does.
  bool fused = false;
  Activation act;
};

ConvAttrs conv_attrs(const ir::Node& n) {
  const ops::ConvParams p = ops::parse_conv(n);
  ConvAttrs a;
  a.w = p.window;
  a.group = p.group;
  a.nhwc = p.channels_last;
  return a;
}

Expected<ConvAttrs> fused_conv_attrs(const ir::Node& n) {
  ConvAttrs a = conv_attrs(n);
  a.fused = true;
  std::string why;
  if (!read_activation(n, &a.act, &why)) return invalid_model(n.describe() + ": " + why);
  return a;
}

// The oneDNN eltwise post-op computing `act` as kiln's epilogue does (same function; oneDNN's
// vectorized transcendental approximations are within float32 rounding of kiln's), or nothing.
// HardSigmoid has no oneDNN 2.x algorithm; a Clip with min > max is left to kiln's definition.
std::optional<std::tuple<dnnl::algorithm, float, float>> dnnl_eltwise(const Activation& act) {
  using alg = dnnl::algorithm;
  switch (act.kind) {
    case ActKind::kRelu: return std::make_tuple(alg::eltwise_relu, 0.0f, 0.0f);
    case ActKind::kLeakyRelu: return std::make_tuple(alg::eltwise_relu, act.a, 0.0f);
    case ActKind::kClip:
      if (!(act.a <= act.b)) return std::nullopt;
      return std::make_tuple(alg::eltwise_clip, act.a, act.b);
    case ActKind::kSigmoid: return std::make_tuple(alg::eltwise_logistic, 0.0f, 0.0f);
    case ActKind::kTanh: return std::make_tuple(alg::eltwise_tanh, 0.0f, 0.0f);
    case ActKind::kHardSwish: return std::make_tuple(alg::eltwise_hardswish, 0.0f, 0.0f);
    case ActKind::kSilu: return std::make_tuple(alg::eltwise_swish, 1.0f, 0.0f);
    case ActKind::kGelu: return std::make_tuple(alg::eltwise_gelu_erf, 0.0f, 0.0f);
    case ActKind::kGeluTanh: return std::make_tuple(alg::eltwise_gelu_tanh, 0.0f, 0.0f);
    case ActKind::kHardSigmoid:
    case ActKind::kNone: return std::nullopt;
  }
  return std::nullopt;
}

Shape nchw_of(const Shape& s) { return s.size() == 4 ? Shape{s[0], s[3], s[1], s[2]} : s; }

// Conv's per-shape state: geometry and column buffers (float32 columns live in the workspace).
// ---- The "onednn" tactic: oneDNN's convolution primitive (float32, 2-D, constant weights), in the
// blocked layouts it chooses: the input is reordered into the workspace, the weights once per shape
// signature (held by the state), the output reordered back to NCHW. Bias in the primitive.

// Everything a run needs, made at reshape: the run only points the memory objects at this run's
// buffers and executes through oneDNN's C API with argument lists built here (the C++ wrapper's
// execute() and memory constructors allocate). The state belongs to one context's shape plan, which
// one thread runs at a time, so the memory objects may be re-pointed in place.
struct DnnlConv {
  dnnl::convolution_forward conv;
  dnnl::memory::desc src_user_md, dst_user_md, src_md, dst_md, bias_md, scratch_md;
  dnnl::memory weights;            // reordered for the primitive
  dnnl::reorder src_in, dst_out;   // when the primitive's layouts differ from the tensors'
  bool reorder_src = false, reorder_dst = false, bias = false;
  bool post_act = false;  // the primitive applies the fused activation
  bool post_sum = false;  // the primitive adds the residual (Y holds Z when it starts)
  size_t src_off = 0, dst_off = 0, scratch_off = 0, workspace = 0;
  std::string impl;  // oneDNN's name for the kernel it chose ("jit:avx2", "gemm:jit", ...)
  dnnl::stream strm;
  dnnl::memory src_user, dst_user, src, dst, scratch, bias_mem;
  std::vector<dnnl_exec_arg_t> conv_args, src_args, dst_args;
};


// Whether the oneDNN tactic can take this convolution.
bool dnnl_eligible(const ReshapeContext& rc, const ConvShapes& s) {
  return rc.in[0].dtype == DataType::kFloat32 && rc.in[1].dtype == DataType::kFloat32 && s.g.kernel.size() == 2 &&
         rc.in[1].value != nullptr && s.N > 0 && s.M > 0 && s.g.out[0] > 0 && s.g.out[1] > 0 &&
         (rc.in.size() <= 2 || !rc.in[2].present || rc.in[2].dtype == DataType::kFloat32);
}

// `direct`: the primitive takes the tensors' own layout (NHWC) for X and Y rather than the layout it
// prefers; the caller retries without when that gives oneDNN's reference kernel. `residual`: the
// node adds Z; a sum post-op does so only with `direct` (Y's buffer must hold Z in the primitive's
// layout), and otherwise the activation is left to the epilogue too (it follows the sum).
// `winograd`: oneDNN's Winograd algorithm instead of the direct one (winograd_eligible's problems;
// the library refuses what it has no kernel for, and the caller falls back).
Expected<std::shared_ptr<DnnlConv>> make_dnnl_conv(const ReshapeContext& rc, const ConvShapes& s, bool nhwc,
                                                   const ConvAttrs& a, bool direct, bool residual,
                                                   bool winograd = false) {
  using dnnl::memory;
  using tag = memory::format_tag;
  const auto f32 = memory::data_type::f32;
  auto d = std::make_shared<DnnlConv>();
  try {
    const DnnlConvDims g = dnnl_conv_dims(s, nhwc);
    const memory::desc w_user(g.weights, f32, g.weights_tag);
    d->src_user_md = memory::desc(g.src, f32, g.data_tag);
    d->dst_user_md = memory::desc(g.dst, f32, g.data_tag);
    const tag data = direct ? g.data_tag : tag::any;
    const memory::desc src_any(g.src, f32, data), dst_any(g.dst, f32, data), w_any(g.weights, f32, tag::any);
    d->bias = rc.in.size() > 2 && rc.in[2].present;
    d->bias_md = memory::desc({s.M}, f32, tag::x);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    // act(conv + B + Z): the sum first, then the activation.
    dnnl::post_ops ops;
    d->post_sum = residual && direct;
    if (d->post_sum) ops.append_sum(1.0f);
    // The activation follows the residual. Sigmoid and SiLU are left to kiln's epilogue (sigmoid_simd.h),
    // which measured faster than oneDNN 2.6's logistic/swish post-ops even as a pass of its own
    // (EfficientNet-B0 at 1 thread on the AVX-512 development machine, same-process A/B: the fused
    // convolutions 10.3 -> 9.6-10.0 ms).
    const bool own_sigmoid = a.act.kind == ActKind::kSilu || a.act.kind == ActKind::kSigmoid;
    if (a.fused && (!residual || d->post_sum) && !own_sigmoid) {
      if (const auto e = dnnl_eltwise(a.act)) {
        ops.append_eltwise(1.0f, std::get<0>(*e), std::get<1>(*e), std::get<2>(*e));
        d->post_act = true;
      }
    }
    if (ops.len() > 0) attr.set_post_ops(ops);
    const auto algo = winograd ? dnnl::algorithm::convolution_winograd : dnnl::algorithm::convolution_direct;
    const auto desc = d->bias ? dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algo, src_any,
                                                                w_any, d->bias_md, dst_any, g.strides, g.dil, g.pad_l,
                                                                g.pad_r)
                              : dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, algo, src_any,
                                                                w_any, dst_any, g.strides, g.dil, g.pad_l, g.pad_r);
    const dnnl::convolution_forward::primitive_desc pd(desc, attr, dnnl_cpu());
    if ((direct || winograd) && std::string(pd.impl_info_str()).find("ref") != std::string::npos)
      return unsupported(rc.node.describe() + ": oneDNN has only its reference kernel for this " +
                         (winograd ? "algorithm" : "layout"));
    d->impl = pd.impl_info_str();
    if (log_enabled(LogLevel::kVerbose)) log(LogLevel::kVerbose, rc.node.describe() + ": oneDNN convolution " + d->impl);
    d->conv = dnnl::convolution_forward(pd);
    d->src_md = pd.src_desc();
    d->dst_md = pd.dst_desc();
    d->reorder_src = d->src_md != d->src_user_md;
    d->reorder_dst = d->dst_md != d->dst_user_md;
    if (d->reorder_src) d->src_in = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_cpu(), d->src_user_md, dnnl_cpu(), d->src_md));
    if (d->reorder_dst) d->dst_out = dnnl::reorder(dnnl::reorder::primitive_desc(dnnl_cpu(), d->dst_md, dnnl_cpu(), d->dst_user_md));
    d->scratch_md = pd.scratchpad_desc();
    size_t off = 0;
    if (d->reorder_src) {
      d->src_off = off;
      off += align64(d->src_md.get_size());
    }
    if (d->reorder_dst) {
      d->dst_off = off;
      off += align64(d->dst_md.get_size());
    }
    d->scratch_off = off;
    off += align64(d->scratch_md.get_size());
    d->workspace = off;
    // The weights, once, in the primitive's layout. oneDNN reorders into its Winograd layout only
    // from plain OIHW weights: channels-last ones (OHWI) go through an OIHW copy first.
    d->weights = memory(pd.weights_desc(), dnnl_cpu());
    memory w_src(w_user, dnnl_cpu(), const_cast<void*>(rc.in[1].value->raw()));
    d->strm = dnnl::stream(dnnl_cpu());
    if (winograd && g.weights_tag != tag::oihw) {
      memory w_plain(memory::desc(g.weights, f32, tag::oihw), dnnl_cpu());
      dnnl::reorder(w_src, w_plain).execute(d->strm, w_src, w_plain);
      dnnl::reorder(w_plain, d->weights).execute(d->strm, w_plain, d->weights);
    } else {
      dnnl::reorder(w_src, d->weights).execute(d->strm, w_src, d->weights);
    }
    d->strm.wait();
    // Memory objects for the run's buffers (pointed at them by each run), and the argument lists.
    d->src_user = memory(d->src_user_md, dnnl_cpu(), DNNL_MEMORY_NONE);
    d->dst_user = memory(d->dst_user_md, dnnl_cpu(), DNNL_MEMORY_NONE);
    d->src = d->reorder_src ? memory(d->src_md, dnnl_cpu(), DNNL_MEMORY_NONE) : d->src_user;
    d->dst = d->reorder_dst ? memory(d->dst_md, dnnl_cpu(), DNNL_MEMORY_NONE) : d->dst_user;
    d->scratch = memory(d->scratch_md, dnnl_cpu(), DNNL_MEMORY_NONE);
    d->conv_args = {{DNNL_ARG_SRC, d->src.get()}, {DNNL_ARG_WEIGHTS, d->weights.get()}, {DNNL_ARG_DST, d->dst.get()},
                    {DNNL_ARG_SCRATCHPAD, d->scratch.get()}};
    if (d->bias) {
      d->bias_mem = memory(d->bias_md, dnnl_cpu(), DNNL_MEMORY_NONE);
      d->conv_args.push_back({DNNL_ARG_BIAS, d->bias_mem.get()});
    }
    d->src_args = {{DNNL_ARG_FROM, d->src_user.get()}, {DNNL_ARG_TO, d->src.get()}};
    d->dst_args = {{DNNL_ARG_FROM, d->dst.get()}, {DNNL_ARG_TO, d->dst_user.get()}};
  } catch (const dnnl::error& e) {
    return unsupported(rc.node.describe() + ": oneDNN has no convolution for this (" + e.what() + ")");
  }
  return d;
}

Status run_dnnl_conv(const DnnlConv& d, const Tensor& x, const float* bias, const Tensor* z, Tensor& y, void* workspace) {
  char* ws = static_cast<char*>(workspace);
  if (d.post_sum && z->raw() != y.raw()) std::memcpy(y.raw(), z->raw(), y.nbytes());
  auto ok = [](dnnl_status_t st) { return st == dnnl_success; };
  bool good = ok(dnnl_memory_set_data_handle(d.src_user.get(), const_cast<void*>(x.raw()))) &&
              ok(dnnl_memory_set_data_handle(d.dst_user.get(), y.raw())) &&
              (!d.reorder_src || ok(dnnl_memory_set_data_handle(d.src.get(), ws + d.src_off))) &&
              (!d.reorder_dst || ok(dnnl_memory_set_data_handle(d.dst.get(), ws + d.dst_off))) &&
              ok(dnnl_memory_set_data_handle(d.scratch.get(), ws + d.scratch_off)) &&
              (!d.bias || ok(dnnl_memory_set_data_handle(d.bias_mem.get(), const_cast<float*>(bias))));
  auto exec = [&](const dnnl::primitive& p, const std::vector<dnnl_exec_arg_t>& args) {
    return ok(dnnl_primitive_execute(p.get(), d.strm.get(), static_cast<int>(args.size()), args.data()));
  };
  good = good && (!d.reorder_src || exec(d.src_in, d.src_args)) && exec(d.conv, d.conv_args) &&
         (!d.reorder_dst || exec(d.dst_out, d.dst_args)) && ok(dnnl_stream_wait(d.strm.get()));
  return good ? Status::Ok() : runtime_error("the oneDNN convolution failed");
}

// Whether a channels-last convolution runs on the NHWC tensors by default. Measured with oneDNN 2.6's
// AVX2 kernels at 1 thread (bench/results/cpu_tuning.md): pointwise and depthwise kernels run as fast
// on NHWC as on the blocked layout, so the two reorders are pure cost (MobileNetV2 12.1 -> 10.4 ms);
// dense KxK kernels take 1.5-1.8x as long on NHWC (ResNet-50's 3x3 layers), more than the reorders.
bool nhwc_direct_first(const ConvShapes& s) { return is_pointwise(s.g) || is_depthwise(s); }

// Whether oneDNN's Winograd algorithm may take this convolution: 3x3 windows at stride 1, no
// dilation, not grouped (oneDNN 2.6 has Winograd kernels for AVX-512 only; elsewhere the primitive
// is refused and the caller falls back to the direct algorithm).
bool winograd_eligible(const ConvShapes& s) {
  const auto& g = s.g;
  return g.kernel.size() == 2 && g.kernel[0] == 3 && g.kernel[1] == 3 && g.strides[0] == 1 && g.strides[1] == 1 &&
         g.dilations[0] == 1 && g.dilations[1] == 1 && s.group == 1;
}

// The untuned choice where oneDNN has it: F(2x2,3x3) / F(4x4,3x3) do 2.25-4x fewer multiplications,
// on weights transformed to 1.8-4x their size. Timed alone against the best direct tactic (blocked
// layout and reorders included) on 45 shapes, 1 and 2 threads, on the AVX-512 development machine
// (Zen 4) and the Sapphire Rapids host (bench/results/cpu_winograd.md): from 48 channels in and out
// it took 0.30-0.85x the time on both where the images were large enough; it lost with fewer channels
// (3-24: 1.2-7x; 32 at 56x56 on the host: 1.04-1.10x) and on 7x7 images at 2 threads (up to 2x).
// Inside a whole network at batch 1, where each layer's weights come from memory once per run, the
// larger weights cost more than the multiplications saved wherever the image is small: ResNet-50
// with every stride-1 3x3 layer as Winograd ran 2-5% slower on the host at 1 thread than without
// (layers at 14x14 and 7x7 gained 0-6% in per-node profiles, those at 56x56 and 28x28 23-30%). So
// it is the default from 48 channels and 784 output pixels per batch (28x28 at batch 1) up. Its
// error against a float64 reference is the direct kernel's (about 1e-6 of the outputs' range). The
// tuner times it against the direct kernels (add_winograd_tactic).
bool winograd_first(const ConvShapes& s) {
  return winograd_eligible(s) && s.C >= 48 && s.M >= 48 && s.N * prod(s.g.out) >= 784 &&
         onednn_winograd_available();
}

// A tuner candidate where this CPU has the kernels: first when it is the untuned choice.
void add_winograd_tactic(const ReshapeContext& rc, const ConvShapes& s, std::vector<std::string>& r) {
  if (winograd_eligible(s) && dnnl_eligible(rc, s) && onednn_winograd_available())
    r.insert(winograd_first(s) ? r.begin() : r.end(), "onednn-winograd");
}

struct ConvState {
  ConvShapes s;
  size_t pool_offset = 0;  // the pooled output's partial sums in the workspace (fused::apply_epilogue_and_pool)
  ColBuffers cb;
  std::shared_ptr<DnnlConv> dnnl;      // the "onednn" tactics
  std::shared_ptr<PackedConv> packed;  // the "packed-direct" tactic
  std::shared_ptr<DwConv> dw;          // the "dw-direct" tactic
};

// The packed and depthwise kernels' view of a channels-last 2-D convolution (their geometries name
// the same fields; the depthwise one has no M or group).
template <typename G>
G window_geometry_of(const ConvShapes& s) {
  G g;
  g.N = s.N, g.C = s.C, g.H = s.in[0], g.W = s.in[1];
  g.kh = s.g.kernel[0], g.kw = s.g.kernel[1];
  g.stride_h = s.g.strides[0], g.stride_w = s.g.strides[1];
  g.dil_h = s.g.dilations[0], g.dil_w = s.g.dilations[1];
  g.pad_top = s.g.pads[0], g.pad_left = s.g.pads[1];
  g.OH = s.g.out[0], g.OW = s.g.out[1];
  return g;
}
PackedConvGeometry packed_geometry(const ConvShapes& s) {
  PackedConvGeometry g = window_geometry_of<PackedConvGeometry>(s);
  g.group = s.group;
  g.M = s.M;
  return g;
}
DwConvGeometry dw_geometry(const ConvShapes& s) { return window_geometry_of<DwConvGeometry>(s); }

// Whether the "dw-direct" tactic takes this channels-last convolution: depthwise, float32, constant
// weights. A tactic the tuner times against oneDNN's; not the untuned choice, since oneDNN's NHWC
// depthwise kernel measured ~12% faster on the AVX-512 development machine (EfficientNet-B0's 16
// depthwise layers, 1 and 2 threads).
bool dw_eligible(const ReshapeContext& rc, const ConvShapes& s) {
  return is_depthwise(s) && dnnl_eligible(rc, s) && dw_conv_eligible(dw_geometry(s));
}

// Whether the "packed-direct" tactic takes this channels-last convolution (dnnl_eligible's float32
// and constant weights; not depthwise).
bool packed_eligible(const ReshapeContext& rc, const ConvShapes& s) {
  return !is_depthwise(s) && s.g.kernel.size() == 2 && dnnl_eligible(rc, s) && packed_conv_eligible(packed_geometry(s));
}

// The untuned choice for a dense channels-last convolution (not pointwise, not depthwise): kiln's
// packed direct kernel on CPUs where the packed GEMM is preferred (AVX2 without AVX-512), where
// oneDNN 2.6's AVX2 kernels in their blocked layout (with a reorder in and out) measured slower on
// ResNet-50's 3x3 layers (bench/results/cpu_packed_conv.md); oneDNN elsewhere.
// Not by patches (few channels, many taps): a 7x7 RGB stem took 1.3x ORT's time that way against
// oneDNN's 1.04x; those go to the packed kernel only where oneDNN would use its GEMM fallback (below).
bool packed_first(const ReshapeContext& rc, const ConvShapes& s) {
  return packed_gemm_preferred() && !nhwc_direct_first(s) && packed_eligible(rc, s) &&
         !packed_conv_by_patches(packed_geometry(s));
}

Status conv_reshape_body(ReshapeContext& rc, const ConvAttrs& a);
std::vector<std::string> conv_tactics(const ReshapeContext& rc, const ConvAttrs& a);

// The tactic the kernel's own GEMM path runs (conv_tactics' names; col_buffers decided it).
const char* own_gemm_tactic(const ConvShapes& s, const ColBuffers& cb) {
  if (is_depthwise(s)) return cb.generic_depthwise ? "im2col" : "depthwise";
  if (s.N * s.group > 1) return cb.parallel_jobs ? "jobs-parallel" : "jobs-serial";
  return "im2col";
}

// Every output of the step is empty (Y, and FusedConv's pooled output when it has one).
bool nothing_to_compute(const std::vector<std::pair<DataType, Shape>>& outs) {
  for (const auto& o : outs)
    if (shape_numel(o.second) != 0) return false;
  return true;
}

// The pooled output's partial sums go after what the convolution's own workspace needs.
Status conv_reshape(ReshapeContext& rc, const ConvAttrs& a) {
  own_choice_unless_offered(rc, conv_tactics(rc, a));
  KILN_RETURN_IF_ERROR(conv_reshape_body(rc, a));
  if (rc.out.size() > 1 && rc.state) {
    auto* st = static_cast<ConvState*>(rc.state.get());
    const int64_t pixels = prod(st->s.g.out);
    st->pool_offset = align64(rc.workspace_bytes);
    rc.workspace_bytes = st->pool_offset + static_cast<size_t>(fused::pool_chunks(pixels, st->s.M) * st->s.M) * sizeof(float);
  }
  return Status::Ok();
}

Status conv_reshape_body(ReshapeContext& rc, const ConvAttrs& a) {
  if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("X and W are required");
  auto st = std::make_shared<ConvState>();
  if (a.nhwc && (rc.in[0].shape.size() != 4 || rc.in[1].shape.size() != 4))
    return rc.error("channels_last convolutions are 2-D (4-D X and W)");
  KILN_RETURN_IF_ERROR(conv_shapes(rc, a.w, a.group, a.nhwc ? nchw_of(rc.in[0].shape) : rc.in[0].shape,
                                   a.nhwc ? nchw_of(rc.in[1].shape) : rc.in[1].shape, st->s));
  if (rc.in.size() > 2 && rc.in[2].present && shape_numel(rc.in[2].shape) != st->s.M)
    return rc.error("B must have M = " + std::to_string(st->s.M) + " entries");
  rc.out[0] = {rc.in[0].dtype, a.nhwc ? Shape{st->s.y[0], st->s.y[2], st->s.y[3], st->s.y[1]} : st->s.y};
  // The pooled output (passes/conv_pool.cpp): channels-last float32 convolutions only.
  if (rc.out.size() > 1) {
    if (!a.nhwc || !a.fused || rc.in[0].dtype != DataType::kFloat32)
      return rc.error("a pooled output needs a float32 channels_last FusedConv");
    rc.out[1] = {DataType::kFloat32, Shape{st->s.N, 1, 1, st->s.M}};
  }
  const bool residual = a.fused && rc.in.size() > 3 && rc.in[3].present;
  if (residual && (rc.in[3].shape != rc.out[0].second || rc.in[3].dtype != DataType::kFloat32))
    return rc.error("the residual must be float32 of the output's shape " + shape_to_string(rc.out[0].second));
  // Empty outputs (a batch of 0, as onnxruntime runs it): nothing to compute, so no primitive or
  // packing is made (the channels-last ones refuse an empty problem) and conv_kernel returns at once.
  if (nothing_to_compute(rc.out)) {
    rc.state = std::move(st);
    return Status::Ok();
  }
  if (a.nhwc) {
    // Channels-last runs as kiln's packed direct kernel ("packed-direct", dense windows with 8 or
    // more channels) or as oneDNN's primitive (the pass converts only what oneDNN takes), on the
    // NHWC tensors themselves ("onednn-direct") or through oneDNN's blocked layout with a reorder in
    // and out ("onednn-blocked"); the tuner times them (conv_tactics), and the untuned choice is
    // packed_first's, then nhwc_direct_first's. A direct primitive that would be oneDNN's reference
    // kernel falls back.
    if (!dnnl_eligible(rc, st->s)) return rc.error("channels_last convolutions need float32 and constant weights");
    const bool untuned = rc.tactic.empty() || rc.tactic == "default";
    auto use_packed = [&]() -> Status {
      KILN_ASSIGN_OR_RETURN(st->packed, pack_conv(packed_geometry(st->s), static_cast<const float*>(rc.in[1].value->raw())));
      rc.state = std::move(st);
      rc.planned_tactic = "packed-direct";
      return Status::Ok();
    };
    if (rc.tactic == "dw-direct") {
      if (!dw_eligible(rc, st->s)) return rc.error("the dw-direct tactic does not take this convolution");
      KILN_ASSIGN_OR_RETURN(st->dw, pack_dw_conv(dw_geometry(st->s), static_cast<const float*>(rc.in[1].value->raw())));
      rc.state = std::move(st);
      rc.planned_tactic = "dw-direct";
      return Status::Ok();
    }
    // Untuned, oneDNN's Winograd kernels (where they exist) come before the packed direct kernel.
    const bool winograd = untuned ? winograd_first(st->s) : rc.tactic == "onednn-winograd";
    if (rc.tactic == "packed-direct" || (untuned && !winograd && packed_first(rc, st->s))) {
      if (!packed_eligible(rc, st->s)) return rc.error("the packed-direct tactic does not take this convolution");
      return use_packed();
    }
    Expected<std::shared_ptr<DnnlConv>> d = unsupported("no oneDNN convolution tried");
    const char* planned = "onednn-winograd";
    if (winograd) {
      if (!winograd_eligible(st->s)) return rc.error("the onednn-winograd tactic does not take this convolution");
      d = make_dnnl_conv(rc, st->s, true, a, false, residual, true);
      if (!d.ok() && !untuned) return d.status();
      if (!d.ok() && packed_first(rc, st->s)) return use_packed();
    }
    if (!d.ok()) {
      const bool direct = rc.tactic == "onednn-direct" || (rc.tactic != "onednn-blocked" && nhwc_direct_first(st->s));
      d = make_dnnl_conv(rc, st->s, true, a, direct, residual);
      planned = direct ? "onednn-direct" : "onednn-blocked";
      if (!d.ok() && direct) {
        d = make_dnnl_conv(rc, st->s, true, a, false, residual);
        planned = "onednn-blocked";
      }
    }
    KILN_RETURN_IF_ERROR(d.status());
    // Untuned, where oneDNN has no direct kernel for the problem and falls back to im2col + GEMM in
    // channels-first copies, the packed kernel takes it: grouped convolutions of 4 outputs a group
    // (with oneDNN 2.6 on AVX2: 3.5x the packed kernel's time on ResNeXt-50's first stage), AlexNet's
    // 11x11 stride-4 stem on 3 channels (by patches: 5.4 -> 2.0-2.5 ms, ORT 1.7-2.2).
    if (untuned && (*d)->impl.find("gemm") != std::string::npos && packed_eligible(rc, st->s)) return use_packed();
    st->dnnl = std::move(d).value();
    rc.workspace_bytes = st->dnnl->workspace;
    // oneDNN's sum post-op adds what Y holds: Y in the residual's own memory saves copying it there.
    if (st->dnnl->post_sum) rc.share_input = 3;
    rc.state = std::move(st);
    rc.planned_tactic = planned;
    return Status::Ok();
  }
  // The output's size is checked before any library sees the problem: oneDNN sizes its buffers from
  // the geometry (a damaged file's pads made it reserve tens of GB while choosing an implementation).
  if (const std::string why = check_tensor_size(rc.in[0].dtype, st->s.y); !why.empty()) return rc.error(why);
  // oneDNN's primitive when the tuner chose it, and by default for windows larger than 1x1 (what the
  // tuner picked on nearly all of them: bench/results/cpu_tuning.md); the kernel's own
  // GEMM for 1x1 windows (no im2col there) and when oneDNN has no primitive for the problem.
  const bool own_choice = rc.tactic.empty() || rc.tactic == "default";
  if (rc.tactic == "onednn-winograd" && !(winograd_eligible(st->s) && dnnl_eligible(rc, st->s)))
    return rc.error("the onednn-winograd tactic does not take this convolution");
  if ((rc.tactic == "onednn" || rc.tactic == "onednn-winograd" || (own_choice && !is_pointwise(st->s.g))) &&
      dnnl_eligible(rc, st->s)) {
    const bool winograd = rc.tactic == "onednn-winograd" || (own_choice && winograd_first(st->s));
    auto d = make_dnnl_conv(rc, st->s, false, a, false, residual, winograd);
    bool winograd_made = winograd;
    if (!d.ok() && winograd && own_choice) {
      d = make_dnnl_conv(rc, st->s, false, a, false, residual);
      winograd_made = false;
    }
    if (d.ok()) {
      st->dnnl = std::move(d).value();
      rc.workspace_bytes = st->dnnl->workspace;
      rc.state = std::move(st);
      rc.planned_tactic = winograd_made ? "onednn-winograd" : "onednn";
      return Status::Ok();
    }
    if (!own_choice) return d.status();
  }
  if (rc.in[0].dtype == DataType::kFloat32) {
    st->cb = col_buffers(st->s, omp_get_max_threads(), rc.tactic);
    rc.workspace_bytes = static_cast<size_t>(st->cb.count * st->cb.each) * sizeof(float);
    rc.planned_tactic = own_gemm_tactic(st->s, st->cb);
  }
  rc.state = std::move(st);
  return Status::Ok();
}

std::vector<std::string> conv_tactics(const ReshapeContext& rc, const ConvAttrs& a) {
  if (a.nhwc && rc.in.size() >= 2 && rc.in[0].present && rc.in[1].present && rc.in[0].shape.size() == 4 &&
      rc.in[1].shape.size() == 4) {
    ConvShapes s;
    if (!conv_shapes(rc, a.w, a.group, nchw_of(rc.in[0].shape), nchw_of(rc.in[1].shape), s).ok()) return {};
    std::vector<std::string> r = nhwc_direct_first(s) ? std::vector<std::string>{"onednn-direct", "onednn-blocked"}
                                                      : std::vector<std::string>{"onednn-blocked", "onednn-direct"};
    if (packed_eligible(rc, s)) r.insert(packed_first(rc, s) ? r.begin() : r.end(), "packed-direct");
    if (dw_eligible(rc, s)) r.push_back("dw-direct");
    add_winograd_tactic(rc, s, r);
    return r;
  }
  if (a.nhwc || rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present || rc.in[0].dtype != DataType::kFloat32) return {};
  ConvShapes s;
  if (!conv_shapes(rc, a.w, a.group, rc.in[0].shape, rc.in[1].shape, s).ok()) return {};
  std::vector<std::string> r;
  if (is_depthwise(s)) r = {"depthwise", "im2col"};
  else if (s.N * s.group > 1) r = {"jobs-parallel", "jobs-serial"};
  else r = {"im2col"};  // the kernel's own GEMM, as a candidate next to oneDNN's
  // The kernel's own choice first: oneDNN for windows larger than 1x1 (see conv_reshape).
  if (dnnl_eligible(rc, s)) r.insert(is_pointwise(s.g) ? r.end() : r.begin(), "onednn");
  add_winograd_tactic(rc, s, r);
  if (r.size() < 2) r.clear();
  return r;
}

// FusedConv's output 1 when the node has it (passes/conv_pool.cpp), else null.
float* pooled_output(KernelContext& ctx) {
  return ctx.num_outputs() > 1 && ctx.has_output(1) ? ctx.output(1).data<float>() : nullptr;
}

// The pooled output of channels-last Y [N, OH, OW, M] after `act` (applied to Y in the same pass).
void act_and_pool(KernelContext& ctx, const ConvState& st, Tensor& y, const Activation& act, float* pooled) {
  float* partial = reinterpret_cast<float*>(static_cast<char*>(ctx.workspace()) + st.pool_offset);
  fused::apply_epilogue_and_pool(y.data<float>(), st.s.N, prod(st.s.g.out), st.s.M, act, pooled, partial);
}

// FusedConv's epilogue where oneDNN did not apply it: y += Z, then y = act(y), and the pooled output
// in the activation's pass.
void fused_conv_epilogue(KernelContext& ctx, const ConvAttrs& a, const ConvState& st, const DnnlConv* d, Tensor& y) {
  if (!a.fused) return;
  if (ctx.num_inputs() > 3 && ctx.has_input(3) && !(d && d->post_sum)) {
    const float* pz = ctx.input(3).data<float>();
    float* py = y.data<float>();
    parallel_for(y.numel(), 1 << 14, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) py[i] += pz[i];
    });
  }
  const Activation act = d && d->post_act ? Activation{} : a.act;
  if (float* pooled = pooled_output(ctx)) act_and_pool(ctx, st, y, act, pooled);
  else fused::apply_epilogue(y.data<float>(), y.numel(), 1, nullptr, act);
}

Status conv_kernel(KernelContext& ctx, const ConvAttrs& a) {
  const ConvState& st = shape_state<ConvState>(ctx);
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  Tensor& y = ctx.output(0);
  if (y.numel() == 0 && (ctx.num_outputs() < 2 || !ctx.has_output(1) || ctx.output(1).numel() == 0))
    return Status::Ok();  // an empty output (conv_reshape made no primitive for it)
  if (st.packed) {
    const Tensor* z = a.fused && ctx.num_inputs() > 3 && ctx.has_input(3) ? &ctx.input(3) : nullptr;
    if (z && z->raw() == y.raw()) return ctx.error("the residual must not share the output's buffer");
    packed_conv(*st.packed, x.data<float>(), ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                z ? z->data<float>() : nullptr, a.fused ? a.act : Activation{}, y.data<float>());
    if (float* pooled = pooled_output(ctx)) act_and_pool(ctx, st, y, Activation{}, pooled);
    return Status::Ok();
  }
  if (st.dw) {
    const Tensor* z = a.fused && ctx.num_inputs() > 3 && ctx.has_input(3) ? &ctx.input(3) : nullptr;
    if (z && z->raw() == y.raw()) return ctx.error("the residual must not share the output's buffer");
    dw_conv(*st.dw, x.data<float>(), ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr, z ? z->data<float>() : nullptr,
            a.fused ? a.act : Activation{}, y.data<float>());
    if (float* pooled = pooled_output(ctx)) act_and_pool(ctx, st, y, Activation{}, pooled);
    return Status::Ok();
  }
  if (st.dnnl) {
    const Tensor* z = ctx.num_inputs() > 3 && ctx.has_input(3) ? &ctx.input(3) : nullptr;
    Status r = run_dnnl_conv(*st.dnnl, x, ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr, z, y, ctx.workspace());
    if (!r.ok()) return ctx.error(r.message());
    fused_conv_epilogue(ctx, a, st, st.dnnl.get(), y);
    return Status::Ok();
  }
  if (x.dtype() == DataType::kFloat32 && w.dtype() == DataType::kFloat32 &&
      (!ctx.has_input(2) || ctx.input(2).dtype() == DataType::kFloat32)) {
    conv_forward<float>(st.s, x.data<float>(), w.data<float>(), ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr,
                        y.data<float>(), static_cast<float*>(ctx.workspace()), st.cb);
    fused_conv_epilogue(ctx, a, st, nullptr, y);
    return Status::Ok();
  }
  if (a.fused) return ctx.error("float32 only");
  visit_real(x.dtype(), [&](auto tag) {
    using C = typename decltype(tag)::type;
    ReadAs<C> xv(x), wv(w);
    std::unique_ptr<ReadAs<C>> bv;
    if (ctx.has_input(2)) bv = std::make_unique<ReadAs<C>>(ctx.input(2));
    WriteAs<C> out(y);
    conv_forward_alloc<C>(st.s, xv.data(), wv.data(), bv ? bv->data() : nullptr, out.data());
    out.commit();
  });
  return Status::Ok();
}

// ---- Quantized convolutions: int32 accumulation of (x - x_zp) * (w - w_zp[m]).

Status integer_conv(KernelContext& ctx, const ConvAttrs& a, int ix, int ixz, int iw, int iwz, ConvShapes& s,
                    std::vector<int32_t>& acc) {
  const Tensor& x = ctx.input(ix);
  const Tensor& w = ctx.input(iw);
  for (const Tensor* t : {&x, &w})
    if (t->dtype() != DataType::kInt8 && t->dtype() != DataType::kUInt8) return ctx.error("x and w must be int8 or uint8");
  // A zero point has its tensor's type (the spec's T1/T2): one of another type (a wider integer)
  // would take x - x_zp and w - w_zp past the 8-bit range the int32 sums are sized for.
  for (const auto& [iz, t, name] : {std::tuple{ixz, &x, "x_zero_point"}, std::tuple{iwz, &w, "w_zero_point"}})
    if (ctx.has_input(iz) && ctx.input(iz).dtype() != t->dtype())
      return ctx.error(std::string(name) + " must have the type of its tensor (" + dtype_name(t->dtype()) + "), not " +
                       dtype_name(ctx.input(iz).dtype()));
  KILN_RETURN_IF_ERROR(conv_shapes(ctx, a.w, a.group, x.shape(), w.shape(), s));
  const int32_t xz = ctx.has_input(ixz) && ctx.input(ixz).numel() ? load_as<int32_t>(ctx.input(ixz), 0) : 0;
  const Tensor* wz = ctx.has_input(iwz) && ctx.input(iwz).numel() ? &ctx.input(iwz) : nullptr;
  if (wz && wz->numel() != 1 && wz->numel() != s.M) return ctx.error("w_zero_point must be a scalar or have M entries");
  std::vector<int32_t> xv(static_cast<size_t>(x.numel())), wv(static_cast<size_t>(w.numel()));
  for (int64_t i = 0; i < x.numel(); ++i) xv[i] = load_as<int32_t>(x, i) - xz;
  const int64_t per_m = s.M ? w.numel() / s.M : 0;
  for (int64_t i = 0; i < w.numel(); ++i)
    wv[i] = load_as<int32_t>(w, i) - (wz ? load_as<int32_t>(*wz, wz->numel() == 1 ? 0 : i / per_m) : 0);
  acc.resize(static_cast<size_t>(shape_numel(s.y)));
  conv_forward_alloc<int32_t>(s, xv.data(), wv.data(), nullptr, acc.data());
  return Status::Ok();
}

Status conv_integer_kernel(KernelContext& ctx, const ConvAttrs& a) {
  ConvShapes s;
  std::vector<int32_t> acc;
  KILN_RETURN_IF_ERROR(integer_conv(ctx, a, 0, 2, 1, 3, s, acc));
  Tensor& y = ctx.output(0, DataType::kInt32, s.y);
  if (!acc.empty()) std::memcpy(y.raw(), acc.data(), acc.size() * sizeof(int32_t));
  return Status::Ok();
}

Status qlinear_conv_kernel(KernelContext& ctx, const ConvAttrs& a) {
  for (int i : {1, 2, 4, 5, 6, 7})
    if (!ctx.has_input(i)) return ctx.error("scales and zero points are required");
  ConvShapes s;
  std::vector<int32_t> acc;
  KILN_RETURN_IF_ERROR(integer_conv(ctx, a, 0, 2, 3, 5, s, acc));
  const Tensor& ws = ctx.input(4);
  if (ws.numel() != 1 && ws.numel() != s.M) return ctx.error("w_scale must be a scalar or have M entries");
  const Tensor* bias = ctx.has_input(8) ? &ctx.input(8) : nullptr;
  if (bias && bias->numel() != s.M) return ctx.error("B must have M entries");
  // B is int32 (onnx's type constraint): read as int32 from another type, a float of 3.4e38 was undefined.
  if (bias && bias->dtype() != DataType::kInt32) return ctx.error("B must be int32");
  const Tensor& yz = ctx.input(7);
  Tensor& y = ctx.output(0, yz.dtype(), s.y);
  const float xs = load_as<float>(ctx.input(1), 0), ys = load_as<float>(ctx.input(6), 0);
  const int32_t zp = load_as<int32_t>(yz, 0);
  const int64_t osz = prod(s.g.out);
  const double lo = yz.dtype() == DataType::kUInt8 ? 0 : -128, hi = yz.dtype() == DataType::kUInt8 ? 255 : 127;
  for (int64_t i = 0; i < static_cast<int64_t>(acc.size()); ++i) {
    const int64_t m = (i / osz) % s.M;
    const int64_t v = int64_t{acc[i]} + (bias ? bias->data<int32_t>()[m] : 0);  // two int32s may overflow int32
    const float scale = xs * load_as<float>(ws, ws.numel() == 1 ? 0 : m) / ys;
    const double q = std::min(hi, std::max(lo, std::nearbyint(static_cast<double>(v) * scale) + zp));
    if (yz.dtype() == DataType::kUInt8) y.data<uint8_t>()[i] = static_cast<uint8_t>(q);
    else y.data<int8_t>()[i] = static_cast<int8_t>(q);
  }
  return Status::Ok();
}

// ---- ConvTranspose: X [N, C, in...], W [C, M/group, k...] → Y [N, M, out...].

Status conv_transpose_kernel(KernelContext& ctx, const ConvAttrs& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& w = ctx.input(1);
  const Shape& xs = x.shape();
  const Shape& wsh = w.shape();
  if (xs.size() < 3 || wsh.size() != xs.size()) return ctx.error("X and W must have the same rank >= 3");
  const int64_t group = a.group, N = xs[0], C = xs[1];
  if (group < 1 || wsh[0] != C || C % group != 0)
    return ctx.error("channels do not match: X " + shape_to_string(xs) + ", W " + shape_to_string(wsh));
  const int64_t M = wsh[1] * group, Cg = C / group, Mg = wsh[1];
  const std::vector<int64_t> in(xs.begin() + 2, xs.end());
  auto g = ops::transpose_geometry(a.w, in, std::vector<int64_t>(wsh.begin() + 2, wsh.end()));
  if (!g.ok()) return ctx.error(g.status().message());
  if (ctx.has_input(2) && ctx.input(2).numel() != M) return ctx.error("B must have M = " + std::to_string(M) + " entries");
  Shape ys = {N, M};
  ys.insert(ys.end(), g->out.begin(), g->out.end());
  Tensor& y = ctx.output(0, x.dtype(), ys);
  const int64_t ksz = prod(g->kernel), isz = prod(in), osz = prod(g->out);
  visit_real(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    ReadAs<T> xv(x), wv(w);
    WriteAs<T> out(y);
    T* yp = out.data();
    std::fill(yp, yp + N * M * osz, T(0));
    std::vector<T> col(static_cast<size_t>(Mg * ksz * isz));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t grp = 0; grp < group; ++grp) {
        gemm<T>(true, false, Mg * ksz, isz, Cg, T(1), wv.data() + grp * Cg * Mg * ksz, Mg * ksz,
                xv.data() + (n * C + grp * Cg) * isz, isz, T(0), col.data(), isz);
        if (Cg == 0) std::fill(col.begin(), col.end(), T(0));
        col2im<T>(col.data(), Mg, in, *g, yp + (n * M + grp * Mg) * osz);
      }
    if (ctx.has_input(2)) {
      ReadAs<T> bv(ctx.input(2));
      for (int64_t i = 0; i < N * M; ++i)
        for (int64_t o = 0; o < osz; ++o) yp[i * osz + o] += bv[i % M];
    }
    out.commit();
  });
  return Status::Ok();
}

template <Status (*Fn)(KernelContext&, const ConvAttrs&)>
Expected<KernelPtr> make_conv(const ir::Node& n, KernelInit&) {
  ConvAttrs a = conv_attrs(n);
  return make_kernel([a](KernelContext& ctx) { return Fn(ctx, a); });
}

Expected<KernelPtr> make_staged_conv(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ConvAttrs a,
                        n.op_type == "FusedConv" ? fused_conv_attrs(n) : Expected<ConvAttrs>(conv_attrs(n)));
  return make_staged([a](ReshapeContext& rc) { return conv_reshape(rc, a); },
                     [a](KernelContext& ctx) { return conv_kernel(ctx, a); },
                     [a](const ReshapeContext& rc) { return conv_tactics(rc, a); });
}

}  // namespace

void im2col_f32(const float* x, int64_t channels, const std::vector<int64_t>& in, const WindowGeometry& g, float* col) {
  im2col<float>(x, channels, in, g, col);
}

void register_conv(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_real(n, 0); };
  r.add({"Conv", "", 1, 1 << 30, "cpu.Conv.any.im2col_sgemm", real, make_staged_conv});
  // kiln.FusedConv (passes/fuse_activation.cpp): the same kernel with its epilogue; float32 only.
  r.add({"FusedConv", "kiln", 1, 1 << 30, "cpu.FusedConv.f32", fused::check_f32, make_staged_conv});
  r.add({"ConvTranspose", "", 1, 1 << 30, "cpu.ConvTranspose.any.sgemm_col2im", real, make_conv<conv_transpose_kernel>});
  r.add({"ConvInteger", "", 10, 1 << 30, "cpu.ConvInteger.i8.im2col", nullptr, make_conv<conv_integer_kernel>});
  r.add({"QLinearConv", "", 10, 1 << 30, "cpu.QLinearConv.i8.im2col", nullptr, make_conv<qlinear_conv_kernel>});
}

}  // namespace kiln::cpu::nn

namespace kiln::cpu {

// Whether this CPU has oneDNN Winograd kernels at all (asked once, on a small problem), so that the
// tuner does not time a tactic that cannot exist here.
bool onednn_winograd_available() {
  static const bool available = [] {
    using dnnl::memory;
    const auto f32 = memory::data_type::f32;
    const auto any = memory::format_tag::any;
    try {
      const memory::desc src({1, 16, 8, 8}, f32, any), w({16, 16, 3, 3}, f32, any), dst({1, 16, 8, 8}, f32, any);
      const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                                 dnnl::algorithm::convolution_winograd, src, w, dst, {1, 1}, {1, 1},
                                                 {1, 1});
      const dnnl::convolution_forward::primitive_desc pd(desc, nn::dnnl_cpu());
      return std::string(pd.impl_info_str()).find("ref") == std::string::npos;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace kiln::cpu
