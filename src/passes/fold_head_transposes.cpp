// passes/fold_head_transposes.cpp — decoder exports (Llama, Mistral, Qwen) split each projection into
// heads as [B, S, h, d] and transpose it to [B, h, S, d] before the rotary embedding and the attention:
//
//   Q = Rotary(Transpose(x_q, [0,2,1,3]), cos, sin), K likewise, V = Transpose(x_v, [0,2,1,3])
//   Y [B, S, H, Dv] = kiln.Attention(Q, K, V, ..., heads_first = 1)
//
// Three copies of the projections per layer. kiln.Attention reads the rows [B, S, H·d] of the
// projections in place (its batch-first layout, grouped K/V heads included), and the rotary embedding
// works on either layout once its table is laid out along S (cos [b, 1, S, d] → [b, S, 1, d], a
// Reshape of the table, no copy: its head dim is 1), so the block becomes
//
//   Y' = kiln.Attention(Reshape(Rotary(x_q, cos', sin'), [0, 0, H·d]), ..., Reshape(x_v, [0, 0, Hkv·dv]),
//                       num_heads = H, kv_num_heads = Hkv);  Y = Reshape(Y', [0, 0, H, Dv])
//
// with the same arithmetic and no transposes (Reshapes are views). All three operands must take the
// form, or nothing changes.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool is_heads_swap(const ir::Node* n) {
  return n && n->op_type == "Transpose" && n->domain.empty() && n->inputs.size() == 1 && n->attr("perm") &&
         n->attr_ints("perm") == std::vector<int64_t>{0, 2, 1, 3};
}

// One of Q, K, V: x [B, S, h, d] through the Transpose (and the rotary embedding) that only this
// attention reads.
struct Operand {
  ir::Value* x = nullptr;
  ir::Node* transpose = nullptr;
  ir::Node* rotary = nullptr;
  int64_t heads = 0, width = 0;  // h, d
};

std::string operand_of(ir::Value* v, const ir::Node* a, Operand* op) {
  ir::Node* p = v ? v->producer : nullptr;
  if (p && p->domain == "kiln" && p->op_type == "Rotary") {
    if (sole_reader(v) != a || v->is_output) return "a rotary embedding read elsewhere too";
    op->rotary = p;
    v = p->inputs[0];
    p = v ? v->producer : nullptr;
  }
  if (!is_heads_swap(p)) return "not a Transpose [0,2,1,3] of [B, S, heads, head size]";
  if (sole_reader(v) != (op->rotary ? op->rotary : a) || v->is_output) return "the Transpose is read elsewhere too";
  op->transpose = p;
  op->x = p->inputs[0];
  const ir::SymShape& s = op->x->type.shape;
  if (!s.known || s.rank() != 4 || !s.dims[2].is_static() || !s.dims[3].is_static())
    return "the heads and head size of " + op->x->name + " are not static";
  op->heads = s.dims[2].value;
  op->width = s.dims[3].value;
  return "";
}

// Whether a rotary table (against [B, h, S, d]) has no heads of its own: a scalar, [d], [S, d],
// [1, S, d] or [b, 1, S, d].
bool headless_table(const ir::Value* t) {
  const ir::SymShape& s = t ? t->type.shape : ir::SymShape();
  auto one = [&](int d) { return s.dims[static_cast<size_t>(d)].is_static() && s.dims[static_cast<size_t>(d)].value == 1; };
  return s.known && (s.rank() <= 2 || (s.rank() == 3 && one(0)) || (s.rank() == 4 && one(1)));
}

// A headless rotary table laid out for [B, S, h, d] (cos [b, 1, S, d] → [b, S, 1, d]; [S, d] → [S, 1, d]).
ir::Value* table_along_rows(Rewriter& rw, ir::Value* t, const std::string& base) {
  ir::Graph& g = rw.graph();
  const ir::SymShape& s = t->type.shape;
  if (s.rank() <= 1) return t;  // [d] or a scalar: broadcast along every other dim either way
  ir::Value* out = g.new_value(t->name + "_along_rows", ir::Type::tensor(t->type.dtype));
  if (s.rank() == 4) {
    if (s.dims[3].is_static()) {  // moving a dim of 1 keeps the order of the elements: a Reshape (a view)
      g.add_node("Reshape", "", {t, rw.constant(base + "_rows_shape", int64_tensor({0, -1, 1, s.dims[3].value}))}, {out},
                 base + "_along_rows")
          ->opset = 14;
      return out;
    }
    ir::Node* n = g.add_node("Transpose", "", {t}, {out}, base + "_along_rows");
    n->opset = 13;
    n->attrs["perm"] = ints_attribute({0, 2, 1, 3});
    return out;
  }
  // [S, d] or [1, S, d] → a head dim of 1 before d.
  g.add_node("Unsqueeze", "", {t, rw.constant(base + "_head_axis", int64_tensor({-2}))}, {out}, base + "_along_rows")->opset = 13;
  return out;
}

}  // namespace

