// passes/fuse_layer_norm.cpp — LayerNorm as exporters decompose it becomes LayerNormalization
// (opset 17) over the last dim:
//   d = x - ReduceMean(x);  y = d / Sqrt(ReduceMean(Pow(d, 2)) + eps) * gamma + beta
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat normalized() {
  Pat d = op("Sub", {any("x"), op("ReduceMean", {any("x")}).as("mean")}).as("d");
  Pat var = op("ReduceMean", {op("Pow", {d, cst("two")})}).as("var");
  return op("Div", {d, op("Sqrt", {op("Add", {var, cst("eps")}).commute()})});
}

// True when the reduce node averages over exactly the last dim of a `rank`-dim input, keeping it.
bool over_last_dim(const ir::Node& r, int rank) {
  auto axes = reduce_axes(r);
  if (!axes || axes->size() != 1 || r.attr_int("keepdims", 1) != 1) return false;
  const int64_t a = (*axes)[0];
  return a == -1 || a == rank - 1;
}

}  // namespace

Expected<bool> fuse_layer_norm(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-layer-norm");
  const std::vector<Rule> rules = {
      {"LayerNorm", op("Add", {op("Mul", {normalized(), cst("gamma")}).commute(), cst("beta")}).commute(), 5},
      {"LayerNorm (no beta)", op("Mul", {normalized(), cst("gamma")}).commute(), 5},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    const ir::Value* x = m["x"];
    if (!x->type.shape.known || x->type.shape.rank() < 1) return "x's rank unknown";
    const int rank = x->type.shape.rank();
    if (!x->type.shape.dims.back().is_static()) return "x's last dim is not static";
    const int64_t N = x->type.shape.dims.back().value;
    if (!over_last_dim(*m.node("mean"), rank) || !over_last_dim(*m.node("var"), rank))
      return "a ReduceMean is not over the last dim only (with keepdims)";
    if (!is_scalar_constant(m["two"], 2, 0)) return "the power is not 2";
    auto eps = scalar_value(m["eps"]);
    if (!eps) return "epsilon is not a scalar";
    const DataType dt = x->type.dtype;
    if (dt != DataType::kFloat32 && dt != DataType::kFloat64) return "not float32/float64";
    std::vector<ir::Value*> params;
    for (const char* p : {"gamma", "beta"}) {
      if (!m.has(p)) continue;
      const Tensor& t = m.constant(p);
      if (t.numel() != N || t.dtype() != dt || t.rank() > rank) return std::string(p) + " is not one value per feature";
      for (int i = 0; i + 1 < t.rank(); ++i)
        if (t.dim(i) != 1) return std::string(p) + " is not along the last dim";
      params.push_back(rw.constant(m[p]->name + "_row", t.reshaped({N})));
    }
    const std::string what = m.root()->describe();
    if (std::string why = rw.unsupported_on_target("", "LayerNormalization"); !why.empty()) return why;
    ir::Node* n = rw.replace(m, "LayerNormalization", "", 17, {m["x"], params[0], params.size() > 1 ? params[1] : nullptr});
    if (!n->inputs[2]) n->inputs.pop_back();
    n->attrs["axis"].kind = ir::Attribute::Kind::kInt;
    n->attrs["axis"].i = -1;
    n->attrs["epsilon"].kind = ir::Attribute::Kind::kFloat;
    n->attrs["epsilon"].f = static_cast<float>(*eps);
    rw.log("fused LayerNorm ending at " + what);
    return "";
  });
}

}  // namespace kiln::passes
