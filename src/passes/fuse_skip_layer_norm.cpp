// passes/fuse_skip_layer_norm.cpp — a residual Add feeding LayerNormalization over the last dim
// becomes kiln.SkipLayerNorm; when the sum is read elsewhere too (the next residual), the fused node
// also writes it as its second output.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  return a.is_static() ? a.value == b.value : (!a.symbol.empty() && a.symbol == b.symbol);
}

// True when a + b does not broadcast (equal shapes), or b is one row added to every row of a.
bool residual_shapes(const ir::Value* a, const ir::Value* b) {
  const auto& sa = a->type.shape;
  const auto& sb = b->type.shape;
  if (!sa.known || !sb.known || sa.rank() < 1) return false;
  if (sa.rank() == sb.rank()) {
    for (int i = 0; i < sa.rank(); ++i)
      if (!same_dim(sa.dims[i], sb.dims[i])) return false;
    return true;
  }
  return false;
}

}  // namespace

Expected<bool> fuse_skip_layer_norm(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-skip-layer-norm");
  const std::vector<Rule> rules = {
      {"Add+LayerNormalization", op("LayerNormalization", {op("Add", {any("a"), any("b")}).as("add"), cst("gamma")}), 2, false},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* ln = m.root();
    ir::Node* add = m.node("add");
    const ir::Value* a = m["a"];
    if (a->type.dtype != DataType::kFloat32 || m["b"]->type.dtype != DataType::kFloat32) return "not float32";
    if (!residual_shapes(a, m["b"])) return "the Add broadcasts (or its shapes are unknown)";
    const int rank = a->type.shape.rank();
    const int64_t axis = ln->attr_int("axis", -1);
    if (axis != -1 && axis != rank - 1) return "LayerNormalization is not over the last dim";
    for (size_t i = 1; i < ln->outputs.size(); ++i)
      if (ln->outputs[i] && (ln->outputs[i]->is_output || !ln->outputs[i]->uses.empty())) return "mean/inv_std are read";
    if (ln->has_input(2) && !ln->inputs[2]->is_constant()) return "beta is not constant";
    const auto& last = a->type.shape.dims.back();
    if (!last.is_static() || m.constant("gamma").numel() != last.value) return "gamma is not one value per feature";
    if (ln->has_input(2) && ln->inputs[2]->constant->numel() != last.value) return "beta is not one value per feature";
    std::vector<ir::Value*> ins = {m["a"], m["b"], m["gamma"]};
    if (ln->has_input(2)) ins.push_back(ln->inputs[2]);
    ir::Value* sum = add->outputs[0];
    const bool sum_read = sum->is_output || sum->uses.size() > 1;
    const float eps = ln->attr_float("epsilon", 1e-5f);
    const std::string what = add->describe() + " + " + ln->describe();
    std::vector<ir::Value*> extra;
    if (sum_read) {
      rw.remove(add);  // the fused node writes the sum in its place
      extra.push_back(sum);
    }
    ir::Node* n = rw.replace(m, "SkipLayerNorm", "kiln", 1, ins, extra);
    n->attrs["epsilon"].kind = ir::Attribute::Kind::kFloat;
    n->attrs["epsilon"].f = eps;
    rw.log("fused " + what + (sum_read ? " (sum kept)" : ""));
    return "";
  });
}

}  // namespace kiln::passes
