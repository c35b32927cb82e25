// passes/fuse_rotary.cpp — the rotary embedding as Llama, Mistral, Qwen, Phi and GPT-NeoX exports
// write it (transformers' apply_rotary_pos_emb with rotate_half) becomes one kiln.Rotary:
//
//   y = Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, D/2, end)), Slice(x, 0, D/2), axis -1), sin))
//
// over x's last dim D; cos and sin are the model's full-width tables (cat(freqs, freqs)), so the op
// computes exactly the graph's formula, y[i] = x[i]·cos[i] - x[i+D/2]·sin[i] and y[i+D/2] =
// x[i+D/2]·cos[i+D/2] + x[i]·sin[i+D/2], in one pass instead of two slices, a negation, a concat and
// three elementwise steps. D/2 is a constant or, where the shapes after the embedding are unknown
// (dynamic shapes), the export's Div(Gather(Shape(x), last), 2).
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat rotary_pattern() {
  Pat rotated = op("Concat", {op("Neg", {op("Slice", {any("x")}).as("second")}).as("neg"), op("Slice", {any("x")}).as("first")})
                    .as("cat");
  Pat rs = op("Mul", {rotated, any("sin")}).commute();
  Pat xc = op("Mul", {any("x"), any("cos")}).commute();
  return op("Add", {rs, xc}).commute();
}

// A scalar integer value (a constant of one element, or what the export computes as x.shape[-1] // 2:
// Div(Gather(Shape(x), last axis), 2) through Cast/Unsqueeze/Squeeze) equal to half of x's last dim
// `d`: true when certainly so.
bool is_half_of_last_dim(const ir::Value* v, const ir::Value* x, int64_t d) {
  if (auto c = scalar_value(v)) return *c == static_cast<double>(d / 2);
  const ir::Node* p = v->producer;
  for (int i = 0; i < 6 && p && p->domain.empty() && (p->op_type == "Cast" || p->op_type == "Unsqueeze" || p->op_type == "Squeeze");
       ++i)
    p = p->has_input(0) ? p->inputs[0]->producer : nullptr;
  if (!p || !p->domain.empty() || p->op_type != "Div" || p->inputs.size() != 2 || !is_scalar_constant(p->inputs[1], 2, 0))
    return false;
  const ir::Node* gather = p->inputs[0] ? p->inputs[0]->producer : nullptr;
  if (!gather || !gather->domain.empty() || gather->op_type != "Gather" || gather->inputs.size() != 2) return false;
  const ir::Node* shape = gather->inputs[0] ? gather->inputs[0]->producer : nullptr;
  if (!shape || !shape->domain.empty() || shape->op_type != "Shape" || shape->inputs[0] != x || shape->attrs.count("start") ||
      shape->attrs.count("end"))
    return false;
  const auto idx = scalar_value(gather->inputs[1]);
  const int64_t rank = x->type.shape.known ? x->type.shape.rank() : 0;
  return idx && rank > 0 && (*idx == -1 || *idx == static_cast<double>(rank - 1));
}

// Slice(x, start, end, axes, steps) along x's last axis with step 1: "" when its start and end
// satisfy the checks, else why not.
std::string last_axis_slice(const ir::Node& s, const ir::Value* x, bool first_half, int64_t d) {
  const int64_t rank = x->type.shape.rank();
  if (s.inputs.size() < 4 || !s.has_input(1) || !s.has_input(2) || !s.has_input(3)) return "a Slice without axes";
  const std::vector<double> ax = constant_values(s.inputs[3]);
  if (ax.size() != 1 || (ax[0] != -1 && ax[0] != static_cast<double>(rank - 1))) return "a Slice not along the last axis";
  if (s.has_input(4) && constant_values(s.inputs[4]) != std::vector<double>{1}) return "a Slice with a step";
  if (first_half) {
    if (constant_values(s.inputs[1]) != std::vector<double>{0} || !is_half_of_last_dim(s.inputs[2], x, d))
      return "the first half is not x[..., :D/2]";
    return "";
  }
  const std::vector<double> end = constant_values(s.inputs[2]);
  if (!is_half_of_last_dim(s.inputs[1], x, d) || end.size() != 1 || end[0] < static_cast<double>(d))
    return "the second half is not x[..., D/2:]";
  return "";
}

}  // namespace

Expected<bool> fuse_rotary(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-rotary");
  return rw.run({{"rotary embedding (rotate_half)", rotary_pattern(), 4}}, [&](Match& m) -> std::string {
    const ir::Value* x = m["x"];
    if (x->type.dtype != DataType::kFloat32) return "not float32";
    for (const char* c : {"cos", "sin"})
      if (m[c]->type.dtype != DataType::kFloat32) return "cos and sin are not float32";
    const ir::SymShape& xs = x->type.shape;
    if (!xs.known || xs.rank() < 1) return "x's rank is not known";
    for (const char* c : {"cos", "sin"})
      if (m[c]->type.shape.known && m[c]->type.shape.rank() > xs.rank()) return "cos or sin has more dims than x";
    const int64_t d = proven_last_dim(x);
    if (d <= 0 || d % 2) return "x's last dim is not known to be even";
    const ir::Node* cat = m.node("cat");
    const int64_t axis = cat->attr_int("axis", 0);
    if (cat->inputs.size() != 2 || (axis != -1 && axis != xs.rank() - 1)) return "the Concat is not of two halves along the last axis";
    if (std::string w = last_axis_slice(*m.node("first"), x, true, d); !w.empty()) return w;
    if (std::string w = last_axis_slice(*m.node("second"), x, false, d); !w.empty()) return w;
    if (std::string w = rw.unsupported_on_target("kiln", "Rotary"); !w.empty()) return w;
    const std::string what = m.root()->describe();
    rw.replace(m, "Rotary", "kiln", 1, {m["x"], m["cos"], m["sin"]});
    rw.log("fused the rotary embedding of '" + x->name + "' (" + std::to_string(d) + " wide) ending at " + what);
    return "";
  });
}

}  // namespace kiln::passes
