// passes/fuse_gelu.cpp — GELU as exporters write it becomes one Gelu (opset 20):
//   erf form  (PyTorch nn.GELU, BERT):   x * 0.5 * (1 + erf(x / sqrt(2)))
//   tanh form (GPT-2's NewGELU):          0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
// in each association of the outer product (0.5*x)*h, (x*h)*0.5, x*(h*0.5).
#include <cmath>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat erf_core() {
  return op("Add", {op("Erf", {op("Div|Mul", {any("x"), cst("c")}).as("scale")}), cst("one")}).commute();
}

Pat tanh_core() {
  Pat cube = op("Mul", {op("Pow", {any("x"), cst("three")}), cst("k")}).commute();
  Pat inner = op("Mul", {op("Add", {any("x"), cube}).commute(), cst("c")}).commute();
  return op("Add", {op("Tanh", {inner}).as("tanh"), cst("one")}).commute();
}

std::vector<Pat> products(const Pat& h) {
  return {
      op("Mul", {op("Mul", {any("x"), cst("half")}).commute(), h}).commute(),
      op("Mul", {op("Mul", {any("x"), h}).commute(), cst("half")}).commute(),
      op("Mul", {any("x"), op("Mul", {h, cst("half")}).commute()}).commute(),
  };
}

bool near(const ir::Value* v, double x) { return is_scalar_constant(v, x, 1e-4); }

}  // namespace

Expected<bool> fuse_gelu(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-gelu");
  std::vector<Rule> rules;
  for (const Pat& p : products(erf_core())) rules.push_back({"GELU (erf)", p, 4});
  for (const Pat& p : products(tanh_core())) rules.push_back({"GELU (tanh)", p, 5});
  return rw.run(rules, [&](Match& m) -> std::string {
    const ir::Value* x = m["x"];
    for (const char* c : {"c", "one", "half", "three", "k"})
      if (m.has(c) && m.constant(c).numel() != 1) return std::string("'") + c + "' is not a scalar";
    if (!x->type.shape.known) return "x's rank unknown";
    for (const char* c : {"c", "one", "half", "three", "k"})
      if (m.has(c) && m.constant(c).rank() > x->type.shape.rank()) return "a constant broadcasts x";
    const bool tanh = m.node("tanh") != nullptr;
    if (!near(m["one"], 1) || !near(m["half"], 0.5)) return "constants are not 1 and 0.5";
    if (tanh) {
      if (!near(m["three"], 3) || !near(m["k"], 0.044715) || !near(m["c"], std::sqrt(2 / M_PI)))
        return "tanh-form constants differ";
    } else {
      const bool div = m.node("scale")->op_type == "Div";
      if (!near(m["c"], div ? std::sqrt(2.0) : 1 / std::sqrt(2.0))) return "erf-form scale is not sqrt(2)";
    }
    const DataType dt = x->type.dtype;
    if (dt != DataType::kFloat32 && dt != DataType::kFloat64 && dt != DataType::kFloat16) return "not a float type";
    const std::string what = m.root()->describe();
    if (std::string why = rw.unsupported_on_target("", "Gelu"); !why.empty()) return why;
    ir::Node* n = rw.replace(m, "Gelu", "", 20, {m["x"]});
    if (tanh) {
      n->attrs["approximate"].kind = ir::Attribute::Kind::kString;
      n->attrs["approximate"].s = "tanh";
    }
    rw.log(std::string("fused GELU (") + (tanh ? "tanh" : "erf") + ") ending at " + what);
    return "";
  });
}

}  // namespace kiln::passes
