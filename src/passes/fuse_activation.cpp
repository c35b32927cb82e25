// passes/fuse_activation.cpp — Conv / Gemm / MatMul (and kiln.FusedMatMul with a bias) followed by
// an activation become kiln.FusedConv / kiln.FusedGemm / kiln.FusedMatMul applying it as an epilogue.
// Activations: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu,
// and SiLU/Swish written as x * Sigmoid(x).
#include <limits>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

const char* kProducers = "Conv|Gemm|MatMul";

Pat producer() { return op(kProducers).as("p"); }
Pat fused_producer() { return op("FusedMatMul").in_domain("kiln").as("p"); }

// The activation name and parameters of node `act` (SiLU when it is the Mul); "" when unsupported.
std::string activation_of(const ir::Node& act, std::vector<float>* params, std::string* why) {
  const std::string& op = act.op_type;
  if (op == "Mul") return "Silu";
  if (op == "Relu" || op == "Sigmoid" || op == "HardSwish" || op == "Tanh") return op;
  if (op == "LeakyRelu") { params->push_back(act.attr_float("alpha", 0.01f)); return op; }
  if (op == "HardSigmoid") {
    params->push_back(act.attr_float("alpha", 0.2f));
    params->push_back(act.attr_float("beta", 0.5f));
    return op;
  }
  if (op == "Gelu") return act.attr_string("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu";
  if (op == "Clip") {
    float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
    if (act.opset < 11) {
      lo = act.attr_float("min", lo);
      hi = act.attr_float("max", hi);
    } else {
      for (int i : {1, 2}) {
        if (!act.has_input(i)) continue;
        auto v = scalar_value(act.inputs[i]);
        if (!v) { *why = "Clip bounds are not constant"; return ""; }
        (i == 1 ? lo : hi) = static_cast<float>(*v);
      }
    }
    params->push_back(lo);
    params->push_back(hi);
    return op;
  }
  *why = op + " is not fusable";
  return "";
}

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
    std::vector<float> params;
    std::string why;
    const std::string name = activation_of(*act, &params, &why);
    if (name.empty()) return why;
    std::string fused = p->op_type == "Conv" ? "FusedConv" : p->op_type == "Gemm" ? "FusedGemm" : "FusedMatMul";
    if (p->op_type == "Gemm" && p->opset < 11 && !p->has_input(2)) return "old Gemm without C";
    auto attrs = p->attrs;
    attrs["activation"].kind = ir::Attribute::Kind::kString;
    attrs["activation"].s = name;
    if (!params.empty()) {
      attrs["activation_params"].kind = ir::Attribute::Kind::kFloats;
      attrs["activation_params"].floats = params;
    }
    const std::string what = p->describe() + " + " + act->describe();
    if (std::string why = rw.unsupported_on_target("kiln", fused); !why.empty()) return why;
    ir::Node* n = rw.replace(m, fused, "kiln", 1, p->inputs);
    n->attrs = attrs;
    rw.log("fused " + what + " into kiln." + fused);
    return "";
  });
}

}  // namespace kiln::passes
