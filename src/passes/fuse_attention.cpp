// passes/fuse_attention.cpp — multi-head attention as PyTorch/HuggingFace export it becomes one
// kiln.Attention:
//
//   heads(x)  = Transpose(Reshape(x, [B, S, H, D]), perm)          (Q, V: 0,2,1,3; K: 0,2,3,1)
//   scores    = MatMul(heads(q) [* cq | / cq], heads(k) [* ck]) [/ c | * c] [Where(cond, ., fill)] [+ mask]
//   y         = Reshape(Transpose(MatMul(Softmax(scores), heads(v)), 0,2,1,3), [B, S, H*Dv])
//
// q, k, v are the projections [B, S, H*D]; the fused op reads the heads as strided views of them.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat heads(const std::string& x) {
  return op("Transpose", {op("Reshape", {any(x)}).as(x + "_reshape")}).as(x + "_t");
}

enum class WhereForm { kNone, kKeepWhereTrue, kFillWhereTrue };

// The scores may be masked by Where(cond, scores, fill) (GPT-2's causal mask) or
// Where(cond, fill, scores) (DistilBERT), with cond optionally Expand-ed to the scores' shape.
Pat attention_pattern(WhereForm where, bool expand_to_constant = false) {
  Pat q = maybe(op("Div", {maybe(op("Mul", {heads("q"), cst("q_scale")}).commute()), cst("q_div")}));
  Pat k = maybe(op("Mul", {heads("k"), cst("k_scale")}).commute());
  Pat scores = op("MatMul", {q, k}).as("qk");
  Pat scaled = maybe(op("Div", {maybe(op("Mul", {scores, cst("mul")}).commute()), cst("div")}));
  Pat cond = maybe(op("Expand", {any("cond"), expand_to_constant ? cst("expand_shape") : op("Shape", {op("MatMul").as("qk")})}));
  Pat masked = scaled;
  if (where == WhereForm::kKeepWhereTrue) masked = op("Where", {cond, scaled, cst("fill")}).inputs_last_first();
  if (where == WhereForm::kFillWhereTrue) masked = op("Where", {cond, cst("fill"), scaled}).inputs_last_first();
  masked = maybe(op("Add", {masked, any("mask")}).commute());
  Pat probs = op("Softmax", {masked}).as("softmax");
  Pat context = op("MatMul", {probs, heads("v")});
  return op("Reshape", {op("Transpose", {context}).as("out_t")});
}

bool has_perm(const ir::Node* n, std::vector<int64_t> p) { return n && n->attr_ints("perm") == p; }

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  return a.is_static() ? a.value == b.value : (!a.symbol.empty() && a.symbol == b.symbol);
}

// True when dim i of x is dim i of `from` by construction: x is `from`, or made from it (a few steps
// back) by ops that keep the leading dims — a MatMul by a 2-D matrix, a norm, an elementwise op whose
// other operands have a lower rank, a Split along a later axis (whose outputs share the dims).
// (Exports read the batch size once, from one tensor, and its dims are often unnamed by then: "?"
// cannot be compared.)
bool keeps_leading_dim(const ir::Value* x, const ir::Value* from, int i, int depth = 0) {
  if (x == from) return true;
  const ir::Node* p = x->producer;
  if (!p || depth > 4 || !x->type.shape.known || i >= x->type.shape.rank() - 1 || !p->has_input(0)) return false;
  const ir::Value* a = p->inputs[0];
  if (!a->type.shape.known || a->type.shape.rank() != x->type.shape.rank()) return false;
  // Split along another axis (GPT-2's fused QKV projection split in three): every output keeps its
  // input's dim i, so it shares it with its sibling outputs.
  if (p->domain.empty() && p->op_type == "Split") {
    int64_t axis = p->attr_int("axis", 0);
    if (axis < 0) axis += a->type.shape.rank();
    if (axis == i) return false;
    return from->producer == p || keeps_leading_dim(a, from, i, depth + 1);
  }
  const bool matmul = p->op_type == "MatMul" || (p->domain == "kiln" && (p->op_type == "FusedMatMul" || p->op_type == "F8MatMul"));
  if (matmul) {  // F8MatMul's B8 is [N, K]: 2-D as well
    const auto& b = p->inputs.size() > 1 && p->inputs[1] ? p->inputs[1]->type.shape : ir::SymShape();
    if (!b.known || b.rank() != 2) return false;
    return keeps_leading_dim(a, from, i, depth + 1);
  }
  const bool norm = (p->domain.empty() && p->op_type == "LayerNormalization") ||
                    (p->domain == "kiln" && p->op_type == "SkipLayerNorm" && p->inputs.size() > 1 && p->inputs[1] &&
                     p->inputs[1]->type.shape.known && p->inputs[1]->type.shape.rank() < a->type.shape.rank() - i);
  const bool elementwise = p->domain.empty() && (p->op_type == "Add" || p->op_type == "Mul" || p->op_type == "Sub" ||
                                                 p->op_type == "Div");
  if (elementwise) {
    for (size_t k = 1; k < p->inputs.size(); ++k) {
      const ir::Value* o = p->inputs[k];
      if (!o || !o->type.shape.known || o->type.shape.rank() >= a->type.shape.rank() - i) return false;
    }
    return keeps_leading_dim(a, from, i, depth + 1);
  }
  return norm && keeps_leading_dim(a, from, i, depth + 1);
}

