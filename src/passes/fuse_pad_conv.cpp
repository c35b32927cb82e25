// passes/fuse_pad_conv.cpp — a zero constant-mode Pad of the spatial dims feeding a Conv becomes the
// Conv's own padding.
#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> fold_pad_into_conv(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-pad-conv");
  const std::vector<Rule> rules = {
      {"Pad+Conv", op("Conv", {op("Pad", {any("x")}).as("pad"), any("w")})},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* conv = m.root();
    ir::Node* pad = m.node("pad");
    if (pad->attr_string("mode", "constant") != "constant") return "Pad mode is not constant";
    if (conv->attr_string("auto_pad", "NOTSET") != "NOTSET") return "Conv uses auto_pad";
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
    if (static_cast<int64_t>(cp.size()) != 2 * sp) return "Conv pads size";
    for (int64_t p : cp)
      if (p < -(int64_t{1} << 30) || p > (int64_t{1} << 30)) return "Conv pads past 2^30";
    for (int64_t i = 0; i < sp; ++i) {
      cp[i] += pads[2 + i];
      cp[sp + i] += pads[rank + 2 + i];
    }
    auto attrs = conv->attrs;
    attrs["pads"].kind = ir::Attribute::Kind::kInts;
    attrs["pads"].ints = cp;
    std::vector<ir::Value*> ins = conv->inputs;
    ins[0] = m["x"];
    const std::string what = pad->describe() + " + " + conv->describe();
    ir::Node* n = rw.replace(m, "Conv", "", conv->opset, ins);
    n->attrs = attrs;
    rw.log("folded " + what);
    return "";
  });
}

}  // namespace kiln::passes
