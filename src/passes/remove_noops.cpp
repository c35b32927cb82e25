// passes/remove_noops.cpp — removes nodes that compute their input unchanged: Identity, Dropout
// (inference), Cast to the same type, Reshape/Expand/Slice that keep the (static) shape, Pad by
// zeros, and x+0, x-0, x*1, x/1 whose constant does not broadcast the result. Graph outputs keep
// their names (see Rewriter::bypass).
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool same_static_shape(const ir::Value* a, const ir::Value* b) {
  auto sa = static_shape(a), sb = static_shape(b);
  return sa && sb && *sa == *sb && a->type.dtype == b->type.dtype;
}

// Why n is not a no-op ("" when it is); *in gets the value n passes through.
std::string noop_input(const ir::Node& n, ir::Value** in) {
  if (!n.domain.empty() || n.inputs.empty() || !n.has_input(0) || n.outputs.empty() || !n.outputs[0])
    return "not a candidate";
  *in = n.inputs[0];
  const ir::Value* out = n.outputs[0];
  const std::string& op = n.op_type;
  if (op == "Identity") return n.inputs[0]->type.is_tensor() ? "" : "not a tensor";
  if (op == "Dropout") {
    for (size_t i = 1; i < n.outputs.size(); ++i)
      if (n.outputs[i] && (n.outputs[i]->is_output || !n.outputs[i]->uses.empty())) return "its mask is read";
    if (n.has_input(2) && !is_scalar_constant(n.inputs[2], 0)) {
      // In training mode a ratio of 0 keeps every element and scales by 1 / (1 - 0): the input as it is
      // (what torchvision's Swin exports for its attention dropout at p = 0).
      if (!n.has_input(1) || !is_scalar_constant(n.inputs[1], 0, 0)) return "training_mode is not constant false";
    }
    return "";
  }
  if (op == "Cast") {
    return n.inputs[0]->type.dtype != DataType::kUndefined && n.inputs[0]->type.dtype == out->type.dtype &&
                   static_cast<int64_t>(out->type.dtype) == n.attr_int("to", -1)
               ? ""
               : "changes the type";
  }
  if (op == "Reshape" || op == "Expand" || op == "Squeeze" || op == "Unsqueeze")
    return same_static_shape(n.inputs[0], out) ? "" : "changes the shape";
  if (op == "Slice") {
    if (n.opset < 10) return "old Slice";
    if (n.has_input(4)) {
      auto steps = constant_values(n.inputs[4]);
      if (steps.empty()) return "steps unknown";
      for (double s : steps)
        if (s < 1) return "a step is negative";
    }
    return same_static_shape(n.inputs[0], out) ? "" : "changes the shape";
  }
  if (op == "Pad") {
    if (n.opset < 11) return "old Pad";
    return n.has_input(1) && is_scalar_constant(n.inputs[1], 0, 0) ? "" : "pads are not all zero";
  }
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    const double unit = op == "Add" || op == "Sub" ? 0 : 1;
    for (int i : {0, 1}) {
      if (i == 0 && (op == "Sub" || op == "Div")) continue;  // 0 - x, 1 / x are not x
      const ir::Value* c = n.inputs[i];
      ir::Value* x = n.inputs[1 - i];
      if (c && x && is_scalar_constant(c, unit, 0) && same_static_shape(x, out)) {
        *in = x;
        return "";
      }
    }
    return "not by a neutral constant";
  }
  return "not a candidate";
}

}  // namespace

Expected<bool> remove_noops(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "remove-noops");
  bool changed = false;
  const auto nodes = g.nodes();
  for (ir::Node* n : nodes) {
    if (rw.dead(n)) continue;
    ir::Value* in = nullptr;
    if (!noop_input(*n, &in).empty()) continue;
    const std::string what = n->describe();
    if (!rw.bypass(n, in)) {
      rw.near_miss(what + ": its output is a graph output and its input cannot be renamed");
      continue;
    }
    rw.log("removed " + what);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
