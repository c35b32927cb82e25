// passes/attention_op.cpp — ONNX's Attention op (opset 23: torch's dynamo exporter writes it for
// scaled_dot_product_attention; com.microsoft MultiHeadAttention and GroupQueryAttention lower to it)
// becomes kiln.Attention where the two compute the same: 4-D Q [B, H, S, D], K [B, Hkv, T, D],
// V [B, Hkv, T, Dv] (read heads-first, grouped K/V heads as they are) in float32, no past or present,
// no softcap, no qk output, no nonpad_kv_seqlen. The mask becomes kiln.Attention's masks:
//   a float attn_mask: the additive mask (input 3);
//   a bool attn_mask (true: attend): the bool mask (input 4), its false entries filled with -inf;
//   is_causal: query i sees keys j <= i (ONNX's alignment without a past), a bool mask [S, T] made
//   from Range, and-ed with a bool attn_mask.
// A fully masked row is NaN on both sides (softmax of -inf everywhere; zero_nan_rows stays 0). The
// default scale is ONNX's 1/sqrt(D), written out. kiln.Attention's Y is [B, S, H, Dv]: a Transpose
// gives the op's [B, H, S, Dv] (the exporter's own transpose back then cancels it, see transposes).
// What kiln.Attention gains over the ONNX op's CUDA kernel: the tensor-core and cuDNN tactics (the op's
// kernel materializes every score), and fold-head-transposes' rows in place.
#include <cmath>
#include <limits>

#include "ops/params_misc.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

bool static_dim(const ir::Value* v, int d, int64_t* out) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known || v->type.shape.rank() != 4) return false;
  const ir::Dim& dim = v->type.shape.dims[static_cast<size_t>(d)];
  if (!dim.is_static()) return false;
  *out = dim.value;
  return true;
}

}  // namespace

