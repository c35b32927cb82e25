// passes/fuse_matmul_add.cpp — MatMul followed by a bias Add along the last dim becomes a Gemm
// (both operands 2-D) or a kiln.FusedMatMul with bias.
#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> fuse_matmul_add(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-matmul-add");
  const std::vector<Rule> rules = {
      {"MatMul+Add", op("Add", {op("MatMul", {any("a"), any("b")}).as("mm"), cst("bias")}).commute()},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* add = m.root();
    const ir::Value* y = m["mm"];
    const ir::Value* a = m["a"];
    const ir::Value* b = m["b"];
    if (y->type.dtype != DataType::kFloat32 || m["bias"]->type.dtype != DataType::kFloat32) return "not float32";
    if (!y->type.shape.known || y->type.shape.rank() < 1 || !y->type.shape.dims.back().is_static())
      return "output's last dim unknown";
    const int64_t N = y->type.shape.dims.back().value;
    const Shape& bs = m.constant("bias").shape();
    if (static_cast<int>(bs.size()) > y->type.shape.rank()) return "bias has a higher rank";
    for (size_t i = 0; i + 1 < bs.size(); ++i)
      if (bs[i] != 1) return "bias " + shape_to_string(bs) + " is not along the last dim";
    if (m.constant("bias").numel() != N) return "bias " + shape_to_string(bs) + " does not have N = " + std::to_string(N) + " values";
    Tensor bias = m.constant("bias").reshaped({N});
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