// True when shape element e is certainly x's dim i: the same value, the same tensor dim (of x or of
// a tensor x keeps it from), or the same named symbol.
bool elem_is_dim(const ShapeElem& e, const ir::Value* x, int i) {
  const ir::Dim& d = x->type.shape.dims[i];
  if (!e.of) return d.is_static() && d.value == e.value;
  if (e.value == i && keeps_leading_dim(x, e.of, i)) return true;
  const auto& s = e.of->type.shape;
  return s.known && e.value < s.rank() && same_dim(s.dims[e.value], d);
}

// Reshape(x, shape) maps x [B, S, N] to [B, S, rest...] keeping B and S: shape[0] copies (0) or is
// B; shape[1] copies, is S, or is -1 after a copied/known B (then it is S, as rest multiplies to N).
bool keeps_batch_and_sequence(const ir::Node& reshape, const ir::Value* x, const std::vector<ShapeElem>& el,
                              int64_t rest, int64_t n) {
  if (reshape.attr_int("allowzero", 0) != 0 || el.size() < 3) return false;
  auto copies = [&](int i) { return (!el[i].of && el[i].value == 0) || elem_is_dim(el[i], x, i); };
  if (!copies(0)) return false;
  return copies(1) || (!el[1].of && el[1].value == -1 && rest == n);
}

// Checks Reshape(x) → [B, S, H, D] keeps x's first two dims; returns {H, D} or {0, 0}.
std::pair<int64_t, int64_t> head_split(const ir::Value* x, const ir::Node* reshape, std::string* why) {
  const auto& xs = x->type.shape;
  auto el = shape_value(reshape->inputs.size() > 1 ? reshape->inputs[1] : nullptr);
  if (!xs.known || xs.rank() != 3 || !xs.dims[2].is_static() || !el || el->size() != 4) {
    *why = "'" + x->name + "' is not [B, S, hidden] reshaped to [B, S, H, D]";
    return {0, 0};
  }
  ShapeElem h = (*el)[2], d = (*el)[3];
  // view(B, S, -1, D) (HuggingFace since transformers 5) or view(B, S, H, -1): the -1 is the hidden
  // size over the other, when dims 0 and 1 are kept (checked below; a Reshape has one -1 at most).
  const int64_t hidden = xs.dims[2].value;
  if (!h.of && !d.of && h.value == -1 && d.value > 0 && hidden % d.value == 0) h.value = hidden / d.value;
  if (!h.of && !d.of && d.value == -1 && h.value > 0 && hidden % h.value == 0) d.value = hidden / h.value;
  if (h.of || d.of || h.value <= 0 || d.value <= 0 || h.value * d.value != hidden) {
    *why = "head sizes of '" + x->name + "' are not static";
    return {0, 0};
  }
  if (!keeps_batch_and_sequence(*reshape, x, *el, h.value * d.value, xs.dims[2].value)) {
    *why = "the head reshape of '" + x->name + "' may not keep dims [B, S]";
    return {0, 0};
  }
  return {h.value, d.value};
}

}  // namespace

