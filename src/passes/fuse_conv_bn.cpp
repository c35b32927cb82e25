// passes/fuse_conv_bn.cpp — Conv followed by an inference BatchNormalization becomes one Conv with
// the normalization folded into its weights and bias:
//   W'[m] = W[m] * s[m],  B'[m] = (B[m] - mean[m]) * s[m] + beta[m],  s = gamma / sqrt(var + eps).
#include <cmath>

#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> fold_conv_batchnorm(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-conv-bn");
  const std::vector<Rule> rules = {
      {"Conv+BatchNormalization",
       op("BatchNormalization", {op("Conv", {any("x"), cst("w")}).as("conv"), cst("gamma"), cst("beta"),
                                 cst("mean"), cst("var")})},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* bn = m.root();
    ir::Node* conv = m.node("conv");
    if (bn->attr_int("training_mode", 0) != 0) return "training mode";
    for (size_t i = 1; i < bn->outputs.size(); ++i)
      if (bn->outputs[i] && (bn->outputs[i]->is_output || !bn->outputs[i]->uses.empty())) return "running stats are read";
    if (conv->has_input(2) && !conv->inputs[2]->is_constant()) return "the Conv bias is not constant";
    const Tensor& w = m.constant("w");
    if (w.rank() < 3) return "weight rank < 3";
    const int64_t M = w.dim(0);
    const auto gamma = constant_values(m["gamma"]), beta = constant_values(m["beta"]);
    const auto mean = constant_values(m["mean"]), var = constant_values(m["var"]);
    for (const auto* v : {&gamma, &beta, &mean, &var})
      if (static_cast<int64_t>(v->size()) != M) return "statistics do not have one value per channel";
    std::vector<double> bias(static_cast<size_t>(M), 0.0);
    if (conv->has_input(2)) bias = constant_values(conv->inputs[2]);
    if (static_cast<int64_t>(bias.size()) != M) return "bias size";
    const double eps = bn->attr_float("epsilon", 1e-5f);
    std::vector<double> wv = constant_values(m["w"]);
    const int64_t per = static_cast<int64_t>(wv.size()) / std::max<int64_t>(M, 1);
    for (int64_t c = 0; c < M; ++c) {
      const double s = gamma[c] / std::sqrt(var[c] + eps);
      for (int64_t k = 0; k < per; ++k) wv[c * per + k] *= s;
      bias[c] = (bias[c] - mean[c]) * s + beta[c];
    }
    auto w2 = real_tensor(w.dtype(), w.shape(), wv);
    auto b2 = real_tensor(w.dtype(), {M}, bias);
    if (!w2 || !b2) return "weights are not float32/float64";
    const auto attrs = conv->attrs;
    const int opset = conv->opset;
    const std::string what = conv->describe() + " + " + bn->describe();
    ir::Node* n = rw.replace(m, "Conv", "", opset, {m["x"], rw.constant(conv->name + "_w", *w2), rw.constant(conv->name + "_b", *b2)});
    n->attrs = attrs;
    rw.log("folded " + what);
    return "";
  });
}

}  // namespace kiln::passes
