// passes/trim_conv_taps.cpp — a Conv whose outer kernel taps only ever read padding loses them.
//
// With a static input size, each tap j of a spatial axis reads input positions o*stride - pad + j*dilation
// for the outputs o. A tap whose positions all fall in the zero padding adds nothing to any output, so
// the kernel can be cut to the taps that read the input, with the padding moved by as many taps: the
// same sums without their zero terms, and the same output size. DeepLabV3's ASPP convolutions (3x3 at
// dilations 24 and 36 on a 16x16 map) become 1x1 convolutions: 9x fewer multiply-adds, the same values.
#include <cstring>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// The taps [first, last] of one spatial axis that read the input, or first = -1 when none does.
struct LiveTaps {
  int64_t first = -1, last = -1;
};

LiveTaps live_taps(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dilation) {
  LiveTaps t;
  for (int64_t j = 0; j < k; ++j) {
    // The first output whose position for tap j is >= 0, and whether it is still inside the input.
    const int64_t need = pad - j * dilation;  // o * stride >= need
    const int64_t o = need <= 0 ? 0 : (need + stride - 1) / stride;
    if (o >= out || o * stride - pad + j * dilation >= in) continue;
    if (t.first < 0) t.first = j;
    t.last = j;
  }
  return t;
}

// w [M, C, k_0, ..., k_{n-1}] cut to taps [first[d], first[d] + size[d]) of each spatial axis d.
Tensor slice_kernel(const Tensor& w, const std::vector<int64_t>& first, const Shape& out_shape) {
  Tensor r = Tensor::empty(w.dtype(), out_shape);
  const size_t es = dtype_size(w.dtype());
  const Shape& in_shape = w.shape();
  const int rank = static_cast<int>(out_shape.size());
  const int64_t n = r.numel();
  std::vector<int64_t> idx(rank, 0);
  const auto* src = static_cast<const uint8_t*>(w.raw());
  auto* dst = static_cast<uint8_t*>(r.raw());
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = 0;
    for (int d = 0; d < rank; ++d) off = off * in_shape[d] + idx[d] + (d >= 2 ? first[d - 2] : 0);
    std::memcpy(dst + i * es, src + off * es, es);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[d] < out_shape[d]) break;
      idx[d] = 0;
    }
  }
  return r;
}

}  // namespace

Expected<bool> trim_conv_taps(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "trim-conv-taps");
  const std::vector<Rule> rules = {{"Conv", op("Conv", {any("x"), cst("w")}), 1}};
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* conv = m.root();
    if (conv->attr_string("auto_pad", "NOTSET") != "NOTSET") return "Conv uses auto_pad";
    const Tensor& w = m.constant("w");
    if (w.dtype() == DataType::kString || w.rank() < 3) return "weights are not a numeric kernel";
    const ir::SymShape& xs = m["x"]->type.shape;
    const int sp = w.rank() - 2;
    if (!xs.known || xs.rank() != w.rank()) return "input rank unknown";
    const auto ones = std::vector<int64_t>(static_cast<size_t>(sp), 1);
    const std::vector<int64_t> strides = conv->attr_ints("strides", ones), dil = conv->attr_ints("dilations", ones);
    std::vector<int64_t> pads = conv->attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * sp), 0));
    if (static_cast<int>(strides.size()) != sp || static_cast<int>(dil.size()) != sp || static_cast<int>(pads.size()) != 2 * sp)
      return "attribute sizes";
    Shape kshape = w.shape();
    std::vector<int64_t> first(static_cast<size_t>(sp), 0), new_dil = dil;
    bool trimmed = false;
    for (int d = 0; d < sp; ++d) {
      const ir::Dim& dim = xs.dims[2 + d];
      const int64_t in = dim.value, k = w.dim(2 + d), s = strides[d], p0 = pads[d], p1 = pads[sp + d], dl = dil[d];
      if (!dim.is_static()) return "spatial size is not static";
      if (s < 1 || dl < 1 || k < 1 || p0 < 0 || p1 < 0) return "unusual stride, dilation or pads";
      const int64_t span = (k - 1) * dl + 1, out = (in + p0 + p1 - span) / s + 1;
      if (in + p0 + p1 < span || out < 1) return "no output";
      const LiveTaps t = live_taps(in, out, k, s, p0, dl);
      if (t.first < 0) return "no tap reads the input";
      if (t.first == 0 && t.last == k - 1) continue;
      const int64_t k2 = t.last - t.first + 1, q0 = p0 - t.first * dl, span2 = (k2 - 1) * dl + 1;
      if (q0 < 0) return "the cut would crop the input";
      int64_t q1 = (out - 1) * s + span2 - in - q0;
      if (q1 < 0) q1 = 0;
      if ((in + q0 + q1 - span2) / s + 1 != out) return "the cut changes the output size";
      first[d] = t.first;
      kshape[2 + d] = k2;
      pads[d] = q0;
      pads[sp + d] = q1;
      if (k2 == 1) new_dil[d] = 1;
      trimmed = true;
    }
    if (!trimmed) return "every tap reads the input";
    auto attrs = conv->attrs;
    attrs["pads"].kind = ir::Attribute::Kind::kInts;
    attrs["pads"].ints = pads;
    attrs["dilations"].kind = ir::Attribute::Kind::kInts;
    attrs["dilations"].ints = new_dil;
    if (attrs.count("kernel_shape")) attrs["kernel_shape"].ints = Shape(kshape.begin() + 2, kshape.end());
    std::vector<ir::Value*> ins = conv->inputs;
    ins[1] = rw.constant(conv->name + "_trimmed_w", slice_kernel(w, first, kshape));
    const std::string what = conv->describe() + ": kernel " + shape_to_string(Shape(w.shape().begin() + 2, w.shape().end())) +
                             " -> " + shape_to_string(Shape(kshape.begin() + 2, kshape.end()));
    ir::Node* n = rw.replace(m, "Conv", "", conv->opset, ins);
    n->attrs = attrs;
    rw.log("trimmed " + what + " (the cut taps read only padding)");
    return "";
  });
}

}  // namespace kiln::passes
