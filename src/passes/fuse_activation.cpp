// passes/fuse_activation.cpp — Conv / Gemm / MatMul (and kiln.FusedMatMul with a bias) followed by
// an activation become kiln.FusedConv / kiln.FusedGemm / kiln.FusedMatMul applying it as an epilogue;
// kiln.F8MatMul and a float-output kiln.QMatMul take it as their own attribute.
// Activations: Relu, LeakyRelu, Clip (constant bounds), Sigmoid, HardSigmoid, HardSwish, Tanh, Gelu,
// and SiLU/Swish written as x * Sigmoid(x).
#include <limits>

#include "ir/epilogue.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

const char* kProducers = "Conv|Gemm|MatMul";
// The activations an epilogue applies (ir/epilogue.h), as pattern alternatives.
const std::string kActivations = "Relu|LeakyRelu|Clip|Sigmoid|HardSigmoid|HardSwish|Tanh|Gelu";

Pat producer() { return op(kProducers).as("p"); }
Pat fused_producer() { return op("FusedMatMul").in_domain("kiln").as("p"); }
// kiln.F8MatMul (FP8 engines) takes the activation itself: it stays an F8MatMul.
Pat f8_producer() { return op("F8MatMul").in_domain("kiln").as("p"); }
// So does an int8 product with float output (kiln.QMatMul: a transformer's GELU after its first FFN
// product, applied by the epilogue that scales the int32 sums).
Pat q_producer() { return op("QMatMul").in_domain("kiln").as("p"); }

}  // namespace

// An activation after a Reshape of a product's output (transformers' MLPs reshape the first
// projection's [B*S, 4H] back to [B, S, 4H] before the GELU) moves before the Reshape: an elementwise
// function commutes with a reshape, and the product can then take it as its epilogue.
bool sink_activations_below_reshapes(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-activation");
  const std::vector<Rule> rules = {{"activation after a Reshape", op(kActivations, {op("Reshape").as("r")}), kQuiet}};
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* act = m.root();
    ir::Node* r = m.node("r");
    ir::Value* y = r->inputs[0];
    const ir::Node* p = y ? y->producer : nullptr;
    const bool product = p && ((p->domain.empty() && std::string("|Conv|Gemm|MatMul|").find("|" + p->op_type + "|") != std::string::npos) ||
                               (p->domain == "kiln" && p->op_type == "FusedMatMul"));
    if (!product) return "the Reshape does not read a product";
    if (p->attr("activation")) return "the product already has an activation";
    if (y->uses.size() != 1 || y->is_output) return "the product's output has other readers";
    if (act->op_type == "Clip" && ((act->has_input(1) && !act->inputs[1]->is_constant()) ||
                                   (act->has_input(2) && !act->inputs[2]->is_constant())))
      return "Clip's bounds are not constant";
    std::vector<ir::Value*> act_in = act->inputs;
    act_in[0] = y;
    ir::Value* t = g.new_value(act->outputs[0]->name + "_before_reshape", y->type);
    ir::Node* moved = g.add_node(act->op_type, act->domain, act_in, {t}, act->name + "_before_reshape");
    moved->opset = act->opset;
    moved->attrs = act->attrs;
    const auto r_attrs = r->attrs;
    const int r_opset = r->opset;
    const std::string what = act->describe() + " before " + r->describe();
    ir::Node* n = rw.replace(m, "Reshape", "", r_opset, {t, r->inputs[1]});
    n->attrs = r_attrs;
    rw.log("moved " + what + " (it then fuses into " + p->describe() + ")");
    return "";
  });
}

