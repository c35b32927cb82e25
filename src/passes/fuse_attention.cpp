// passes/fuse_attention.cpp — multi-head attention as PyTorch/HuggingFace export it becomes one
// kiln.Attention:
//
//   heads(x)  = Transpose(Reshape(x, [B, S, H, D]), perm)          (Q, V: 0,2,1,3; K: 0,2,3,1)
//   scores    = MatMul(heads(q) [* cq | / cq], heads(k) [* ck]) [/ c | * c] [Where(cond, ., fill)] [+ mask]
//   y         = Reshape(Transpose(MatMul(Softmax(scores), heads(v)), 0,2,1,3), [B, S, H*Dv])
//
// q, k, v are the projections [B, S, H*D]; the fused op reads the heads as strided views of them.
//
// torch's nn.MultiheadAttention exports sequence-first 3-D heads (ViT):
//
//   heads(x)  = Transpose(Reshape(x, [S, B*H, D]), perm)           (Q, V: 1,0,2; K: 1,2,0)
//   y         = Reshape(Transpose(MatMul(Softmax(scores), heads(v)), 1,0,2), shape)
//
// with q, k, v [S, B, H*D]: they become kiln.Attention(q, k, v, sequence_first = 1) [S, B, H*Dv],
// which y reshapes as before (the context [S, B*H, Dv] has the same elements in the same order).
// torch 2.x makes the heads 4-D first (attention_pattern_4d): the same fusion.
//
// Then an attention whose Q, K and V are column blocks 0, 1, 2 of one projection, cut by a Split
// (GPT-2), three Slices (torch 1.x's nn.MultiheadAttention) or torch 2.x's head Gathers, reads the
// projection in place (packed_qkv = 1, batch- or sequence-first) and the cut's copies go.
//
// Swin's shifted-window blocks add their window mask to the scores viewed per image (`windowed`):
//
//   Reshape(Add(Reshape(scores [+ bias], [B/nW, nW, H, S, T]), window_mask), [B, H, S, T])
//
// (B = images·nW, window w of image n is batch entry n·nW + w); the bias (a constant [1, H, S, T])
// and the window mask (a constant [nW, 1, S, T] or [1, nW, 1, S, T]) become one constant additive
// mask [nW, H, S, T] that batch entry b reads at b % nW (mask_batch_period = nW).
//
// Decoder exports that rotate Q and K (rotary embeddings) hand the products 4-D heads, and models with
// grouped-query attention (Llama, Mistral, Qwen) repeat each K/V head for its group of query heads:
//
//   rep(x)    = Reshape(Expand(Unsqueeze(x [B, Hkv, T, D], 2), [B, Hkv, n, T, D]), [B, Hkv*n, T, D])
//   scores    = MatMul(q [B, H, S, D] [* cq], Transpose(rep(k) | k, 0,1,3,2) [* ck]) [* c | / c] [+ mask]
//   y         = Transpose(MatMul(Softmax(scores) [NaN-guarded], rep(v) | v), 0,2,1,3)       [B, S, H, Dv]
//
// becomes kiln.Attention(q, k, v[, mask], heads_first = 1) [B, S, H, Dv]: the kernels read the heads
// in place and each query head its group's K/V head (H / Hkv query heads per K/V head, from the
// tensors' dims), so neither the repeated K and V nor the transposed K are made.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

Pat heads(const std::string& x) {
  return op("Transpose", {op("Reshape", {any(x)}).as(x + "_reshape")}).as(x + "_t");
}

// The scores' optional scalar factors after QKᵀ: [* c] [/ c].
Pat scaled_scores(Pat scores) { return maybe(op("Div", {maybe(op("Mul", {scores, cst("mul")}).commute()), cst("div")})); }

// Softmax over the masked scores; with `nan_guard`, torch's SDPA export's guard of fully masked rows,
// Where(IsNaN(P), 0, P) (kiln.Attention's zero_nan_rows).
Pat softmax_probs(Pat masked, bool nan_guard) {
  Pat probs = op("Softmax", {masked}).as("softmax");
  if (!nan_guard) return probs;
  return op("Where", {op("IsNaN", {op("Softmax").as("softmax")}), cst("nan_fill"), probs}).inputs_last_first();
}

enum class WhereForm { kNone, kKeepWhereTrue, kFillWhereTrue };

// The window split and merge around Swin's shifted-window mask (see the top of the file; checked by
// window_mask).
Pat windowed(Pat scores) {
  Pat split = op("Reshape", {scores}).as("window_split");
  return op("Reshape", {op("Add", {split, any("window_mask")}).commute().as("window_add")}).as("window_merge");
}

// The scores may be masked by Where(cond, scores, fill) (GPT-2's causal mask) or
// Where(cond, fill, scores) (DistilBERT), with cond optionally Expand-ed to the scores' shape.
// torch's export of scaled_dot_product_attention (transformers' default attention since 4.36, in
// BERT, GPT-2, Llama...) guards the probabilities of fully masked rows: P' = Where(IsNaN(P), 0, P)
// (`nan_guard`), which kiln.Attention's zero_nan_rows does.
// `window`: the masked scores go through Swin's window mask (windowed).
Pat attention_pattern(WhereForm where, bool expand_to_constant = false, bool nan_guard = false, bool window = false) {
  Pat q = maybe(op("Div", {maybe(op("Mul", {heads("q"), cst("q_scale")}).commute()), cst("q_div")}));
  Pat k = maybe(op("Mul", {heads("k"), cst("k_scale")}).commute());
  Pat scores = op("MatMul", {q, k}).as("qk");
  Pat scaled = scaled_scores(scores);
  Pat cond = maybe(op("Expand", {any("cond"), expand_to_constant ? cst("expand_shape") : op("Shape", {op("MatMul").as("qk")})}));
  Pat masked = scaled;
  if (where == WhereForm::kKeepWhereTrue) masked = op("Where", {cond, scaled, cst("fill")}).inputs_last_first();
  if (where == WhereForm::kFillWhereTrue) masked = op("Where", {cond, cst("fill"), scaled}).inputs_last_first();
  masked = maybe(op("Add", {masked, any("mask")}).commute());
  if (window) masked = windowed(masked);
  Pat probs = softmax_probs(masked, nan_guard);
  Pat context = op("MatMul", {probs, heads("v")});
  return op("Reshape", {op("Transpose", {context}).as("out_t")});
}

// torch 2.x's export of nn.MultiheadAttention: sequence-first heads made 4-D before the products.
//   heads4(x) = Reshape(Transpose(Reshape(x, [S, B*H, D]), 1,0,2), [B, H, S, D])
//   scores    = MatMul(heads4(q) [* cq], Transpose(heads4(k), 0,1,3,2) [* ck])
//   y         = Reshape(Transpose(MatMul(Softmax(scores), heads4(v)), 2,0,1,3), [S*B, H*Dv])
Pat heads4(const std::string& x) {
  return op("Reshape", {op("Transpose", {op("Reshape", {any(x)}).as(x + "_reshape")}).as(x + "_t")}).as(x + "_r4");
}

Pat attention_pattern_4d() {
  Pat q = maybe(op("Mul", {heads4("q"), cst("q_scale")}).commute());
  Pat k = maybe(op("Mul", {op("Transpose", {heads4("k")}).as("k_t4"), cst("k_scale")}).commute());
  Pat scores = op("MatMul", {q, k}).as("qk");
  Pat scaled = scaled_scores(scores);
  Pat probs = op("Softmax", {scaled}).as("softmax");
  Pat context = op("MatMul", {probs, heads4("v")});
  return op("Reshape", {op("Transpose", {context}).as("out_t")});
}

