// passes/fuse_matmul_add.cpp — MatMul followed by a bias Add along the last dim becomes a Gemm
// (both operands 2-D) or a kiln.FusedMatMul with bias; a float-output kiln.QMatMul takes the Add as
// its bias.
#include "passes/pattern.h"

namespace kiln::passes {

namespace {

// The constant `bias` of the match as an [N] row along y's last dim, or why not.
Expected<Tensor> bias_row(Match& m, const ir::Value* y) {
  if (y->type.dtype != DataType::kFloat32 || m["bias"]->type.dtype != DataType::kFloat32) return invalid_argument("not float32");
  if (!y->type.shape.known || y->type.shape.rank() < 1 || !y->type.shape.dims.back().is_static())
    return invalid_argument("output's last dim unknown");
  const int64_t N = y->type.shape.dims.back().value;
  const Shape& bs = m.constant("bias").shape();
  if (static_cast<int>(bs.size()) > y->type.shape.rank()) return invalid_argument("bias has a higher rank");
  for (size_t i = 0; i + 1 < bs.size(); ++i)
    if (bs[i] != 1) return invalid_argument("bias " + shape_to_string(bs) + " is not along the last dim");
  if (m.constant("bias").numel() != N)
    return invalid_argument("bias " + shape_to_string(bs) + " does not have N = " + std::to_string(N) + " values");
  return m.constant("bias").reshaped({N});
}

}  // namespace

Expected<bool> fuse_matmul_add(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-matmul-add");
  const std::vector<Rule> rules = {
      {"MatMul+Add", op("Add", {op("MatMul", {any("a"), any("b")}).as("mm"), cst("bias")}).commute()},
      // An int8 product with float output (kiln.QMatMul, passes/fuse_qdq.cpp) takes the Add as its
      // bias: the epilogue that scales the int32 sums adds it (transformers' projections).
      {"QMatMul+Add", op("Add", {op("QMatMul").in_domain("kiln").as("qmm"), cst("bias")}).commute()},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* add = m.root();
    if (m.has("qmm")) {
      const ir::Node* qm = m.node("qmm");
      if (qm->has_input(6)) return "the product's output is 8-bit";
      if (qm->has_input(8)) return "the product has a bias already";
      if (qm->attr_string("activation", "") != "") return "the product has an activation";
      auto bias = bias_row(m, m["qmm"]);
      if (!bias.ok()) return bias.status().message();
      std::vector<ir::Value*> ins(9, nullptr);
      for (size_t i = 0; i < qm->inputs.size() && i < 8; ++i) ins[i] = qm->inputs[i];
      ins[8] = rw.constant(m["bias"]->name + "_row", *bias);
      const auto attrs = qm->attrs;
      const std::string what = qm->describe() + " + " + add->describe();
      ir::Node* n = rw.replace(m, "QMatMul", "kiln", qm->opset, ins);
      n->attrs = attrs;
      rw.log("fused " + what + " into kiln.QMatMul's bias");
      return "";
    }
    const ir::Value* a = m["a"];
    const ir::Value* b = m["b"];
    auto biased = bias_row(m, m["mm"]);
    if (!biased.ok()) return biased.status().message();
    Tensor bias = *biased;
    const std::string what = m.node("mm")->describe() + " + " + add->describe();
    const bool two_d = a->type.shape.known && a->type.shape.rank() == 2 && b->type.shape.known && b->type.shape.rank() == 2;
    ir::Value* bv = rw.constant(m["bias"]->name + "_row", bias);
    if (two_d) {
      if (std::string why = rw.unsupported_on_target("", "Gemm"); !why.empty()) return why;
      rw.replace(m, "Gemm", "", 13, {m["a"], m["b"], bv});
      rw.log("fused " + what + " into Gemm");
    } else {
      if (std::string why = rw.unsupported_on_target("kiln", "FusedMatMul"); !why.empty()) return why;
      rw.replace(m, "FusedMatMul", "kiln", 1, {m["a"], m["b"], bv});
      rw.log("fused " + what + " into kiln.FusedMatMul");
    }
    return "";
  });
}

}  // namespace kiln::passes