Expected<bool> attention_op_to_kiln(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "attention-op");
  bool changed = false;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* a : nodes) {
    if (rw.dead(a) || a->removed || a->op_type != "Attention" || !a->domain.empty() || a->opset < 23) continue;
    auto miss = [&](const std::string& why) { rw.near_miss(a->describe() + ": " + why); };
    int64_t H = 0, Hkv = 0, D = 0;
    if (a->inputs.size() < 3 || !static_dim(a->inputs[0], 1, &H) || !static_dim(a->inputs[1], 1, &Hkv) ||
        !static_dim(a->inputs[0], 3, &D) || !a->inputs[2] || !a->inputs[2]->type.shape.known ||
        a->inputs[2]->type.shape.rank() != 4) {
      miss("Q, K, V are not 4-D with static head counts and head size");
      continue;
    }
    if (Hkv < 1 || H % Hkv != 0 || D < 1) {
      miss("the query heads do not group over the K/V heads");
      continue;
    }
    bool extra = false;
    for (size_t i = 4; i < a->inputs.size(); ++i) extra |= a->has_input(static_cast<int>(i));
    for (size_t o = 1; o < a->outputs.size(); ++o)
      extra |= a->outputs[o] && (a->outputs[o]->is_output || !a->outputs[o]->uses.empty());
    if (extra) {
      miss("a past, present, qk output or nonpad_kv_seqlen");
      continue;
    }
    auto params = ops::parse_attention(*a);
    if (!params.ok() || params->softcap != 0.0f) {
      miss("softcap");
      continue;
    }
    const DataType dt = a->inputs[0]->type.dtype;
    if (dt != DataType::kFloat32) {  // (as the other fusions: the precision stages make half engines later)
      miss("not float32");
      continue;
    }
    ir::Value* mask = a->has_input(3) ? a->inputs[3] : nullptr;
    const bool bool_mask = mask && mask->type.dtype == DataType::kBool;
    if (mask && !bool_mask && mask->type.dtype != dt) {
      miss("attn_mask is neither bool nor Q's type");
      continue;
    }
    // The mask's last dim must be T (the op lets a shorter mask leave the last keys out).
    if (mask) {
      const ir::SymShape& ms = mask->type.shape;
      const ir::SymShape& ks = a->inputs[1]->type.shape;
      if (!ms.known || ms.rank() < 1 || ms.rank() > 4 || !(ms.dims.back() == ks.dims[2])) {
        miss("attn_mask's last dim is not K's sequence length");
        continue;
      }
    }
    if (std::string why = rw.unsupported_on_target("kiln", "Attention"); !why.empty()) {
      miss(why);
      continue;
    }
    ir::Value* keep = bool_mask ? mask : nullptr;
    const std::string base = a->name.empty() ? std::string("attention") : a->name;
    if (params->is_causal) {
      // keep[i, j] = j <= i over [S, T].
      ir::Value* seq_axis = rw.constant(base + "_seq_axis", int64_tensor({2}, true));
      ir::Value* zero = rw.constant(base + "_zero", int64_tensor({0}, true));
      ir::Value* one = rw.constant(base + "_one", int64_tensor({1}, true));
      auto length = [&](ir::Value* x, const std::string& what) {
        ir::Value* shape = g.new_value(base + "_" + what + "_shape");
        g.add_node("Shape", "", {x}, {shape}, base + "_" + what + "_shape")->opset = 15;
        ir::Value* len = g.new_value(base + "_" + what + "_len");
        g.add_node("Gather", "", {shape, seq_axis}, {len}, base + "_" + what + "_len")
            ->opset = 13;
        ir::Value* r = g.new_value(base + "_" + what + "_positions");
        g.add_node("Range", "", {zero, len, one},
                   {r}, base + "_" + what + "_positions")
            ->opset = 11;
        return r;
      };
      ir::Value* rows = g.new_value(base + "_causal_rows");
      g.add_node("Unsqueeze", "", {length(a->inputs[0], "q"), rw.constant(base + "_col_axis", int64_tensor({1}))}, {rows},
                 base + "_causal_rows")
          ->opset = 13;
      ir::Value* causal = g.new_value(base + "_causal", ir::Type::tensor(DataType::kBool));
      g.add_node("LessOrEqual", "", {length(a->inputs[1], "k"), rows}, {causal}, base + "_causal")->opset = 16;
      if (keep) {
        ir::Value* both = g.new_value(base + "_mask_and_causal", ir::Type::tensor(DataType::kBool));
        g.add_node("And", "", {keep, causal}, {both}, base + "_mask_and_causal")->opset = 7;
        keep = both;
      } else {
        keep = causal;
      }
    }
    const float scale = params->has_scale ? params->scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    std::vector<ir::Value*> ins = {a->inputs[0], a->inputs[1], a->inputs[2], bool_mask ? nullptr : mask};
    if (keep) ins.push_back(keep);
    while (!ins.empty() && !ins.back()) ins.pop_back();
    ir::Value* y = a->outputs[0];
    ir::Value* rows_first = g.new_value(y->name + "_heads_last", ir::Type::tensor(y->type.dtype));
    ir::Node* k = g.add_node("Attention", "kiln", ins, {rows_first}, base + "_kiln");
    k->opset = 1;
    set_int(k, "heads_first", 1);
    set_int(k, "num_heads", H);
    if (Hkv != H) set_int(k, "kv_num_heads", Hkv);
    set_float(k, "scale", scale);
    if (keep) {
      set_float(k, "mask_fill", -std::numeric_limits<float>::infinity());
      set_int(k, "mask_fill_where_true", 0);
    }
    const std::string what = a->describe();
    rw.remove(a);
    ir::Node* t = g.add_node("Transpose", "", {rows_first}, {y}, base + "_heads_first");
    t->opset = 13;
    t->attrs["perm"] = ints_attribute({0, 2, 1, 3});
    rw.log("kiln.Attention for " + what + " (" + std::to_string(H) + " heads, " + std::to_string(Hkv) + " K/V heads" +
           (params->is_causal ? ", causal" : "") + (mask ? bool_mask ? ", bool mask" : ", additive mask" : "") + ")");
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
