// passes/fuse_pad_conv.cpp — a zero constant-mode Pad of the spatial dims feeding a Conv becomes the
// Conv's own padding; feeding an AveragePool (what exporters write for PyTorch's avg_pool2d with
// count_include_pad, as torchvision's Inception v3 does nine times), the pool's padding counted in
// its divisor (count_include_pad = 1). The pool then has a channels-last form and no Pad runs.
#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> fold_pad_into_conv(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-pad-conv");
  const std::vector<Rule> rules = {
      {"Pad+Conv", op("Conv", {op("Pad", {any("x")}).as("pad"), any("w")})},
      {"Pad+AveragePool", op("AveragePool", {op("Pad", {any("x")}).as("pad")})},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* conv = m.root();
    ir::Node* pad = m.node("pad");
    const bool pool = conv->op_type == "AveragePool";
    if (pad->attr_string("mode", "constant") != "constant") return "Pad mode is not constant";
    if (conv->attr_string("auto_pad", "NOTSET") != "NOTSET") return pool ? "AveragePool uses auto_pad" : "Conv uses auto_pad";
    if (pool) {
      // Windows over the padded tensor all lie inside it (no ceil_mode), so each divides by the
      // kernel's size: the pool's own padding must count the same way, or be absent.
      if (conv->opset < 7) return "AveragePool before opset 7 has no count_include_pad";
      if (conv->attr_int("ceil_mode", 0) != 0) return "AveragePool uses ceil_mode";
      bool own = false;
      for (int64_t p : conv->attr_ints("pads")) own |= p != 0;
      if (own && conv->attr_int("count_include_pad", 0) == 0) return "AveragePool excludes its own padding";
    }
    std::vector<int64_t> pads;
    if (pad->opset < 11) {
      pads = pad->attr_ints("pads");
      if (pad->attr_float("value", 0.f) != 0.f) return "pad value is not 0";
    } else {
      if (!pad->has_input(1) || !pad->inputs[1]->is_constant()) return "pads are not constant";
      for (double d : constant_values(pad->inputs[1])) pads.push_back(saturating_int64(d));
      if (pad->has_input(2) && !is_scalar_constant(pad->inputs[2], 0, 0)) return "pad value is not 0";
      if (pad->has_input(3)) return "Pad has axes";
    }
    const int64_t rank = static_cast<int64_t>(pads.size()) / 2;
    if (rank < 3 || static_cast<int64_t>(pads.size()) != 2 * rank) return "pads do not cover [N, C, spatial...]";
    if (pads[0] || pads[1] || pads[rank] || pads[rank + 1]) return "pads N or C";
    for (int64_t p : pads) {
      if (p < 0) return "negative pads (a crop)";
      if (p > (int64_t{1} << 30)) return "pads past 2^30";  // no overflow when added to the Conv's own
    }
    const int64_t sp = rank - 2;
    std::vector<int64_t> cp = conv->attr_ints("pads", std::vector<int64_t>(static_cast<size_t>(2 * sp), 0));
    if (static_cast<int64_t>(cp.size()) != 2 * sp) return pool ? "AveragePool pads size" : "Conv pads size";
    for (int64_t p : cp)
      if (p < -(int64_t{1} << 30) || p > (int64_t{1} << 30)) return "Conv pads past 2^30";
    if (pool && static_cast<int64_t>(conv->attr_ints("kernel_shape").size()) != sp) return "AveragePool kernel rank";
    for (int64_t i = 0; i < sp; ++i) {
      cp[i] += pads[2 + i];
      cp[sp + i] += pads[rank + 2 + i];
    }
    auto attrs = conv->attrs;
    attrs["pads"].kind = ir::Attribute::Kind::kInts;
    attrs["pads"].ints = cp;
    if (pool) {
      attrs["count_include_pad"].kind = ir::Attribute::Kind::kInt;
      attrs["count_include_pad"].i = 1;
    }
    std::vector<ir::Value*> ins = conv->inputs;
    ins[0] = m["x"];
    const std::string what = pad->describe() + " + " + conv->describe();
    ir::Node* n = rw.replace(m, conv->op_type, "", conv->opset, ins);
    n->attrs = attrs;
    rw.log("folded " + what);
    return "";
  });
}

}  // namespace kiln::passes
