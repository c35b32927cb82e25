// backends/cpu/conv_shapes.h — the geometry of a CPU convolution (X [N, C, in...] against
// W [M, C/group, k...]) and the process's oneDNN CPU engine, shared by the float convolutions
// (nn_conv.cpp) and the quantized ones (nn_qconv.cpp).
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include <cstdlib>
#include <string>
#include <vector>

#include "ops/nn.h"
#include "kiln/status.h"

namespace kiln::cpu::nn {

struct ConvShapes {
  int64_t N = 0, C = 0, M = 0, group = 1;
  std::vector<int64_t> in;
  ops::WindowGeometry g;
  Shape y;
};

// Checks X [N, C, in...] against W [M, C/group, k...] and lays out the windows.
template <typename Ctx>
Status conv_shapes(const Ctx& ctx, const ops::WindowAttrs& a, int64_t group, const Shape& x, const Shape& w,
                   ConvShapes& s) {
  if (x.size() < 3) return ctx.error("X must have rank >= 3 ([N, C, spatial...]), got " + shape_to_string(x));
  if (w.size() != x.size()) return ctx.error("W must have the rank of X, got " + shape_to_string(w));
  if (group < 1 || x[1] != w[1] * group || w[0] % group != 0)
    return ctx.error("channels do not match: X " + shape_to_string(x) + ", W " + shape_to_string(w) + ", group " +
                     std::to_string(group));
  s.N = x[0];
  s.C = x[1];
  s.M = w[0];
  s.group = group;
  s.in.assign(x.begin() + 2, x.end());
  auto g = ops::window_geometry(a, s.in, std::vector<int64_t>(w.begin() + 2, w.end()));
  if (!g.ok()) return ctx.error(g.status().message());
  if (a.kernel.size() && a.kernel != std::vector<int64_t>(w.begin() + 2, w.end()))
    return ctx.error("kernel_shape does not match W's shape " + shape_to_string(w));
  s.g = *g;
  s.y = {s.N, s.M};
  s.y.insert(s.y.end(), s.g.out.begin(), s.g.out.end());
  return Status::Ok();
}

inline bool is_pointwise(const ops::WindowGeometry& g) {
  for (size_t i = 0; i < g.kernel.size(); ++i)
    if (g.kernel[i] != 1 || g.strides[i] != 1 || g.pads[i] != 0 || g.pads[g.kernel.size() + i] != 0) return false;
  return true;
}

// oneDNN keeps every primitive it creates (JIT code, ~70 KB for a small convolution) in a
// process-wide cache of 1024 by default: with a new entry per input shape, a context under shape
// churn grew by that much per signature long after its own plans (ExecutionContext::max_shape_plans)
// had let go of them (#47: 207 -> 289 MB). kiln bounds it to this many primitives, unless the user set
// oneDNN's own ONEDNN_PRIMITIVE_CACHE_CAPACITY (or DNNL_...): what a plan keeps it holds itself, so
// the cache only saves the JIT when another context or a re-planned signature makes the same one.
constexpr int kDnnlPrimitiveCacheCapacity = 256;

// The process's oneDNN CPU engine (made once; bounds the primitive cache first).
inline const dnnl::engine& dnnl_cpu() {
  static const dnnl::engine e = [] {
    if (!std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") && !std::getenv("DNNL_PRIMITIVE_CACHE_CAPACITY"))
      dnnl::set_primitive_cache_capacity(kDnnlPrimitiveCacheCapacity);
    return dnnl::engine(dnnl::engine::kind::cpu, 0);
  }();
  return e;
}

inline size_t align64(size_t b) { return (b + 63) & ~size_t{63}; }

// col[c * K + k][o] = x[c][o * stride - pad + k * dilation] (0 outside), for the K window offsets and
// O output positions of `g`; x holds `channels` planes of `in` dims (nn_conv.cpp).
void im2col_f32(const float* x, int64_t channels, const std::vector<int64_t>& in, const ops::WindowGeometry& g,
                float* col);

// A 2-D convolution's geometry as oneDNN takes it (dilations counted from 0, grouped weights 5-D), and
// the user layouts of its buffers: NCHW / [M, C/g, kh, kw], or channels-last NHWC / [M, kh, kw, C/g].
struct DnnlConvDims {
  dnnl::memory::dims src, dst, strides, dil, pad_l, pad_r, weights;
  dnnl::memory::format_tag data_tag, weights_tag;
};

inline DnnlConvDims dnnl_conv_dims(const ConvShapes& s, bool nhwc) {
  using tag = dnnl::memory::format_tag;
  const int64_t kh = s.g.kernel[0], kw = s.g.kernel[1];
  DnnlConvDims d;
  d.src = {s.N, s.C, s.in[0], s.in[1]};
  d.dst = {s.N, s.M, s.g.out[0], s.g.out[1]};
  d.strides = {s.g.strides[0], s.g.strides[1]};
  d.dil = {s.g.dilations[0] - 1, s.g.dilations[1] - 1};
  d.pad_l = {s.g.pads[0], s.g.pads[1]};
  d.pad_r = {s.g.pads[2], s.g.pads[3]};
  const bool grouped = s.group > 1;
  d.weights = grouped ? dnnl::memory::dims{s.group, s.M / s.group, s.C / s.group, kh, kw} : dnnl::memory::dims{s.M, s.C, kh, kw};
  d.data_tag = nhwc ? tag::nhwc : tag::nchw;
  d.weights_tag = grouped ? (nhwc ? tag::gohwi : tag::goihw) : (nhwc ? tag::ohwi : tag::oihw);
  return d;
}

}  // namespace kiln::cpu::nn