Expected<bool> fold_head_transposes(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-head-transposes");
  bool changed = false;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* a : nodes) {
    if (rw.dead(a) || a->removed || a->op_type != "Attention" || a->domain != "kiln" || a->attr_int("heads_first", 0) != 1 ||
        a->inputs.size() < 3 || a->outputs.empty() || !a->outputs[0])
      continue;
    Operand ops[3];
    std::string why;
    for (int i = 0; i < 3 && why.empty(); ++i) why = operand_of(a->inputs[i], a, &ops[i]);
    if (why.empty() && (a->inputs[0] == a->inputs[1] || a->inputs[1] == a->inputs[2] || a->inputs[0] == a->inputs[2]))
      why = "Q, K and V are not three tensors";
    if (why.empty() && ops[2].rotary) why = "V has a rotary embedding";
    if (why.empty() && (ops[1].heads != ops[2].heads || ops[0].width != ops[1].width)) why = "K and V heads or Q and K head sizes differ";
    if (why.empty() && (ops[1].heads <= 0 || ops[0].heads % ops[1].heads)) why = "the query heads do not group over the K/V heads";
    if (!why.empty()) {
      rw.near_miss(a->describe() + ": " + why);
      continue;
    }
    // The rotary tables along the rows (all first: a table that does not fit leaves the graph as it was).
    ir::Value* tables[2][2] = {};
    for (int i = 0; i < 2 && why.empty(); ++i)
      if (ops[i].rotary)
        for (int k = 0; k < 2 && why.empty(); ++k) {
          const ir::Value* t = ops[i].rotary->inputs[1 + k];
          if (!headless_table(t)) why = "a rotary table " + (t ? t->type.shape.to_string() : std::string("(none)")) + " has heads of its own";
        }
    if (!why.empty()) {
      rw.near_miss(a->describe() + ": " + why);
      continue;
    }
    const std::string what = a->describe();
    for (int i = 0; i < 2; ++i)
      if (ops[i].rotary)
        for (int k = 0; k < 2; ++k) tables[i][k] = table_along_rows(rw, ops[i].rotary->inputs[1 + k], ops[i].rotary->name + (k ? "_sin" : "_cos"));
    auto rows = [&](ir::Value* v, int64_t width, const std::string& base) {
      ir::Value* r = g.new_value(v->name + "_rows", ir::Type::tensor(v->type.dtype));
      g.add_node("Reshape", "", {v, rw.constant(base + "_rows_shape", int64_tensor({0, 0, width}))}, {r}, base + "_rows")->opset = 14;
      return r;
    };
    for (int i = 0; i < 3; ++i) {
      Operand& o = ops[i];
      ir::Value* in = o.x;
      if (o.rotary) {
        ir::Value* rotated = g.new_value(o.rotary->outputs[0]->name + "_rows4", ir::Type::tensor(o.x->type.dtype));
        ir::Node* r = g.add_node("Rotary", "kiln", {o.x, tables[i][0], tables[i][1]}, {rotated}, o.rotary->name + "_on_rows");
        r->opset = o.rotary->opset;
        r->attrs = o.rotary->attrs;
        in = rotated;
      }
      g.set_input(a, i, rows(in, o.heads * o.width, a->name + "_" + "qkv"[i]));
    }
    const int64_t H = ops[0].heads, Hkv = ops[1].heads, Dv = ops[2].width;
    set_int(a, "heads_first", 0);
    set_int(a, "num_heads", H);
    if (Hkv != H) set_int(a, "kv_num_heads", Hkv);
    else a->attrs.erase("kv_num_heads");
    ir::Value* y = a->outputs[0];
    ir::Value* y_rows = g.new_value(y->name + "_rows", ir::Type::tensor(y->type.dtype));
    g.set_output(a, 0, y_rows);
    g.add_node("Reshape", "", {y_rows, rw.constant(a->name + "_heads_shape", int64_tensor({0, 0, H, Dv}))}, {y}, a->name + "_heads")
        ->opset = 14;
    std::vector<ir::Node*> old;
    for (const Operand& o : ops) {
      if (o.rotary) old.push_back(o.rotary);
      old.push_back(o.transpose);
    }
    rw.remove_unread(old);
    rw.log("rows in place: " + what + " (" + std::to_string(H) + " heads, " + std::to_string(Hkv) + " K/V heads)");
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
