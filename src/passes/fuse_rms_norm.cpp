// passes/fuse_rms_norm.cpp — RMSNorm as exported (LLaMA/T5 style) becomes RMSNormalization
// (opset 23) over the last dim:
//   y = x * 1/Sqrt(ReduceMean(Pow(x, 2)) + eps) * gamma   (Reciprocal, Div(1, .) or Div(x, .))
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat root_mean_square() {
  Pat ms = op("ReduceMean", {op("Pow", {any("x"), cst("two")})}).as("mean");
  return op("Sqrt", {op("Add", {ms, cst("eps")}).commute()});
}

}  // namespace

Expected<bool> fuse_rms_norm(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-rms-norm");
  const Pat rms = root_mean_square();
  const std::vector<Pat> normalized = {
      op("Mul", {any("x"), op("Reciprocal", {rms})}).commute(),
      op("Mul", {any("x"), op("Div", {cst("one"), rms})}).commute(),
      op("Div", {any("x"), rms}),
  };
  std::vector<Rule> rules;
  for (const Pat& n : normalized) rules.push_back({"RMSNorm", op("Mul", {n, cst("gamma")}).commute(), 5});
  // Without the scale: a model whose scale is all ones (a fresh or random-weight model) loses that
  // Mul to remove-noops once the shapes are static; gamma is then ones.
  for (const Pat& n : normalized) rules.push_back({"RMSNorm (no scale)", n, kQuiet});
  return rw.run(rules, [&](Match& m) -> std::string {
    const ir::Value* x = m["x"];
    if (!x->type.shape.known || x->type.shape.rank() < 1 || !x->type.shape.dims.back().is_static())
      return "x's last dim unknown";
    const int rank = x->type.shape.rank();
    const int64_t N = x->type.shape.dims.back().value;
    auto axes = reduce_axes(*m.node("mean"));
    if (!axes || axes->size() != 1 || ((*axes)[0] != -1 && (*axes)[0] != rank - 1) ||
        m.node("mean")->attr_int("keepdims", 1) != 1)
      return "the ReduceMean is not over the last dim (with keepdims)";
    if (!is_scalar_constant(m["two"], 2, 0)) return "the power is not 2";
    if (m.has("one") && !is_scalar_constant(m["one"], 1, 0)) return "not 1 / rms";
    auto eps = scalar_value(m["eps"]);
    if (!eps) return "epsilon is not a scalar";
    const DataType dt = x->type.dtype;
    if (dt != DataType::kFloat32 && dt != DataType::kFloat64) return "not float32/float64";
    if (m.has("gamma")) {
      const Tensor& gamma = m.constant("gamma");
      if (gamma.numel() != N || gamma.dtype() != dt || gamma.rank() > rank) return "gamma is not one value per feature";
      for (int i = 0; i + 1 < gamma.rank(); ++i)
        if (gamma.dim(i) != 1) return "gamma is not along the last dim";
    }
    const std::string what = m.root()->describe();
    ir::Value* gv = m.has("gamma") ? rw.constant(m["gamma"]->name + "_row", m.constant("gamma").reshaped({N}))
                                   : rw.constant(m.root()->name + "_scale",
                                                 *real_tensor(dt, {N}, std::vector<double>(static_cast<size_t>(N), 1.0)));
    if (std::string why = rw.unsupported_on_target("", "RMSNormalization"); !why.empty()) return why;
    ir::Node* n = rw.replace(m, "RMSNormalization", "", 23, {m["x"], gv});
    n->attrs["axis"].kind = ir::Attribute::Kind::kInt;
    n->attrs["axis"].i = -1;
    n->attrs["epsilon"].kind = ir::Attribute::Kind::kFloat;
    n->attrs["epsilon"].f = static_cast<float>(*eps);
    rw.log("fused RMSNorm ending at " + what);
    return "";
  });
}

}  // namespace kiln::passes