// timm's attention (ViT, DeiT, Swin, ... with F.scaled_dot_product_attention or its own products):
// one projection qkv [B, N, 3*H*D] cut into heads by
//   heads(qkv) = Transpose(Reshape(qkv, [B, N, 3, H, D]), 2,0,3,1,4)        [3, B, H, N, D]
//   q, k, v    = Squeeze(Split(heads(qkv), axis 0), 0)                      [B, H, N, D] each
//   scores     = MatMul(q [* cq], Transpose(k, 0,1,3,2) [* ck]) [* c | / c] [+ bias or mask]
//   y          = Reshape(Transpose(MatMul(Softmax(scores), v), 0,2,1,3), [B, N, H*D])
// becomes kiln.Attention(qkv, qkv, qkv[, mask], packed_qkv = 1): Q, K and V are the three column
// blocks of qkv, read in place (Swin's relative position bias is the additive mask, [H, N, N]).
Pat packed_part(const std::string& x) {
  Pat qkv_heads = op("Transpose", {op("Reshape", {any("qkv")}).as("qkv_reshape")}).as("qkv_t");
  return op("Squeeze", {op("Split", {qkv_heads}).as("split_" + x).of_any_output()}).as(x + "_sq");
}

Pat attention_pattern_packed(bool window = false) {
  Pat q = maybe(op("Mul", {packed_part("q"), cst("q_scale")}).commute());
  Pat k = maybe(op("Mul", {op("Transpose", {packed_part("k")}).as("k_tr"), cst("k_scale")}).commute());
  Pat scores = op("MatMul", {q, k}).as("qk");
  Pat scaled = scaled_scores(scores);
  Pat masked = maybe(op("Add", {scaled, any("mask")}).commute());
  if (window) masked = windowed(masked);
  Pat probs = op("Softmax", {masked}).as("softmax");
  Pat context = op("MatMul", {probs, packed_part("v")});
  return op("Reshape", {op("Transpose", {context}).as("out_t")});
}

// Heads-first operands (see the top of the file): K or V as given, or repeated for grouped-query
// attention by rep().
Pat kv_heads(const std::string& x, bool repeat) {
  if (!repeat) return any(x + "4");
  Pat unsq = op("Unsqueeze", {any(x + "4")}).as(x + "_unsq");
  return op("Reshape", {op("Expand", {unsq}).as(x + "_expand")}).as(x + "_rep");
}

Pat attention_pattern_heads_first(bool repeat, bool nan_guard) {
  Pat q = maybe(op("Div", {maybe(op("Mul", {any("q4"), cst("q_scale")}).commute()), cst("q_div")}));
  Pat k = maybe(op("Mul", {op("Transpose", {kv_heads("k", repeat)}).as("k_t4"), cst("k_scale")}).commute());
  Pat scores = op("MatMul", {q, k}).as("qk");
  Pat scaled = scaled_scores(scores);
  Pat masked = maybe(op("Add", {scaled, any("mask")}).commute());
  Pat probs = softmax_probs(masked, nan_guard);
  Pat context = op("MatMul", {probs, kv_heads("v", repeat)});
  return op("Transpose", {context}).as("out_t");
}

bool has_perm(const ir::Node* n, std::vector<int64_t> p) { return n && n->attr_ints("perm") == p; }