Expected<bool> fuse_activation(ir::Graph& g, PassContext& ctx) {
  const bool moved = sink_activations_below_reshapes(g, ctx);
  Rewriter rw(g, ctx, "fuse-activation");
  const std::string& acts = kActivations;
  const std::vector<Rule> rules = {
      {"op+activation", op(acts, {producer()})},
      {"op+activation", op(acts, {fused_producer()})},
      {"op+SiLU", op("Mul", {producer(), op("Sigmoid", {producer()})}).commute(), 3},
      {"op+SiLU", op("Mul", {fused_producer(), op("Sigmoid", {fused_producer()})}).commute(), 3},
      {"op+activation", op(acts, {f8_producer()})},
      {"op+SiLU", op("Mul", {f8_producer(), op("Sigmoid", {f8_producer()})}).commute(), 3},
      {"op+activation", op(acts, {q_producer()})},
  };
  const bool any_fused = rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* act = m.root();
    ir::Node* p = m.node("p");
    const bool f8 = p->op_type == "F8MatMul", q8 = p->op_type == "QMatMul";
    if (p->outputs[0]->type.dtype != DataType::kFloat32) return "not float32";
    if (q8 && p->has_input(6)) return "the int8 product's output is quantized";
    for (ir::Value* v : p->inputs)
      if (!q8 && v && v->type.dtype != DataType::kFloat32 && !(f8 && v == p->inputs[1])) return "an input is not float32";
    if (p->attr("activation")) return "already has an activation";
    std::string why;
    const Activation a = act->op_type == "Mul"  // x * Sigmoid(x), matched by the SiLU rule
                             ? Activation{ActKind::kSilu}
                             : activation_of(*act, [](const ir::Value* v) { return scalar_value(v); }, &why);
    if (a.kind == ActKind::kNone) return why;
    std::string fused = f8 ? "F8MatMul" : q8 ? "QMatMul" : p->op_type == "Conv" ? "FusedConv" : p->op_type == "Gemm" ? "FusedGemm" : "FusedMatMul";
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
  return moved || any_fused;
}

// A convolution whose output is added to a tensor of its own shape (a ResNet block's residual), with
// the activation after the sum, becomes kiln.FusedConv(X, W, B, Z): act(conv(X, W) + B + Z) — one
// pass over the output instead of a bias, an add and an activation pass.
Expected<bool> fuse_conv_residual(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-conv-residual");
  const std::string& acts = kActivations;
  // Both operand orders as separate rules (not commute()): when the first operand is a convolution
  // with other readers (a MobileNetV2 block's input), the second one still gets its try.
  auto sum = [](Pat conv, bool conv_first) {
    return (conv_first ? op("Add", {std::move(conv), any("z")}) : op("Add", {any("z"), std::move(conv)})).as("add");
  };
  std::vector<Rule> rules;
  for (bool with_act : {true, false})
    for (bool conv_first : {true, false})
      for (const Pat& conv : {op("Conv").as("p"), op("FusedConv").in_domain("kiln").as("p")})
        rules.push_back(with_act ? Rule{"conv+residual+activation", op(acts, {sum(conv, conv_first)}), 3}
                                 : Rule{"conv+residual", sum(conv, conv_first), kQuiet});
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* p = m.node("p");
    const ir::Value* z = m["z"];
    const ir::Value* y = p->outputs[0];
    if (p->attr("activation") && !p->attr_string("activation", "").empty()) return "the convolution has an activation";
    if (p->inputs.size() > 3 || p->attr_int("channels_last", 0) != 0) return "already fused";
    if (y->type.dtype != DataType::kFloat32 || z->type.dtype != DataType::kFloat32) return "not float32";
    if (z == y || !y->type.shape.known || !(z->type.shape.known && z->type.shape.dims == y->type.shape.dims))
      return "the residual does not have the convolution's shape";
    if (z->type.shape.rank() < 3 || y->type.shape.rank() < 3) return "not a convolution output";
    Activation a;
    std::string why;
    ir::Node* root = m.root();
    const ir::Value* sum_out = m.node("add")->outputs[0];
    if (root == m.node("add") && sum_out->uses.size() == 1 && !sum_out->is_output &&
        sum_out->uses[0].node->domain.empty() && ("|" + acts + "|").find("|" + sum_out->uses[0].node->op_type + "|") != std::string::npos)
      return "left for the rule with the activation";
    if (root != m.node("add")) {
      a = activation_of(*root, [](const ir::Value* v) { return scalar_value(v); }, &why);
      if (a.kind == ActKind::kNone) return why;
    }
    auto attrs = p->attrs;
    write_activation(a, attrs);
    std::vector<ir::Value*> ins = p->inputs;
    ins.resize(3, nullptr);
    ins.push_back(m["z"]);
    const std::string what = p->describe() + " + " + m.node("add")->describe() + (root != m.node("add") ? " + " + root->describe() : "");
    if (std::string why2 = rw.unsupported_on_target("kiln", "FusedConv"); !why2.empty()) return why2;
    ir::Node* n = rw.replace(m, "FusedConv", "kiln", 1, ins);
    n->attrs = attrs;
    rw.log("fused " + what + " into kiln.FusedConv with a residual");
    return "";
  });
}

}  // namespace kiln::passes
