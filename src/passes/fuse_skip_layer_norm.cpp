// passes/fuse_skip_layer_norm.cpp — a residual (or embedding) Add feeding LayerNormalization over
// the last dim becomes kiln.SkipLayerNorm (the kernel broadcasts the leading dims); when the sum is
// read elsewhere too (the next residual), the fused node also writes it as its second output.
// A Reshape between the Add and the normalization that keeps the last dim (timm's Swin blocks:
// `x = x + attn(...); x = x.reshape(B, -1, C); norm2(x)`) changes no row: the fused node writes the
// normalized rows and the sum in the Add's shape, and the Reshape applies to both (a Reshape that
// is its input's last reader costs nothing). RMSNormalization (fuse-rms-norm's, or ONNX's own) after the
// Add becomes the same node with simplified = 1: Llama-style decoders add each residual and normalize
// the sum for the next block, one kernel instead of an Add and a norm.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// True when a and b both end in the static dim n (the kernel broadcasts the other dims).
bool rows_of(const ir::Value* a, int64_t n) {
  const auto& s = a->type.shape;
  return s.known && s.rank() >= 1 && s.dims.back().is_static() && s.dims.back().value == n;
}

}  // namespace

Expected<bool> fuse_skip_layer_norm(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-skip-layer-norm");
  std::vector<Rule> rules;
  for (const char* norm : {"LayerNormalization", "RMSNormalization"}) {
    const std::string name = norm;
    rules.push_back({"Add+" + name, op(norm, {op("Add", {any("a"), any("b")}).as("add"), cst("gamma")}), 2, false});
    rules.push_back({"Add+Reshape+" + name,
                     op(norm, {op("Reshape", {op("Add", {any("a"), any("b")}).as("add"), any("shape")}).as("reshape"), cst("gamma")}),
                     3, false});
  }
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* ln = m.root();
    ir::Node* add = m.node("add");
    const bool rms = ln->op_type == "RMSNormalization";
    if (ln->attr_int("stash_type", 1) != 1) return "stash_type is not float32";
    const ir::Value* a = m["a"];
    if (a->type.dtype != DataType::kFloat32 || m["b"]->type.dtype != DataType::kFloat32) return "not float32";
    if (m["gamma"]->type.dtype != DataType::kFloat32 || (ln->has_input(2) && ln->inputs[2]->type.dtype != DataType::kFloat32))
      return "the scale or bias is not float32";
    const int64_t n = m.constant("gamma").numel();
    if (!rows_of(a, n) || !rows_of(m["b"], n)) return "the Add's inputs do not both end in the normalized dim";
    ir::Node* reshape = m.node("reshape");
    const ir::Value* sum_v = m["add"];
    if (!sum_v->type.shape.known) return "the sum's rank is unknown";
    if (reshape && !rows_of(m["reshape"], n)) return "the Reshape does not keep the normalized dim last";
    if (reshape && m["add"]->uses.size() != 1) return "the sum is read beside the Reshape";
    const int rank = (reshape ? m["reshape"] : sum_v)->type.shape.rank();  // known: rows_of checked it
    const int64_t axis = ln->attr_int("axis", -1);
    if (axis != -1 && axis != rank - 1) return ln->op_type + " is not over the last dim";
    for (size_t i = 1; i < ln->outputs.size(); ++i)
      if (ln->outputs[i] && (ln->outputs[i]->is_output || !ln->outputs[i]->uses.empty())) return "mean/inv_std are read";
    if (ln->has_input(2) && !ln->inputs[2]->is_constant()) return "beta is not constant";
    if (ln->has_input(2) && ln->inputs[2]->constant->numel() != n) return "beta is not one value per feature";
    std::vector<ir::Value*> ins = {m["a"], m["b"], m["gamma"]};
    if (ln->has_input(2)) ins.push_back(ln->inputs[2]);
    ir::Value* sum = add->outputs[0];
    const bool sum_read = reshape || sum->is_output || sum->uses.size() > 1;
    const float eps = ln->attr_float("epsilon", 1e-5f);
    const std::string what = add->describe() + " + " + (reshape ? reshape->describe() + " + " : "") + ln->describe();
    if (std::string why = rw.unsupported_on_target("kiln", "SkipLayerNorm"); !why.empty()) return why;
    auto set_epsilon = [eps, rms](ir::Node* fused) {
      set_float(fused, "epsilon", eps);
      if (rms) set_int(fused, "simplified", 1);
    };
    if (reshape) {
      // SkipLayerNorm(a, b) → (rows in the Add's shape, the sum); the Reshape keeps reading the sum
      // (its other readers see no change) and a twin of it gives the normalized rows the LN's shape.
      ir::Value* y = ln->outputs[0];
      const std::string base = ln->name;
      ir::Value* rows = g.new_value(base + "_rows", sum_v->type);
      rw.remove(add);
      rw.remove(ln);
      ir::Node* fused = g.add_node("SkipLayerNorm", "kiln", ins, {rows, sum}, base + "_skip");
      fused->opset = 1;
      set_epsilon(fused);
      ir::Node* twin = g.add_node("Reshape", "", {rows, reshape->inputs[1]}, {y}, base + "_rows_reshape");
      twin->opset = reshape->opset;
      twin->attrs = reshape->attrs;
      rw.log("fused " + what + " (sum kept, the Reshape applied to both)");
      return "";
    }
    std::vector<ir::Value*> extra;
    if (sum_read) {
      rw.remove(add);  // the fused node writes the sum in its place
      extra.push_back(sum);
    }
    set_epsilon(rw.replace(m, "SkipLayerNorm", "kiln", 1, ins, extra));
    rw.log("fused " + what + (sum_read ? " (sum kept)" : ""));
    return "";
  });
}

}  // namespace kiln::passes