// True when dim i of x is dim i of `from` by construction: x is `from`, or made from it (a few steps
// back) by ops that keep the leading dims — a MatMul by a 2-D matrix (kiln.QMatMul too), a norm,
// QuantizeLinear/DequantizeLinear, an elementwise op whose
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
  // Slice along later axes (a fused QKV projection sliced in three): dim i is the input's.
  if (p->domain.empty() && p->op_type == "Slice") {
    const int64_t rank = a->type.shape.rank();
    std::vector<int64_t> axes;
    if (p->has_input(3)) {
      const std::vector<double> av = constant_values(p->inputs[3]);
      if (av.empty()) return false;
      for (double d : av) axes.push_back(saturating_int64(d));
    } else {
      for (int64_t k = 0; k < rank; ++k) axes.push_back(k);
    }
    for (int64_t ax : axes)
      if ((ax < 0 ? ax + rank : ax) == i) return false;
    return keeps_leading_dim(a, from, i, depth + 1);
  }
  // QuantizeLinear/DequantizeLinear keep every dim (an INT8 engine's activations between the norm and
  // the projections).
  if (p->domain.empty() && (p->op_type == "QuantizeLinear" || p->op_type == "DequantizeLinear"))
    return keeps_leading_dim(a, from, i, depth + 1);
  const bool matmul = p->op_type == "MatMul" ||
                      (p->domain == "kiln" && (p->op_type == "FusedMatMul" || p->op_type == "F8MatMul" || p->op_type == "QMatMul"));
  if (matmul) {  // F8MatMul's B8 is [N, K]: 2-D as well; QMatMul's B is input 3, [K, N]
    const int bi = p->op_type == "QMatMul" ? 3 : 1;
    const auto& b = static_cast<int>(p->inputs.size()) > bi && p->inputs[bi] ? p->inputs[bi]->type.shape : ir::SymShape();
    if (!b.known || b.rank() != 2) return false;
    return keeps_leading_dim(a, from, i, depth + 1);
  }
  const bool norm = (p->domain.empty() && p->op_type == "LayerNormalization") ||
                    (p->domain == "kiln" && p->op_type == "SkipLayerNorm" && p->inputs.size() > 1 && p->inputs[1] &&
                     p->inputs[1]->type.shape.known && p->inputs[1]->type.shape.rank() < a->type.shape.rank() - i);
  const bool elementwise = p->domain.empty() && (p->op_type == "Add" || p->op_type == "Mul" || p->op_type == "Sub" ||
                                                 p->op_type == "Div");
  if (elementwise) {
    // The operand of x's rank (the bias of Add(bias, MatMul(...)) may come first); the others lower.
    const ir::Value* full = nullptr;
    for (const ir::Value* o : p->inputs) {
      if (!o || !o->type.shape.known) return false;
      if (o->type.shape.rank() == x->type.shape.rank()) {
        if (full) return false;
        full = o;
      } else if (o->type.shape.rank() >= x->type.shape.rank() - i) {
        return false;
      }
    }
    return full && keeps_leading_dim(full, from, i, depth + 1);
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
// B; shape[1] copies, is S, or is -1 after a copied/known B (then it is S, as rest multiplies to N);
// or shape[0] is -1 and shape[1] is S (then it is B, as rest multiplies to N).
bool keeps_batch_and_sequence(const ir::Node& reshape, const ir::Value* x, const std::vector<ShapeElem>& el,
                              int64_t rest, int64_t n) {
  if (reshape.attr_int("allowzero", 0) != 0 || el.size() < 3) return false;
  auto copies = [&](int i) { return (!el[i].of && el[i].value == 0) || elem_is_dim(el[i], x, i); };
  // [-1, S, rest...] (the shape folded once S was known): the -1 is B when rest multiplies to N.
  if (!el[0].of && el[0].value == -1) return copies(1) && rest == n;
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

// The product of the scores' scalar factors (Q's divisor and multiplier, K's multiplier, the scores'
// multiplier and divisor); nullopt when one is not a scalar (or a divisor is zero).
std::optional<double> attention_scale(Match& m) {
  double scale = 1;
  for (const char* c : {"q_div", "div"})
    if (m.has(c)) {
      auto v = scalar_value(m[c]);
      if (!v || *v == 0) return std::nullopt;
      scale /= *v;
    }
  for (const char* c : {"q_scale", "k_scale", "mul"})
    if (m.has(c)) {
      auto v = scalar_value(m[c]);
      if (!v) return std::nullopt;
      scale *= *v;
    }
  return scale;
}

// Checks Reshape(x [S, B, E]) → [S, B*H, D] (sequence-first heads): dim 0 kept, D static; the middle
// is then B*H by the element count. Returns {H, D} or {0, 0}.
std::pair<int64_t, int64_t> head_split_sequence_first(const ir::Value* x, const ir::Node* reshape, std::string* why) {
  const auto& xs = x->type.shape;
  const auto el = shape_value_partial(reshape->inputs.size() > 1 ? reshape->inputs[1] : nullptr);
  if (!xs.known || xs.rank() != 3 || !xs.dims[2].is_static() || !el || el->size() != 3 ||
      reshape->attr_int("allowzero", 0) != 0) {
    *why = "'" + x->name + "' is not [S, B, hidden] reshaped to [S, B*H, D]";
    return {0, 0};
  }
  const auto& e0 = (*el)[0];
  const auto& e2 = (*el)[2];
  const int64_t hidden = xs.dims[2].value;
  if (!e2 || e2->of || e2->value <= 0 || hidden % e2->value != 0) {
    *why = "the head size of '" + x->name + "' is not static";
    return {0, 0};
  }
  if (!e0 || !((!e0->of && e0->value == 0) || elem_is_dim(*e0, x, 0))) {
    *why = "the head reshape of '" + x->name + "' may not keep the sequence dim";
    return {0, 0};
  }
  return {hidden / e2->value, e2->value};
}

// True when a and b (sequence-first [S, B, E]) certainly share dim 1: parts of one projection, cut
// by Slices of one tensor along its last axis (torch 1.x), or by Gathers along axis 0 of one
// [3, S, B, E] tensor (torch 2.x), whose outputs have the same shape.
bool same_batch_siblings(const ir::Value* a, const ir::Value* b) {
  const ir::Node* pa = a->producer;
  const ir::Node* pb = b->producer;
  if (!pa || !pb || !pa->domain.empty() || pa->op_type != pb->op_type || pa->inputs.empty() || pb->inputs.empty() ||
      pa->inputs[0] != pb->inputs[0])
    return false;
  const ir::Value* src = pa->inputs[0];
  if (pa->op_type == "Gather")
    return pa->attr_int("axis", 0) == 0 && pb->attr_int("axis", 0) == 0 && scalar_value(pa->inputs[1]).has_value() &&
           scalar_value(pb->inputs[1]).has_value();
  if (pa->op_type == "Slice") return keeps_leading_dim(a, src, 1) && keeps_leading_dim(b, src, 1);
  return false;
}

// Q's, K's and V's head splits by `split` (head_split or head_split_sequence_first): one head count
// and one key head size for the three. "" when they agree, else why not.
struct Heads {
  int64_t h = 0, d = 0, dv = 0;
};
using HeadSplit = std::pair<int64_t, int64_t> (*)(const ir::Value*, const ir::Node*, std::string*);
std::string split_heads(Match& m, HeadSplit split, Heads* out) {
  std::string why;
  std::pair<int64_t, int64_t> hd[3];
  const char* names[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    hd[i] = split(m[names[i]], m.node(std::string(names[i]) + "_reshape"), &why);
    if (!hd[i].first) return why;
  }
  if (hd[1].first != hd[0].first || hd[2].first != hd[0].first || hd[1].second != hd[0].second)
    return "Q, K, V head counts or sizes differ";
  *out = {hd[0].first, hd[0].second, hd[2].second};
  return "";
}

// Replaces the match by kiln.Attention(ins) with H heads and the scores' scale.
ir::Node* replace_by_attention(Rewriter& rw, Match& m, const std::vector<ir::Value*>& ins, int64_t H, double scale) {
  ir::Node* n = rw.replace(m, "Attention", "kiln", 1, ins);
  set_int(n, "num_heads", H);
  set_float(n, "scale", scale);
  return n;
}

// Reshape(context [B, S, H, Dv] from out_t) → [B, S, H*Dv] at the match's root, its dims 0 and 1 being
// Q's (q: a value whose dims 0 and 1 are B and S). "" when so, else why not.
std::string merges_heads(Match& m, const ir::Value* q, int64_t H, int64_t Dv) {
  auto out_el = shape_value(m.root()->inputs.size() > 1 ? m.root()->inputs[1] : nullptr);
  const ir::Value* merged = m.node("out_t")->outputs[0];
  if (!out_el || out_el->size() != 3 || (*out_el)[2].of) return "the output is not reshaped to [B, S, H*Dv]";
  // Its dims 0 and 1 are B and S: the context's own dims (copied), or the same as Q's.
  const std::vector<ShapeElem>& el = *out_el;
  auto is_q_dim = [&](int i) {
    const ShapeElem& e = el[i];
    return (!e.of && e.value == 0) || (e.of == merged && e.value == i) || elem_is_dim(e, q, i);
  };
  // reshape(B, S, -1) (HuggingFace since transformers 5): the -1 is H*Dv once B and S are kept.
  if (el[2].value != H * Dv && !(el[2].value == -1 && is_q_dim(0) && is_q_dim(1)))
    return "the output is not reshaped to [B, S, H*Dv]";
  if (m.root()->attr_int("allowzero", 0) != 0) return "the output reshape may not restore [B, S]";
  // reshape(-1, S, H*Dv) (the shape folded once S was known): the -1 is B.
  if (!el[0].of && el[0].value == -1 && is_q_dim(1) && el[2].value == H * Dv) return "";
  if (!is_q_dim(0) || !(is_q_dim(1) || (!el[1].of && el[1].value == -1))) return "the output reshape may not restore [B, S]";
  return "";
}

// The match's Softmax is over the keys: the last axis of scores of rank `rank` ("" when so).
std::string softmax_over_keys(Match& m, int64_t rank) {
  const ir::Node* sm = m.node("softmax");
  const int64_t axis = sm->attr_int("axis", sm->opset < 13 ? 1 : -1);
  return axis == -1 || axis == rank - 1 ? "" : "Softmax is not over the keys";
}

// The NaN guard, where the match has one, fills 0 ("" when so, or when there is none).
std::string nan_guard_fills_zero(Match& m) {
  if (!m.has("nan_fill")) return "";
  const auto z = scalar_value(m["nan_fill"]);
  return z && *z == 0 ? "" : "the softmax's NaN guard does not fill 0";
}

// The additive mask (or bias) of a match, when it has one: float32 and of rank <= 4 (broadcast to
// [B, H, S, T] by the kernels). "" when usable, else why not.
std::string usable_mask(Match& m) {
  if (!m.has("mask")) return "";
  const ir::Value* mask = m["mask"];
  if (mask->type.dtype != DataType::kFloat32) return "the mask is not float32";
  // (an unknown rank is checked by the kernel: it broadcasts masks of rank <= 4 only)
  if (mask->type.shape.known && mask->type.shape.rank() > 4) return "the mask's rank is > 4";
  return "";
}

// The additive mask input a match's kiln.Attention gets: the match's own mask (or none), or for the
// shifted-window form the bias and the window mask folded into one constant read with a batch period.
struct AdditiveMask {
  std::optional<Tensor> folded;  // the shifted-window form's mask [P, H|1, S|1, T|1], float32
  int64_t period = 0;            // its mask_batch_period (0 when the window mask is one for all windows)
};

// A constant's shape right-aligned to `rank` dims (1s in front); nullopt when it has more.
std::optional<Shape> aligned_shape(const ir::Value* c, size_t rank) {
  Shape s = c->constant->shape();
  if (s.size() > rank) return std::nullopt;
  s.insert(s.begin(), rank - s.size(), 1);
  return s;
}

// True when every dim of `s` is 1 or the dim of `full` at the same place.
bool broadcasts_to(const Shape& s, const Shape& full) {
  for (size_t i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != full[i]) return false;
  return true;
}

// The shifted-window form (windowed): checks that the reshapes are exactly the window split
// [B/nW, nW, H, S, T] and merge [B, H, S, T] of the scores [B, H, S, T], and that the window mask
// (constant, [1, nW|1, H|1, S|1, T|1] right-aligned) and the bias (the match's "mask", constant
// [1, H|1, S|1, T|1] right-aligned, if any) are float32 constants; then folds them into out->folded
// (computed in double, rounded once). "" when so, else why not.
std::string window_mask(Match& m, AdditiveMask* out) {
  const ir::Node* split = m.node("window_split");
  const ir::Node* merge = m.node("window_merge");
  const ir::SymShape& sh = split->inputs[0]->type.shape;
  if (!sh.known || sh.rank() != 4 || !sh.dims[1].is_static() || !sh.dims[2].is_static() || !sh.dims[3].is_static())
    return "the windowed scores are not [B, H, S, T] with static H, S, T";
  const int64_t H = sh.dims[1].value, S = sh.dims[2].value, T = sh.dims[3].value;
  const std::optional<int64_t> B = sh.dims[0].is_static() ? std::optional<int64_t>(sh.dims[0].value) : std::nullopt;
  if (split->attr_int("allowzero", 0) != 0 || merge->attr_int("allowzero", 0) != 0) return "a window reshape has allowzero";
  // All elements known values: [-1 or B/nW, nW, H, S, T] and [-1 or B, H, S, T].
  auto values = [](const ir::Node* r) -> std::optional<std::vector<int64_t>> {
    const auto el = shape_value(r->inputs.size() > 1 ? r->inputs[1] : nullptr);
    if (!el) return std::nullopt;
    std::vector<int64_t> v;
    for (const ShapeElem& e : *el) {
      if (e.of) return std::nullopt;
      v.push_back(e.value);
    }
    return v;
  };
  const auto sv = values(split), mv = values(merge);
  if (!sv || sv->size() != 5 || (*sv)[1] < 1 || (*sv)[2] != H || (*sv)[3] != S || (*sv)[4] != T)
    return "the scores are not reshaped to [B/nW, nW, H, S, T]";
  const int64_t nW = (*sv)[1];
  if (B && *B % nW != 0) return "the batch is not a multiple of the " + std::to_string(nW) + " windows";
  if ((*sv)[0] != -1 && !(B && (*sv)[0] == *B / nW)) return "the scores are not reshaped to [B/nW, nW, H, S, T]";
  if (!mv || mv->size() != 4 || (*mv)[1] != H || (*mv)[2] != S || (*mv)[3] != T || ((*mv)[0] != -1 && !(B && (*mv)[0] == *B)))
    return "the windowed scores are not reshaped back to [B, H, S, T]";
  const ir::Value* wm = m["window_mask"];
  if (!wm->constant) return "the window mask is not constant";
  if (wm->type.dtype != DataType::kFloat32) return "the window mask is not float32";
  const auto w5 = aligned_shape(wm, 5);
  if (!w5 || (*w5)[0] != 1 || !broadcasts_to(*w5, {1, nW, H, S, T}))
    return "the window mask " + shape_to_string(wm->constant->shape()) + " is not [nW, 1, S, T] (or broadcast to [1, nW, H, S, T])";
  Shape b4 = {1, 1, 1, 1};
  std::vector<double> bias = {0.0};
  if (m.has("mask")) {
    const ir::Value* b = m["mask"];
    if (!b->constant) return "the bias added before the window mask is not constant";
    if (b->type.dtype != DataType::kFloat32) return "the bias added before the window mask is not float32";
    const auto s4 = aligned_shape(b, 4);
    if (!s4 || (*s4)[0] != 1 || !broadcasts_to(*s4, {1, H, S, T}))
      return "the bias " + shape_to_string(b->constant->shape()) + " is not [1, H|1, S|1, T|1]";
    b4 = *s4;
    bias = constant_values(b);
  }
  const std::vector<double> wv = constant_values(wm);
  // The folded mask [P, H', S', T'] (each dim the larger of the two addends'): mask[p, h, s, t] =
  // bias[0, h, s, t] + window_mask[0, p, h, s, t], with broadcast dims read at index 0.
  const Shape w4(w5->begin() + 1, w5->end());
  const Shape f = {w4[0], std::max(w4[1], b4[1]), std::max(w4[2], b4[2]), std::max(w4[3], b4[3])};
  std::vector<double> folded(static_cast<size_t>(f[0] * f[1] * f[2] * f[3]));
  auto at = [](const Shape& s, int64_t p, int64_t h, int64_t i, int64_t t) {
    return (((s[0] == 1 ? 0 : p) * s[1] + (s[1] == 1 ? 0 : h)) * s[2] + (s[2] == 1 ? 0 : i)) * s[3] + (s[3] == 1 ? 0 : t);
  };
  size_t o = 0;
  for (int64_t p = 0; p < f[0]; ++p)
    for (int64_t h = 0; h < f[1]; ++h)
      for (int64_t i = 0; i < f[2]; ++i)
        for (int64_t t = 0; t < f[3]; ++t) folded[o++] = wv[at(w4, p, h, i, t)] + bias[at(b4, 0, h, i, t)];
  out->folded = real_tensor(DataType::kFloat32, f, folded);
  out->period = f[0] > 1 ? f[0] : 0;
  return "";
}

// The checks of a match's additive mask: usable_mask, or window_mask for the shifted-window form.
std::string check_additive_mask(Match& m, AdditiveMask* out) {
  return m.node("window_add") ? window_mask(m, out) : usable_mask(m);
}

// The mask input for the fused op (nullptr when none): m's own, or the folded constant, added to the
// graph now (call it once the rewrite is certain).
ir::Value* mask_input(Rewriter& rw, Match& m, const AdditiveMask& am) {
  if (am.folded) return rw.constant(m.node("window_add")->name + "_with_bias", *am.folded);
  return m.has("mask") ? m["mask"] : nullptr;
}

// Sets the fused node's mask_batch_period; says what was folded ("" for none), for the log.
std::string note_window_mask(ir::Node* n, const AdditiveMask& am) {
  if (!am.folded) return "";
  if (am.period) set_int(n, "mask_batch_period", am.period);
  return std::string(", the shifted-window mask") + (am.period ? " of " + std::to_string(am.period) + " windows" : "") +
         " folded with the bias into " + shape_to_string(am.folded->shape());
}

// Integers that opset 13 moved from attribute `attr` to input 1 (Squeeze's axes, Split's sizes): the
// input's constant values when it is given, else the attribute's (empty when absent); nullopt when the
// input is computed.
std::optional<std::vector<int64_t>> input_1_or_attr_ints(const ir::Node& n, const char* attr) {
  if (!n.has_input(1)) return n.attr_ints(attr);
  std::vector<int64_t> ints;
  const std::vector<double> c = constant_values(n.inputs[1]);
  if (c.empty()) return std::nullopt;
  for (double d : c) ints.push_back(saturating_int64(d));
  return ints;
}

// The axes of a Squeeze/Unsqueeze, or nullopt when computed.
std::optional<std::vector<int64_t>> squeeze_axes(const ir::Node& n) { return input_1_or_attr_ints(n, "axes"); }

// The sizes of a Split's outputs, empty when it names none (equal parts: opset 18's num_outputs, or
// the outputs' count), nullopt when computed.
std::optional<std::vector<int64_t>> split_sizes(const ir::Node& n) { return input_1_or_attr_ints(n, "split"); }

// The packed form (attention_pattern_packed): one Split of one head transpose of one reshape of qkv
// into [B, N, 3, H, D], its outputs 0, 1, 2 squeezed to Q, K, V. "" when rewritten, else why not.
std::string fuse_packed(Rewriter& rw, Match& m) {
  const ir::Node* split = m.node("split_q");
  if (m.node("split_k") != split || m.node("split_v") != split) return "Q, K and V are not cut from one Split";
  if (split->attr_int("axis", 0) != 0 || split->outputs.size() != 3) return "the Split is not in three along axis 0";
  const char* parts[3] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    const ir::Node* sq = m.node(std::string(parts[i]) + "_sq");
    if (sq->inputs[0] != split->outputs[i]) return "Q, K, V are not the Split's outputs 0, 1, 2 in order";
    if (squeeze_axes(*sq) != std::vector<int64_t>{0}) return "a head Squeeze is not of axis 0";
  }
  // Equal parts: no sizes (opset 18's num_outputs 3, or the outputs' count), or sizes 1, 1, 1.
  const auto sizes = split_sizes(*split);
  if (!sizes || (!sizes->empty() && *sizes != std::vector<int64_t>{1, 1, 1})) return "the Split's sizes are not 1, 1, 1";
  if (!has_perm(m.node("qkv_t"), {2, 0, 3, 1, 4}) || !has_perm(m.node("k_tr"), {0, 1, 3, 2}) ||
      !has_perm(m.node("out_t"), {0, 2, 1, 3}))
    return "head transposes are not (2,0,3,1,4) for QKV, (0,1,3,2) for K and (0,2,1,3) for the output";
  const ir::Value* qkv = m["qkv"];
  if (qkv->type.dtype != DataType::kFloat32) return "not float32";
  const auto& xs = qkv->type.shape;
  const ir::Node* reshape = m.node("qkv_reshape");
  const auto el = shape_value(reshape->inputs.size() > 1 ? reshape->inputs[1] : nullptr);
  if (!xs.known || xs.rank() != 3 || !xs.dims[2].is_static() || !el || el->size() != 5)
    return "'" + qkv->name + "' is not [B, N, 3*H*D] reshaped to [B, N, 3, H, D]";
  const int64_t hidden = xs.dims[2].value;
  ShapeElem three = (*el)[2], h = (*el)[3], d = (*el)[4];
  if (three.of || h.of || d.of) return "the head sizes of '" + qkv->name + "' are not static";
  if (h.value == -1 && three.value == 3 && d.value > 0 && hidden % (3 * d.value) == 0) h.value = hidden / (3 * d.value);
  if (d.value == -1 && three.value == 3 && h.value > 0 && hidden % (3 * h.value) == 0) d.value = hidden / (3 * h.value);
  if (three.value != 3 || h.value <= 0 || d.value <= 0 || 3 * h.value * d.value != hidden)
    return "'" + qkv->name + "' is not reshaped to [B, N, 3, H, D]";
  if (!keeps_batch_and_sequence(*reshape, qkv, *el, 3 * h.value * d.value, hidden))
    return "the head reshape of '" + qkv->name + "' may not keep dims [B, N]";
  const int64_t H = h.value, D = d.value;
  if (std::string why = softmax_over_keys(m, 4); !why.empty()) return why;
  if (std::string why = merges_heads(m, qkv, H, D); !why.empty()) return why;
  const auto scale = attention_scale(m);
  if (!scale) return "a scale is not a non-zero scalar";
  AdditiveMask am;
  if (std::string why = check_additive_mask(m, &am); !why.empty()) return why;
  const std::string what = m.node("qk")->describe() + " … " + m.root()->describe();
  if (std::string why = rw.unsupported_on_target("kiln", "Attention"); !why.empty()) return why;
  std::vector<ir::Value*> ins = {m["qkv"], m["qkv"], m["qkv"]};
  if (ir::Value* mask = mask_input(rw, m, am)) ins.push_back(mask);
  ir::Node* n = replace_by_attention(rw, m, ins, H, *scale);
  set_int(n, "packed_qkv", 1);
  const std::string folded = note_window_mask(n, am);
  rw.log("fused packed-QKV attention (" + std::to_string(H) + " heads of " + std::to_string(D) + ") " + what + folded);
  return "";
}

// The sequence-first form (see the top of the file): kiln.Attention(q, k, v, sequence_first = 1),
// reshaped by the match's own output Reshape; the scores have rank `scores_rank` (3, or 4 for
// torch 2.x's heads). "" when rewritten, else why not.
std::string fuse_sequence_first(Rewriter& rw, Match& m, int64_t scores_rank) {
  for (const char* x : {"q", "k", "v"})
    if (m[x]->type.dtype != DataType::kFloat32) return "not float32";
  if (std::string why = softmax_over_keys(m, scores_rank); !why.empty()) return why;
  const auto scale = attention_scale(m);
  if (!scale) return "a scale is not a non-zero scalar";
  Heads hs;
  if (std::string why = split_heads(m, head_split_sequence_first, &hs); !why.empty()) return why;
  const int64_t H = hs.h, D = hs.d, Dv = hs.dv;
  // Masks of this form are [B*H, S, T], not the fused op's [B, H, S, T]: left unfused.
  if (m.has("mask") || m.has("cond")) return "a masked sequence-first attention";
  // The batch dims of K and V must be Q's: the same dim, or parts of one projection.
  for (const char* x : {"k", "v"})
    if (!same_dim(m[x]->type.shape.dims[1], m["q"]->type.shape.dims[1]) && !same_batch_siblings(m["q"], m[x]))
      return "the batch dims of Q, K and V may differ";
  ir::Node* root = m.root();
  const auto out_el = shape_value_partial(root->inputs.size() > 1 ? root->inputs[1] : nullptr);
  if (!out_el || out_el->size() != 2 || !(*out_el)[1] || (*out_el)[1]->of || (*out_el)[1]->value != H * Dv ||
      root->attr_int("allowzero", 0) != 0)
    return "the output is not reshaped to [S*B, H*Dv]";
  if (std::string w = rw.unsupported_on_target("kiln", "Attention"); !w.empty()) return w;
  ir::Graph& g = rw.graph();
  const ir::SymShape& qs = m["q"]->type.shape;
  ir::Value* y = g.new_value(root->outputs[0]->name + "_attention",
                             ir::Type::tensor(m["q"]->type.dtype, ir::SymShape({qs.dims[0], qs.dims[1], ir::Dim(H * Dv)})));
  ir::Node* att = g.add_node("Attention", "kiln", {m["q"], m["k"], m["v"]}, {y}, root->name + "_attention");
  att->opset = 1;
  set_int(att, "num_heads", H);
  set_float(att, "scale", *scale);
  set_int(att, "sequence_first", 1);
  const std::string what = m.node("qk")->describe() + " … " + root->describe();
  rw.replace(m, "Reshape", "", root->opset, {y, root->inputs[1]});
  rw.log("fused sequence-first attention (" + std::to_string(H) + " heads of " + std::to_string(D) + ") " + what);
  return "";
}

// The start and end of a Slice of x along its last axis with step 1 (constants; ends clamped to
// the dim), or nullopt.
std::optional<std::pair<int64_t, int64_t>> last_axis_cut(const ir::Node& s, const ir::Value* x, int64_t dim) {
  if (!s.domain.empty() || s.op_type != "Slice" || s.inputs.size() < 4 || s.inputs[0] != x || !s.has_input(1) ||
      !s.has_input(2) || !s.has_input(3))
    return std::nullopt;
  const int64_t rank = x->type.shape.rank();
  const std::vector<double> st = constant_values(s.inputs[1]), en = constant_values(s.inputs[2]),
                            ax = constant_values(s.inputs[3]);
  if (st.size() != 1 || en.size() != 1 || ax.size() != 1) return std::nullopt;
  if (saturating_int64(ax[0]) != rank - 1 && saturating_int64(ax[0]) != -1) return std::nullopt;
  if (s.has_input(4) && constant_values(s.inputs[4]) != std::vector<double>{1}) return std::nullopt;
  int64_t b = saturating_int64(st[0]), e = saturating_int64(en[0]);
  if (b < 0 || e < 0) return std::nullopt;  // from the end: not how the exports cut
  return std::make_pair(std::min(b, dim), std::min(e, dim));
}

// torch 2.x's nn.MultiheadAttention (_in_projection_packed): q, k, v are Gathers 0, 1, 2 along axis 0 of
//   Squeeze(Transpose(Unsqueeze(Reshape(x [S, B, 3*E], [S, B, 3, E]), 0), 3,1,2,0,4), 3)   [3, S, B, E]
// so part i is x's column block i. Returns x, or null.
ir::Value* gathered_projection(const ir::Value* const (&parts)[3]) {
  const ir::Value* t = parts[0]->producer->inputs[0];
  for (int i = 0; i < 3; ++i) {
    const ir::Node* g = parts[i]->producer;
    if (!g->domain.empty() || g->op_type != "Gather" || g->inputs.size() != 2 || g->inputs[0] != t || !g->has_input(1) ||
        g->attr_int("axis", 0) != 0)
      return nullptr;
    const ir::SymShape& is = g->inputs[1]->type.shape;
    if (!is.known || is.rank() != 0 || constant_values(g->inputs[1]) != std::vector<double>{static_cast<double>(i)})
      return nullptr;
  }
  const ir::Node* sq = t->producer;
  if (!sq || !sq->domain.empty() || sq->op_type != "Squeeze" || squeeze_axes(*sq) != std::vector<int64_t>{3}) return nullptr;
  const ir::Node* tr = sq->inputs[0]->producer;
  if (!tr || !tr->domain.empty() || tr->op_type != "Transpose" || !has_perm(tr, {3, 1, 2, 0, 4})) return nullptr;
  const ir::Node* un = tr->inputs[0]->producer;
  if (!un || !un->domain.empty() || un->op_type != "Unsqueeze" || squeeze_axes(*un) != std::vector<int64_t>{0}) return nullptr;
  const ir::Node* re = un->inputs[0]->producer;
  if (!re || !re->domain.empty() || re->op_type != "Reshape" || !re->has_input(0)) return nullptr;
  ir::Value* x = re->inputs[0];
  const ir::SymShape& xs = x->type.shape;
  if (!xs.known || xs.rank() != 3 || !xs.dims[2].is_static() || xs.dims[2].value % 3) return nullptr;
  const int64_t e = xs.dims[2].value / 3;
  const auto el = shape_value(re->inputs.size() > 1 ? re->inputs[1] : nullptr);
  if (!el || el->size() != 4 || (*el)[2].of || (*el)[2].value != 3 || (*el)[3].of || ((*el)[3].value != e && (*el)[3].value != -1))
    return nullptr;
  if (!keeps_batch_and_sequence(*re, x, *el, 3 * e, 3 * e)) return nullptr;
  if (parts[0]->type.dtype != x->type.dtype) return nullptr;
  return x;
}

// The projection [B, S, 3*E] (or sequence-first) that q, k, v are cut from, as its column blocks 0,
// 1 and 2 in order, or null: the outputs 0, 1, 2 of one Split in three equal parts along the last
// axis (GPT-2), three Slices of one tensor along its last axis (torch 1.x's nn.MultiheadAttention), or
// torch 2.x's head Gathers (gathered_projection).
// An attention then reads Q, K and V in place (packed_qkv = 1) and the cut's copies go.
ir::Value* packed_projection(const ir::Value* q, const ir::Value* k, const ir::Value* v) {
  const ir::Node* pq = q->producer;
  if (!pq || !k->producer || !v->producer || !pq->has_input(0)) return nullptr;
  const ir::Value* parts[3] = {q, k, v};
  if (pq->domain.empty() && pq->op_type == "Gather") return gathered_projection(parts);
  ir::Value* x = pq->inputs[0];
  const ir::SymShape& xs = x->type.shape;
  if (!xs.known || xs.rank() != 3 || q->type.dtype != x->type.dtype) return nullptr;
  if (pq->domain.empty() && pq->op_type == "Split") {
    // Three outputs that cover the axis: x's last dim is 3 * E when each is E wide (its dim may be
    // symbolic: GPT-2's projection is reshaped by a computed shape).
    if (k->producer != pq || v->producer != pq || pq->outputs.size() != 3 || pq->outputs[0] != q || pq->outputs[1] != k ||
        pq->outputs[2] != v)
      return nullptr;
    const int64_t axis = pq->attr_int("axis", 0);
    if (axis != 2 && axis != -1) return nullptr;
    const ir::SymShape& qs = q->type.shape;
    if (!qs.known || qs.rank() != 3 || !qs.dims[2].is_static() || qs.dims[2].value <= 0) return nullptr;
    const int64_t part = qs.dims[2].value;
    for (const ir::Value* p : {k, v})
      if (!p->type.shape.known || p->type.shape.rank() != 3 || !p->type.shape.dims[2].is_static() ||
          p->type.shape.dims[2].value != part)
        return nullptr;
    if (xs.dims[2].is_static() && xs.dims[2].value != 3 * part) return nullptr;
    const auto sizes = split_sizes(*pq);
    if (!sizes) return nullptr;  // sizes computed when running
    if (!sizes->empty() && *sizes != std::vector<int64_t>{part, part, part}) return nullptr;
    x->type.shape.dims[2] = ir::Dim(3 * part);  // what the Split proves, for the attention's shape function
    return x;
  }
  // Slices: they need not cover x, so its width must be known to be 3 * E.
  if (!xs.dims[2].is_static() || xs.dims[2].value % 3 || xs.dims[2].value == 0) return nullptr;
  const int64_t dim = xs.dims[2].value, part = dim / 3;
  for (int i = 0; i < 3; ++i) {
    const auto cut = last_axis_cut(*parts[i]->producer, x, dim);
    if (!cut || cut->first != i * part || cut->second != (i + 1) * part) return nullptr;
  }
  return x;
}

// rep(x) of the heads-first form: Unsqueeze at axis 2 of x [B, Hkv, T, D], Expand to 5-D (growing
// the new axis to n: a grown dim of size 1 elsewhere leaves the op's numbers alone or makes its shape
// checks fail), Reshape to [B, Hkv*n, T, D] (dims 0, 2 and 3 x's, so dim 1 merges Hkv and n).
// "" when so, else why not.
std::string repeats_heads(Match& m, const std::string& x) {
  const ir::Value* base = m[x + "4"];
  const ir::Node* unsq = m.node(x + "_unsq");
  const ir::Node* expand = m.node(x + "_expand");
  const ir::Node* reshape = m.node(x + "_rep");
  const std::string no = "the repeat of '" + base->name + "' is not Reshape(Expand(Unsqueeze(x, 2), [B, Hkv, n, T, D]), [B, Hkv*n, T, D])";
  const auto axes = squeeze_axes(*unsq);
  if (!axes || (*axes != std::vector<int64_t>{2} && *axes != std::vector<int64_t>{-3})) return no;
  const ir::SymShape& bs = base->type.shape;
  if (!bs.known || bs.rank() != 4) return no;
  // Expand to 5 dims: its shape input has 5 elements (or its output is 5-D).
  const ir::SymShape& es = expand->outputs[0]->type.shape;
  const ir::SymShape& ss = expand->has_input(1) ? expand->inputs[1]->type.shape : ir::SymShape();
  const bool five = (es.known && es.rank() == 5) || (ss.known && ss.rank() == 1 && ss.dims[0].is_static() && ss.dims[0].value == 5);
  if (!five) return no;
  // A dim of x that is statically 1 could be grown by the Expand and then folded into the heads by the
  // Reshape (a batch of 1 repeated as heads): the Expand must keep it 1.
  for (int i : {0, 2, 3}) {
    const int e = i == 0 ? 0 : i + 1;
    if (bs.dims[i].is_static() && bs.dims[i].value == 1 &&
        !(es.known && es.rank() == 5 && es.dims[e].is_static() && es.dims[e].value == 1))
      return no + " (x's dim " + std::to_string(i) + " is 1 and may be expanded)";
  }
  const auto el = shape_value_partial(reshape->inputs.size() > 1 ? reshape->inputs[1] : nullptr);
  if (!el || el->size() != 4 || reshape->attr_int("allowzero", 0) != 0) return no;
  // Elements 0, 2 and 3 are x's dims (element 0 may copy the Expand's, which is x's): the same
  // tensor dim, a dim the Transpose that made x moved there, or x's head size.
  const ir::Node* t = base->producer;
  const std::vector<int64_t> perm = t && t->domain.empty() && t->op_type == "Transpose" ? t->attr_ints("perm") : std::vector<int64_t>{};
  for (int i : {0, 2, 3}) {
    const auto& e = (*el)[i];
    if (!e) return no;
    if (i == 0 && !e->of && e->value == 0) continue;
    if (i == 3 && !e->of && e->value == proven_last_dim(base)) continue;
    const bool moved = perm.size() == 4 && t->has_input(0) && e->of == t->inputs[0] && e->value == perm[i];
    if (!moved && !elem_is_dim(*e, base, i)) return no;
  }
  return "";
}

// The heads-first form (attention_pattern_heads_first). The op reads the head counts from the
// tensors when it runs (Q's dim 1 query heads, K's dim 1 K/V heads), so they need not be static
// here; the head sizes must be known (the CUDA kernels take heads up to 128). Batch dims and key
// lengths the shapes cannot prove equal are checked when the op runs: they differ only where the
// products would broadcast one tensor's batch over another's, which the op refuses with an error.
// "" when rewritten, else why not.
std::string fuse_heads_first(Rewriter& rw, Match& m) {
  ir::Value* q = m["q4"];
  ir::Value* k = m["k4"];
  ir::Value* v = m["v4"];
  for (const ir::Value* x : {q, k, v})
    if (x->type.dtype != DataType::kFloat32) return "not float32";
  for (const ir::Value* x : {q, k, v})
    if (!x->type.shape.known || x->type.shape.rank() != 4) return "Q, K and V are not 4-D heads [B, heads, sequence, head size]";
  const int64_t D = proven_last_dim(q), Dk = proven_last_dim(k), Dv = proven_last_dim(v);
  if (!D || !Dv || (Dk && Dk != D))
    return "the head sizes are not known (Q " + q->type.shape.to_string() + ", K " + k->type.shape.to_string() + ", V " +
           v->type.shape.to_string() + ")";
  // Dims the types know must agree as the op needs them (the products would broadcast them otherwise).
  const ir::SymShape &qs = q->type.shape, &ks = k->type.shape, &vs = v->type.shape;
  auto differ = [](const ir::Dim& a, const ir::Dim& b) { return a.is_static() && b.is_static() && a.value != b.value; };
  if (differ(qs.dims[0], ks.dims[0]) || differ(qs.dims[0], vs.dims[0]) || differ(ks.dims[1], vs.dims[1]) ||
      differ(ks.dims[2], vs.dims[2]) ||
      (qs.dims[1].is_static() && ks.dims[1].is_static() && (ks.dims[1].value < 1 || qs.dims[1].value % ks.dims[1].value)))
    return "the batch, head counts or key lengths of Q " + qs.to_string() + ", K " + ks.to_string() + ", V " + vs.to_string() +
           " do not fit one attention";
  if (m.node("k_rep"))
    for (const char* x : {"k", "v"})
      if (std::string why = repeats_heads(m, x); !why.empty()) return why;
  if (!has_perm(m.node("k_t4"), {0, 1, 3, 2}) || !has_perm(m.node("out_t"), {0, 2, 1, 3}))
    return "K's transpose is not (0,1,3,2) or the output's not (0,2,1,3)";
  if (std::string why = softmax_over_keys(m, 4); !why.empty()) return why;
  const auto scale = attention_scale(m);
  if (!scale) return "a scale is not a non-zero scalar";
  if (std::string why = nan_guard_fills_zero(m); !why.empty()) return why;
  if (std::string why = usable_mask(m); !why.empty()) return why;
  if (std::string why = rw.unsupported_on_target("kiln", "Attention"); !why.empty()) return why;
  const std::string what = m.node("qk")->describe() + " … " + m.root()->describe();
  // What the reshapes prove, for the kernels' checks at placement (the CUDA kernels' head sizes).
  q->type.shape.dims[3] = k->type.shape.dims[3] = ir::Dim(D);
  v->type.shape.dims[3] = ir::Dim(Dv);
  std::vector<ir::Value*> ins = {q, k, v};
  if (m.has("mask")) ins.push_back(m["mask"]);
  // The Transpose's output [B, S, H, Dv] is the op's heads-first output.
  ir::Node* n = rw.replace(m, "Attention", "kiln", 1, ins);
  set_float(n, "scale", *scale);
  set_int(n, "heads_first", 1);
  const ir::Dim& h = q->type.shape.dims[1];
  const ir::Dim& hkv = k->type.shape.dims[1];
  if (h.is_static()) set_int(n, "num_heads", h.value);
  if (hkv.is_static()) set_int(n, "kv_num_heads", hkv.value);
  if (m.has("nan_fill")) set_int(n, "zero_nan_rows", 1);
  const bool grouped = m.node("k_rep") != nullptr;
  rw.log("fused heads-first attention (heads of " + std::to_string(D) + (grouped ? ", K and V heads read per group" : "") + ") " +
         what);
  return "";
}

}  // namespace

