// passes/batch_first_attention.cpp — torch's nn.MultiheadAttention (torchvision's ViT, batch_first
// models) works sequence-first inside: its export transposes the block's input [B, S, E] to [S, B, E],
// projects Q, K, V, attends, projects the output rows and transposes back. Every step between the two
// Transposes works on rows (a MatMul or Gemm with a 2-D weight acts on the last dim alone; the flattening
// Reshape to [S·B, E] and back only renames rows; kiln.Attention reads either order through
// sequence_first), so the same block runs batch-first with both Transposes gone:
//
//   Transpose(x, [1,0,2]) → MatMul(·, W) → Attention(sequence_first=1, packed QKV) → Reshape [S·B, E]
//     → Gemm|MatMul (2-D weight) → Reshape [S, B, E'] → Transpose([1,0,2])
// becomes
//   MatMul(x, W) → Attention(sequence_first=0) → Reshape [B·S, E] → Gemm|MatMul → Reshape(·, Shape(x))
//
// Two full copies of the block's activations per layer fewer (on an H200, ViT-B/16 at batch 64 spends
// ~0.5 ms of ~8 ms in them). The first Reshape's target is kept: its row count is S·B either way.
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool is_swap01(const ir::Node* n) {
  if (!n || n->op_type != "Transpose" || !n->domain.empty() || n->inputs.size() != 1 || !n->attr("perm")) return false;
  return n->attr_ints("perm") == std::vector<int64_t>{1, 0, 2};
}

int rank_of(const ir::Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known) return -1;
  return static_cast<int>(v->type.shape.rank());
}

// A product that acts on the last dim of its first input alone: MatMul / kiln.FusedMatMul with a 2-D
// second input, Gemm / kiln.FusedGemm without transA and with a bias that broadcasts along rows.
std::string row_wise(const ir::Node& n) {
  const bool matmul = (n.op_type == "MatMul" && n.domain.empty()) || (n.op_type == "FusedMatMul" && n.domain == "kiln");
  const bool gemm = (n.op_type == "Gemm" && n.domain.empty()) || (n.op_type == "FusedGemm" && n.domain == "kiln");
  if (!matmul && !gemm) return n.op_type + " is not a MatMul or Gemm";
  if (n.inputs.size() < 2 || rank_of(n.inputs[1]) != 2) return n.op_type + "'s weight is not 2-D";
  if (gemm) {
    if (n.attr_int("transA", 0) != 0) return "a Gemm with transA";
    if (n.inputs.size() > 2 && n.inputs[2]) {
      const int r = rank_of(n.inputs[2]);
      if (r < 0 || r > 2 || (r == 2 && !(n.inputs[2]->type.shape.dims[0].is_static() &&
                                         n.inputs[2]->type.shape.dims[0].value == 1)))
        return "a Gemm bias that varies along rows";
    }
  } else if (n.inputs.size() > 3) {
    return "a FusedMatMul with a residual";
  }
  return "";
}

}  // namespace

