// passes/fuse_activation.cpp — Conv / Gemm / MatMul (and kiln.FusedMatMul with a bias) followed by
// an activation become kiln.FusedConv / kiln.FusedGemm / kiln.FusedMatMul applying it as an epilogue.
// Activations: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu,
// and SiLU/Swish written as x * Sigmoid(x).
#include <limits>

#include "ir/epilogue.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

const char* kProducers = "Conv|Gemm|MatMul";

Pat producer() { return op(kProducers).as("p"); }
Pat fused_producer() { return op("FusedMatMul").in_domain("kiln").as("p"); }

}  // namespace

Expected<bool> fuse_activation(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-activation");
  const std::string acts = "Relu|LeakyRelu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh|Gelu";
  const std::vector<Rule> rules = {
      {"op+activation", op(acts, {producer()})},
      {"op+activation", op(acts, {fused_producer()})},
      {"op+SiLU", op("Mul", {producer(), op("Sigmoid", {producer()})}).commute(), 3},
      {"op+SiLU", op("Mul", {fused_producer(), op("Sigmoid", {fused_producer()})}).commute(), 3},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* act = m.root();
    ir::Node* p = m.node("p");
    if (p->outputs[0]->type.dtype != DataType::kFloat32) return "not float32";
    for (ir::Value* v : p->inputs)
      if (v && v->type.dtype != DataType::kFloat32) return "an input is not float32";
    if (p->attr("activation")) return "already has an activation";
    std::string why;
    const Activation a = act->op_type == "Mul"  // x * Sigmoid(x), matched by the SiLU rule
                             ? Activation{ActKind::kSilu}
                             : activation_of(*act, [](const ir::Value* v) { return scalar_value(v); }, &why);
    if (a.kind == ActKind::kNone) return why;
    std::string fused = p->op_type == "Conv" ? "FusedConv" : p->op_type == "Gemm" ? "FusedGemm" : "FusedMatMul";
    if (p->op_type == "Gemm" && p->opset < 11 && !p->has_input(2)) return "old Gemm without C";
    auto attrs = p->attrs;
    write_activation(a, attrs);
    const std::string what = p->describe() + " + " + act->describe();
    if (std::string why = rw.unsupported_on_target("kiln", fused); !why.empty()) return why;
    ir::Node* n = rw.replace(m, fused, "kiln", 1, p->inputs);
    n->attrs = attrs;
    rw.log("fused " + what + " into kiln." + fused);
    return "";
  });
}

}  // namespace kiln::passes