Expected<bool> fuse_attention(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fuse-attention");
  const std::vector<Rule> rules = {
      {"multi-head attention (sequence-first, 4-D heads)", attention_pattern_4d(), 6},
      {"multi-head attention (packed QKV, shifted windows)", attention_pattern_packed(true), 6},
      {"multi-head attention (packed QKV)", attention_pattern_packed(), 6},
      {"multi-head attention (shifted windows)", attention_pattern(WhereForm::kNone, false, false, true), 4},
      {"multi-head attention", attention_pattern(WhereForm::kNone), 4},
      {"multi-head attention (NaN-guarded softmax)", attention_pattern(WhereForm::kNone, false, true), 4},
      // Expand to a constant shape first: otherwise the Expand would be taken as the condition.
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kKeepWhereTrue, true), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kFillWhereTrue, true), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kKeepWhereTrue), 4},
      {"multi-head attention (Where mask)", attention_pattern(WhereForm::kFillWhereTrue), 4},
      // Last: any 4-D heads (rotary embeddings, grouped K/V heads), where no form above applies.
      {"heads-first attention (grouped K/V heads, NaN-guarded softmax)", attention_pattern_heads_first(true, true), 4},
      {"heads-first attention (grouped K/V heads)", attention_pattern_heads_first(true, false), 4},
      {"heads-first attention (NaN-guarded softmax)", attention_pattern_heads_first(false, true), 4},
      {"heads-first attention", attention_pattern_heads_first(false, false), 4},
  };
  const bool fused = rw.run(rules, [&](Match& m) -> std::string {
    if (m.node("split_q")) return fuse_packed(rw, m);
    if (m.has("q4")) return fuse_heads_first(rw, m);
    if (m.node("q_r4")) {
      if (!has_perm(m.node("q_t"), {1, 0, 2}) || !has_perm(m.node("k_t"), {1, 0, 2}) || !has_perm(m.node("v_t"), {1, 0, 2}) ||
          !has_perm(m.node("k_t4"), {0, 1, 3, 2}) || !has_perm(m.node("out_t"), {2, 0, 1, 3}))
        return "head transposes are not (1,0,2) then (0,1,3,2) for K, and (2,0,1,3) for the output";
      // Each 4-D reshape splits [B*H, S, D] into [B, H, S, D]: H, S and D as the first reshape made
      // them (B then follows from the element count).
      for (const char* x : {"q", "k", "v"}) {
        std::string why;
        const auto [H, D] = head_split_sequence_first(m[x], m.node(std::string(x) + "_reshape"), &why);
        if (!H) return why;
        const ir::Node* r4 = m.node(std::string(x) + "_r4");
        const auto el = shape_value_partial(r4->inputs.size() > 1 ? r4->inputs[1] : nullptr);
        if (!el || el->size() != 4 || r4->attr_int("allowzero", 0) != 0) return "a 4-D head reshape is not [B, H, S, D]";
        const auto& h = (*el)[1];
        const auto& sq = (*el)[2];
        const auto& d = (*el)[3];
        // D may be -1 (inferred) where the shape was folded with static sizes: the reshape's output
        // shape then says what it is.
        const auto& out = r4->outputs[0]->type.shape;
        const bool d_ok = d && !d->of &&
                          (d->value == D || (d->value == -1 && out.known && out.rank() == 4 && out.dims[3].is_static() &&
                                             out.dims[3].value == D));
        if (!h || h->of || h->value != H || !d_ok || !sq || !elem_is_dim(*sq, m[x], 0))
          return "a 4-D head reshape is not [B, H, S, D]";
      }
      return fuse_sequence_first(rw, m, 4);
    }
    if (has_perm(m.node("q_t"), {1, 0, 2}) && has_perm(m.node("v_t"), {1, 0, 2}) && has_perm(m.node("k_t"), {1, 2, 0}) &&
        has_perm(m.node("out_t"), {1, 0, 2}))
      return fuse_sequence_first(rw, m, 3);
    if (!has_perm(m.node("q_t"), {0, 2, 1, 3}) || !has_perm(m.node("v_t"), {0, 2, 1, 3}) ||
        !has_perm(m.node("k_t"), {0, 2, 3, 1}) || !has_perm(m.node("out_t"), {0, 2, 1, 3}))
      return "head transposes are not (0,2,1,3) for Q, V, output and (0,2,3,1) for K";
    Heads hs;
    if (std::string why = split_heads(m, head_split, &hs); !why.empty()) return why;
    const int64_t H = hs.h, D = hs.d, Dv = hs.dv;
    for (const char* x : {"q", "k", "v"})
      if (m[x]->type.dtype != DataType::kFloat32) return "not float32";
    if (std::string why = softmax_over_keys(m, 4); !why.empty()) return why;
    // The merge: Reshape(context [B, S, H, Dv]) → [B, S, H*Dv].
    if (std::string why = merges_heads(m, m["q"], H, Dv); !why.empty()) return why;
    const auto scale_or = attention_scale(m);
    if (!scale_or) return "a scale is not a non-zero scalar";
    const double scale = *scale_or;
    if (std::string why = nan_guard_fills_zero(m); !why.empty()) return why;
    AdditiveMask am;
    if (std::string why = check_additive_mask(m, &am); !why.empty()) return why;
    std::vector<ir::Value*> ins = {m["q"], m["k"], m["v"], nullptr};  // the mask is put in once the rewrite is certain
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
      ins.push_back(m["cond"]);
    }
    const std::string what = m.node("qk")->describe() + " … " + m.root()->describe();
    if (std::string why = rw.unsupported_on_target("kiln", "Attention"); !why.empty()) return why;
    ins[3] = mask_input(rw, m, am);
    if (!ins[3] && ins.size() == 4) ins.pop_back();
    ir::Node* n = replace_by_attention(rw, m, ins, H, scale);
    const std::string folded = note_window_mask(n, am);
    if (fill) {
      set_float(n, "mask_fill", *fill);
      set_int(n, "mask_fill_where_true", fill_where_true ? 1 : 0);
    }
    if (m.has("nan_fill")) set_int(n, "zero_nan_rows", 1);
    rw.log("fused attention (" + std::to_string(H) + " heads of " + std::to_string(D) + ") " + what + folded);
    return "";
  });
  // Attentions (fused now or before) whose Q, K and V are cut from one projection read it in place.
  std::vector<ir::Node*> cuts;
  for (ir::Node* n : g.nodes()) {
    if (rw.dead(n) || n->domain != "kiln" || n->op_type != "Attention" || n->attr_int("packed_qkv", 0) != 0) continue;
    if (n->inputs.size() < 3 || !n->inputs[0] || !n->inputs[1] || !n->inputs[2]) continue;
    ir::Value* qkv = packed_projection(n->inputs[0], n->inputs[1], n->inputs[2]);
    if (!qkv) continue;
    for (int i = 0; i < 3; ++i) {
      // The cut and the nodes between it and the projection (torch 2.x's head reshapes).
      for (ir::Node* c = n->inputs[i]->producer; c && c->has_input(0); c = c->inputs[0]->producer) {
        cuts.push_back(c);
        if (c->inputs[0] == qkv) break;
      }
      g.set_input(n, i, qkv);
    }
    set_int(n, "packed_qkv", 1);
    rw.log(n->describe() + " reads Q, K and V in place from '" + qkv->name + "' (packed_qkv; the cut's copies go)");
  }
  rw.remove_unread(cuts);
  return fused || !cuts.empty();
}

}  // namespace kiln::passes
