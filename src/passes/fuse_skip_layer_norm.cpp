// passes/fuse_skip_layer_norm.cpp — a residual (or embedding) Add feeding LayerNormalization over
// the last dim becomes kiln.SkipLayerNorm (the kernel broadcasts the leading dims); when the sum is read elsewhere too (the next residual), the fused node
// also writes it as its second output.
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
  const std::vector<Rule> rules = {
      {"Add+LayerNormalization", op("LayerNormalization", {op("Add", {any("a"), any("b")}).as("add"), cst("gamma")}), 2, false},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* ln = m.root();
    ir::Node* add = m.node("add");
    const ir::Value* a = m["a"];
    if (a->type.dtype != DataType::kFloat32 || m["b"]->type.dtype != DataType::kFloat32) return "not float32";
    const int64_t n = m.constant("gamma").numel();
    if (!rows_of(a, n) || !rows_of(m["b"], n)) return "the Add's inputs do not both end in the normalized dim";
    const ir::Value* sum_v = m["add"];
    if (!sum_v->type.shape.known) return "the sum's rank is unknown";
    const int rank = sum_v->type.shape.rank();
    const int64_t axis = ln->attr_int("axis", -1);
    if (axis != -1 && axis != rank - 1) return "LayerNormalization is not over the last dim";
    for (size_t i = 1; i < ln->outputs.size(); ++i)
      if (ln->outputs[i] && (ln->outputs[i]->is_output || !ln->outputs[i]->uses.empty())) return "mean/inv_std are read";
    if (ln->has_input(2) && !ln->inputs[2]->is_constant()) return "beta is not constant";
    if (ln->has_input(2) && ln->inputs[2]->constant->numel() != n) return "beta is not one value per feature";
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
    if (std::string why = rw.unsupported_on_target("kiln", "SkipLayerNorm"); !why.empty()) return why;
    ir::Node* fused = rw.replace(m, "SkipLayerNorm", "kiln", 1, ins, extra);
    fused->attrs["epsilon"].kind = ir::Attribute::Kind::kFloat;
    fused->attrs["epsilon"].f = eps;
    rw.log("fused " + what + (sum_read ? " (sum kept)" : ""));
    return "";
  });
}

}  // namespace kiln::passes