Expected<bool> batch_first_attention(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "batch-first-attention");
  bool changed = false;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* a : nodes) {
    if (rw.dead(a) || a->op_type != "Attention" || a->domain != "kiln" || a->attr_int("sequence_first", 0) != 1) continue;
    auto miss = [&](const std::string& why) { rw.near_miss(a->describe() + ": " + why); };
    ir::Value* qkv = a->inputs.size() >= 3 ? a->inputs[0] : nullptr;
    if (!qkv || a->inputs[1] != qkv || a->inputs[2] != qkv) continue;  // separate Q, K, V: not this form
    ir::Node* proj = qkv->producer;
    if (!proj || sole_reader(qkv, true) != a) continue;
    if (const std::string why = row_wise(*proj); !why.empty()) {
      miss("the QKV projection: " + why);
      continue;
    }
    ir::Node* t1 = proj->inputs[0] ? proj->inputs[0]->producer : nullptr;
    if (!is_swap01(t1) || sole_reader(proj->inputs[0]) != proj) continue;  // not a transposed block input
    ir::Value* x = t1->inputs[0];
    ir::Node* r1 = sole_reader(a->outputs[0]);
    ir::Node* out_proj = r1 && r1->op_type == "Reshape" ? sole_reader(r1->outputs[0]) : nullptr;
    ir::Node* r2 = out_proj ? sole_reader(out_proj->outputs[0]) : nullptr;
    ir::Node* t2 = r2 && r2->op_type == "Reshape" ? sole_reader(r2->outputs[0]) : nullptr;
    if (!is_swap01(t2)) {
      miss("the output is not Reshape → Gemm/MatMul → Reshape → Transpose([1,0,2])");
      continue;
    }
    if (r1->inputs[0] != a->outputs[0] || out_proj->inputs[0] != r1->outputs[0] || r2->inputs[0] != out_proj->outputs[0]) {
      miss("the output chain reads the attention elsewhere than its first input");
      continue;
    }
    if (const std::string why = row_wise(*out_proj); !why.empty()) {
      miss("the output projection: " + why);
      continue;
    }
    if (r1->attr_int("allowzero", 0) != 0 || r2->attr_int("allowzero", 0) != 0) {
      miss("a Reshape with allowzero");
      continue;
    }
    // The flattening keeps the attention's last dim; the unflattening is [S, B, E'] with S, B the
    // attention's own, and E' equals x's last dim (so Shape(x) is its batch-first target).
    const ir::Value* y = a->outputs[0];
    const ir::Value* rows = r1->outputs[0];
    const ir::Value* unflat = r2->outputs[0];
    if (rank_of(y) != 3 || rank_of(rows) != 2 || rank_of(unflat) != 3 || rank_of(x) != 3 || rank_of(qkv) != 3) {
      miss("ranks unknown or not 3-D / 2-D");
      continue;
    }
    const auto& yd = y->type.shape.dims;
    const auto& rd = rows->type.shape.dims;
    const auto& ud = unflat->type.shape.dims;
    const auto& xd = x->type.shape.dims;
    // y is [S, B, E] with S, B x's dims 1 and 0 by construction (x swapped, rows projected, attended).
    // The unflattening's middle dim is B when the dims say so, or when its target is [S, -1, E'] (a
    // dynamic batch: fold-shapes leaves the one dim read at run time as -1; the rows are S·B).
    const std::vector<double> target = constant_values(r2->inputs.size() > 1 ? r2->inputs[1] : nullptr);
    const bool middle_is_b = same_dim(ud[1], yd[1]) || (target.size() == 3 && target[1] == -1 && yd[0].is_static() &&
                                                        target[0] == static_cast<double>(yd[0].value) &&
                                                        ud[2].is_static() && target[2] == static_cast<double>(ud[2].value));
    if (!same_dim(rd[1], yd[2]) || !same_dim(ud[0], yd[0]) || !middle_is_b || !same_dim(ud[2], xd[2])) {
      miss("the Reshapes do not flatten " + y->type.shape.to_string() + " to rows and back (rows " + rows->type.shape.to_string() +
           ", unflattened " + unflat->type.shape.to_string() + ", block input " + x->type.shape.to_string() + ")");
      continue;
    }
    const std::string what = t1->describe() + " and " + t2->describe() + " around " + a->describe();
    // Rewrite: the closing Transpose's readers read the unflattened rows (first: it is the step that
    // may be refused, and nothing has changed then), the projection reads x, the attention runs
    // batch-first, the unflattening takes x's shape (a shape value: computed on the host while planning,
    // on every device, or folded when x's shape is static).
    if (!rw.bypass(t2, r2->outputs[0])) {
      miss("the closing Transpose's output name must stay");
      continue;
    }
    // Stored types merge with what inference finds (passes.h): the three values whose layout changes
    // are retyped here, [S, B, ·] → [B, S, ·], so no stale sequence-first dim survives.
    auto batch_first = [&](ir::Value* v) {
      const ir::Dim last = v->type.shape.dims[2];
      v->type.shape = ir::SymShape({xd[0], xd[1], last});
    };
    batch_first(qkv);
    batch_first(a->outputs[0]);
    batch_first(r2->outputs[0]);
    g.set_input(proj, 0, x);
    a->attrs["sequence_first"].kind = ir::Attribute::Kind::kInt;
    a->attrs["sequence_first"].i = 0;
    ir::Value* shape = g.new_value(x->name + "_shape");
    g.add_node("Shape", "", {x}, {shape}, r2->name + "_batch_first_shape")->opset = r2->opset;
    g.set_input(r2, 1, shape);
    rw.remove_unread({t1});
    rw.log("batch-first: dropped " + what);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
