// passes/fuse_conv_affine.cpp — Conv followed by a per-channel Mul or Add by a constant becomes one
// Conv: Mul scales W[m] and B[m]; Add adds to B[m].
#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> fold_conv_affine(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-conv-affine");
  const std::vector<Rule> rules = {
      {"Conv+Mul|Add", op("Mul|Add", {op("Conv", {any("x"), cst("w")}).as("conv"), cst("c")}).commute()},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* root = m.root();
    ir::Node* conv = m.node("conv");
    if (conv->has_input(2) && !conv->inputs[2]->is_constant()) return "the Conv bias is not constant";
    const Tensor& w = m.constant("w");
    if (w.rank() < 3) return "weight rank < 3";
    const int64_t M = w.dim(0);
    const ir::Value* y = root->outputs[0];
    if (!y->type.shape.known || y->type.shape.rank() != w.rank()) return "output rank unknown";
    if (y->type.dtype != m["c"]->type.dtype) return "different dtypes";
    auto c = per_channel(m["c"], w.rank(), M);
    if (!c) return "the constant is not per channel (shape " + shape_to_string(m.constant("c").shape()) + ")";
    std::vector<double> bias(static_cast<size_t>(M), 0.0);
    if (conv->has_input(2)) bias = constant_values(conv->inputs[2]);
    if (static_cast<int64_t>(bias.size()) != M) return "bias size";
    std::vector<double> wv = constant_values(m["w"]);
    const int64_t per = static_cast<int64_t>(wv.size()) / std::max<int64_t>(M, 1);
    const bool mul = root->op_type == "Mul";
    for (int64_t k = 0; k < M; ++k) {
      if (mul) {
        for (int64_t j = 0; j < per; ++j) wv[k * per + j] *= (*c)[k];
        bias[k] *= (*c)[k];
      } else {
        bias[k] += (*c)[k];
      }
    }
    auto w2 = real_tensor(w.dtype(), w.shape(), wv);
    auto b2 = real_tensor(w.dtype(), {M}, bias);
    if (!w2 || !b2) return "weights are not float32/float64";
    const auto attrs = conv->attrs;
    const std::string what = conv->describe() + " + " + root->describe();
    ir::Value* wc = mul ? rw.constant(conv->name + "_w", *w2) : m["w"];
    ir::Node* n = rw.replace(m, "Conv", "", conv->opset, {m["x"], wc, rw.constant(conv->name + "_b", *b2)});
    n->attrs = attrs;
    rw.log("folded " + what);
    return "";
  });
}

}  // namespace kiln::passes