Expected<bool> fuse_attention(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-attention");
  const std::vector<Rule> rules = {
      {"multi-head attention", attention_pattern(WhereForm::kNone), 4},
      // Expand to a constant shape first: otherwise the Expand would be taken as the condition.
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kKeepWhereTrue, true), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kFillWhereTrue, true), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kKeepWhereTrue), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kFillWhereTrue), 4},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    if (!has_perm(m.node("q_t"), {0, 2, 1, 3}) || !has_perm(m.node("v_t"), {0, 2, 1, 3}) ||
        !has_perm(m.node("k_t"), {0, 2, 3, 1}) || !has_perm(m.node("out_t"), {0, 2, 1, 3}))
      return "head transposes are not (0,2,1,3) for Q, V, output and (0,2,3,1) for K";
    std::string why;
    auto [H, D] = head_split(m["q"], m.node("q_reshape"), &why);
    if (!H) return why;
    auto [Hk, Dk] = head_split(m["k"], m.node("k_reshape"), &why);
    if (!Hk) return why;
    auto [Hv, Dv] = head_split(m["v"], m.node("v_reshape"), &why);
    if (!Hv) return why;
    if (Hk != H || Hv != H || Dk != D) return "Q, K, V head counts or sizes differ";
    for (const char* x : {"q", "k", "v"})
      if (m[x]->type.dtype != DataType::kFloat32) return "not float32";
    const ir::Node* sm = m.node("softmax");
    const int64_t axis = sm->attr_int("axis", sm->opset < 13 ? 1 : -1);
    if (axis != -1 && axis != 3) return "Softmax is not over the keys";
    // The merge: Reshape(context [B, S, H, Dv]) → [B, S, H*Dv].
    auto out_el = shape_value(m.root()->inputs.size() > 1 ? m.root()->inputs[1] : nullptr);
    const ir::Value* merged = m.node("out_t")->outputs[0];
    if (!out_el || out_el->size() != 3 || (*out_el)[2].of)
      return "the output is not reshaped to [B, S, H*Dv]";
    // Its dims 0 and 1 are B and S: the context's own dims (copied), or the same as Q's.
    std::vector<ShapeElem> el = *out_el;
    auto is_q_dim = [&](int i) {
      const ShapeElem& e = el[i];
      return (!e.of && e.value == 0) || (e.of == merged && e.value == i) || elem_is_dim(e, m["q"], i);
    };
    // reshape(B, S, -1) (HuggingFace since transformers 5): the -1 is H*Dv once B and S are kept.
    if (el[2].value != H * Dv && !(el[2].value == -1 && is_q_dim(0) && is_q_dim(1)))
      return "the output is not reshaped to [B, S, H*Dv]";
    if (m.root()->attr_int("allowzero", 0) != 0 || !is_q_dim(0) ||
        !(is_q_dim(1) || (!el[1].of && el[1].value == -1)))
      return "the output reshape may not restore [B, S]";
    double scale = 1;
    if (m.has("q_div")) {
      auto v = scalar_value(m["q_div"]);
      if (!v || *v == 0) return "the Q divisor is not a non-zero scalar";
      scale /= *v;
    }
    for (const char* c : {"q_scale", "k_scale", "mul"}) {
      if (!m.has(c)) continue;
      auto v = scalar_value(m[c]);
      if (!v) return std::string(c) + " is not a scalar";
      scale *= *v;
    }
    if (m.has("div")) {
      auto v = scalar_value(m["div"]);
      if (!v || *v == 0) return "the divisor is not a non-zero scalar";
      scale /= *v;
    }
    std::vector<ir::Value*> ins = {m["q"], m["k"], m["v"]};
    if (m.has("mask")) {
      const ir::Value* mask = m["mask"];
      if (mask->type.dtype != DataType::kFloat32) return "the mask is not float32";
      // (an unknown rank is checked by the kernel: it broadcasts masks of rank <= 4 only)
      if (mask->type.shape.known && mask->type.shape.rank() > 4) return "the mask's rank is > 4";
      ins.push_back(m["mask"]);
    }
    std::optional<double> fill;
    bool fill_where_true = false;
    if (m.has("cond")) {
      const ir::Value* cond = m["cond"];
      if (cond->type.dtype != DataType::kBool) return "the Where condition is not bool";
      if (cond->type.shape.known && cond->type.shape.rank() > 4) return "the Where condition's rank is > 4";
      if (m.has("expand_shape")) {
        // Expand to a constant shape: harmless to skip only when it does not enlarge the scores.
        const auto qk = static_shape(m["qk"]);
        const auto to = constant_values(m["expand_shape"]);
        if (!qk || to.size() > qk->size()) return "the mask's Expand may enlarge the scores";
        for (size_t i = 0; i < to.size(); ++i) {
          const int64_t d = (*qk)[qk->size() - to.size() + i];
          if (to[i] != 1 && to[i] != d) return "the mask's Expand may enlarge the scores";
        }
      }
      fill = scalar_value(m["fill"]);
      if (!fill) return "the Where fill is not a scalar";
      const ir::Node* where = m.root();  // found below by walking the matched nodes
      for (const ir::Node* n : m.matched)
        if (n->op_type == "Where") where = n;
      fill_where_true = where->inputs[1] == m["fill"];
      if (ins.size() == 3) ins.push_back(nullptr);
      ins.push_back(m["cond"]);
    }
    const std::string what = m.node("qk")->describe() + " … " + m.root()->describe();
    if (std::string why = rw.unsupported_on_target("kiln", "Attention"); !why.empty()) return why;
    ir::Node* n = rw.replace(m, "Attention", "kiln", 1, ins);
    n->attrs["num_heads"].kind = ir::Attribute::Kind::kInt;
    n->attrs["num_heads"].i = H;
    n->attrs["scale"].kind = ir::Attribute::Kind::kFloat;
    n->attrs["scale"].f = static_cast<float>(scale);
    if (fill) {
      n->attrs["mask_fill"].kind = ir::Attribute::Kind::kFloat;
      n->attrs["mask_fill"].f = static_cast<float>(*fill);
      n->attrs["mask_fill_where_true"].kind = ir::Attribute::Kind::kInt;
      n->attrs["mask_fill_where_true"].i = fill_where_true ? 1 : 0;
    }
    rw.log("fused attention (" + std::to_string(H) + " heads of " + std::to_string(D) + ") " + what);
    return "";
  });
}

}  // namespace kiln::passes
