// passes/lower_contrib.cpp — `lower-contrib-ops`: ONNX Runtime's contrib ops (ops/contrib.cpp) become
// the ai.onnx ops they are made of, before any other pass (issue #44).
//
// Also ONNX Runtime's ops of the ai.onnx domain: SimplifiedLayerNormalization, and LayerNormalization
// below opset 17 (its own version 1, which its optimizer writes into models of any opset).
//
// Why lower, and why here. ONNX Runtime's transformer optimizer writes its fusions as contrib ops
// (SkipLayerNormalization, FastGelu, FusedMatMul, ...); kiln already has fused kernels for the same
// computations, made by its own fusion passes from plain ai.onnx ops where the target has them. Lowering
// each contrib node to those plain ops lets the existing passes decide per target as they do for any
// model (fuse-skip-layer-norm → kiln.SkipLayerNorm, fuse-matmul-add → kiln.FusedMatMul with the bias,
// fuse-activation → the GELU epilogue), so no second kernel or fusion exists per contrib op, and every
// device with the plain ops runs them. A pass rather than the importer, so that `kiln inspect` lists what
// it did and the imported graph (`kiln info`) shows the model as written; it runs in optimize() ahead of
// the pipeline's rounds at every opt level, 0 included, and cannot be disabled: it gives the graph its
// meaning in kiln's ops, and an unlowered contrib node has no kernel anywhere. Subgraphs are lowered too.
//
// The forms are chosen for the fusions that follow: SkipLayerNormalization's bias is added to its input
// before the skip (Add(Add(input, bias), skip)), so a MatMul feeding the input takes the bias into its
// epilogue and the skip Add joins the LayerNormalization; FusedMatMul's alpha scales a constant B (folded
// once) and otherwise the product. A contrib node asking for what kiln cannot give (the mean of an RMS
// normalization, a key/value cache of Attention) is an error naming the node.
//
// ONNX Runtime's QOperator ops (QLinearAdd, ..., QGemm: quantize_static's QOperator format) become
// DequantizeLinear → the float op → QuantizeLinear (below, "QOperator ops"); MatMulIntegerToFloat and
// DynamicQuantizeMatMul (quantize_dynamic's, fused by ONNX Runtime's optimizer) to MatMulInteger and its
// float scaling. MatMulNBits is not lowered:
// it has a kernel that keeps its weights 4-bit (backends/cpu/contrib_quant.cpp).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/contrib.h"
#include "ops/op_table.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

const char* const kPass = "lower-contrib-ops";

// Builds the replacement of one contrib node: new nodes are named after it, and its outputs keep their
// values (names, readers, graph-output roles) with new producers.
class Lowering {
 public:
  Lowering(ir::Graph& g, ir::Node* n) : g_(g), n_(n) {}

  ir::Value* in(size_t i) const { return n_->has_input(i) ? n_->inputs[i] : nullptr; }
  // Output i of the contrib node when something reads it (or it is a graph output), else null.
  ir::Value* wanted(size_t i) const {
    if (!n_->has_output(i)) return nullptr;
    ir::Value* v = n_->outputs[i];
    return v->is_output || !v->uses.empty() ? v : nullptr;
  }
  ir::Value* out(size_t i) const { return n_->has_output(i) ? n_->outputs[i] : nullptr; }

  // Adds op(ins), ai.onnx at `opset` (null entries of `outs` are omitted outputs).
  ir::Node* add(const std::string& op, int opset, std::vector<ir::Value*> ins, std::vector<ir::Value*> outs) {
    ir::Node* node = g_.add_node(op, "", std::move(ins), std::move(outs), unique_name(op));
    node->opset = opset;
    return node;
  }
  // One-output op: writes `out`, or a new value when null; returns the value.
  ir::Value* unary(const std::string& op, int opset, std::vector<ir::Value*> ins, ir::Value* out = nullptr) {
    if (!out) out = fresh(op);
    add(op, opset, std::move(ins), {out});
    return out;
  }
  ir::Value* fresh(const std::string& hint) { return g_.new_value(n_->name + "/" + hint); }
  ir::Value* add_values(ir::Value* a, ir::Value* b, ir::Value* out = nullptr) { return unary("Add", 14, {a, b}, out); }
  // A scalar constant of `dt` (float32/float64 directly; another float type through a Cast, which
  // constant folding removes).
  ir::Value* scalar(DataType dt, double v) {
    if (auto t = real_tensor(dt, {}, {v})) return constant(*t);
    ir::Value* f = constant(*real_tensor(DataType::kFloat32, {}, {v}));
    ir::Value* c = fresh("c_cast");
    set_int(add("Cast", 19, {f}, {c}), "to", static_cast<int64_t>(dt));
    return c;
  }
  ir::Value* constant(const Tensor& t) { return new_constant(g_, n_->name + "/c", t); }
  Status error(const std::string& what) const { return unsupported(n_->describe() + ": " + what); }
  const ir::Node& node() const { return *n_; }

  static void set_int(ir::Node* n, const std::string& k, int64_t v) {
    n->attrs[k].kind = ir::Attribute::Kind::kInt;
    n->attrs[k].i = v;
  }
  static void set_float(ir::Node* n, const std::string& k, float v) {
    n->attrs[k].kind = ir::Attribute::Kind::kFloat;
    n->attrs[k].f = v;
  }
  static void set_string(ir::Node* n, const std::string& k, const std::string& v) {
    n->attrs[k].kind = ir::Attribute::Kind::kString;
    n->attrs[k].s = v;
  }

 private:
  std::string unique_name(const std::string& op) { return n_->name + "/" + op + "_" + std::to_string(parts_++); }

  ir::Graph& g_;
  ir::Node* n_;
  int parts_ = 0;
};

using LowerFn = Status (*)(Lowering&);

// GELU of x (erf, or tanh-approximated) into `out`.
void gelu(Lowering& l, ir::Value* x, bool tanh, ir::Value* out) {
  ir::Node* n = l.add("Gelu", 20, {x}, {out});
  if (tanh) Lowering::set_string(n, "approximate", "tanh");
}

Status lower_gelu(Lowering& l) {
  gelu(l, l.in(0), false, l.out(0));
  return Status::Ok();
}

// FastGelu: 0.5·x·(1 + tanh(0.7978845608·(x + 0.044715·x³))) of X (+ bias): ONNX's tanh GELU.
Status lower_fast_gelu(Lowering& l) {
  ir::Value* x = l.in(1) ? l.add_values(l.in(0), l.in(1)) : l.in(0);
  gelu(l, x, true, l.out(0));
  return Status::Ok();
}

Status lower_bias_gelu(Lowering& l) {
  gelu(l, l.add_values(l.in(0), l.in(1)), false, l.out(0));
  return Status::Ok();
}

// QuickGelu is ONNX's Swish (opset 24): x · sigmoid(alpha · x).
Status lower_quick_gelu(Lowering& l) {
  ir::Node* n = l.add("Swish", 24, {l.in(0)}, {l.out(0)});
  Lowering::set_float(n, "alpha", l.node().attr_float("alpha", 1.702f));
  return Status::Ok();
}

Status lower_bias_add(Lowering& l) {
  l.add_values(l.add_values(l.in(0), l.in(1)), l.in(2), l.out(0));
  return Status::Ok();
}

// input + skip (+ bias), written into the node's sum output (3) when that is read.
ir::Value* skip_sum(Lowering& l, int bias_input) {
  ir::Value* x = l.in(bias_input) ? l.add_values(l.in(0), l.in(bias_input)) : l.in(0);
  return l.add_values(x, l.in(1), l.wanted(3));
}

// 1 / sqrt(mean(x² over the dims from `axis`) + eps) in float32, with those dims 1 (LayerNormalization's
// InvStdDev): the statistic RMSNormalization does not return, computed only where it is read. `type` is
// x's (x may be a value the lowering just made, whose type inference has not seen yet).
void inv_rms(Lowering& l, ir::Value* x, const ir::Type& type, int64_t axis, float eps, ir::Value* out) {
  ir::Value* xf = x;
  if (type.dtype != DataType::kFloat32) {
    xf = l.unary("Cast", 19, {x});
    Lowering::set_int(xf->producer, "to", static_cast<int64_t>(DataType::kFloat32));
  }
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < type.shape.rank(); ++a) axes.push_back(a);
  ir::Value* mean = l.unary("ReduceMean", 18, {l.unary("Mul", 14, {xf, xf}), l.constant(int64_tensor(axes))});
  Lowering::set_int(mean->producer, "keepdims", 1);
  ir::Value* rms = l.unary("Sqrt", 13, {l.add_values(mean, l.scalar(DataType::kFloat32, eps))});
  l.unary("Reciprocal", 13, {rms}, out);
}

// The rank of input i, or an error saying the lowering needs it.
Expected<int> rank_of(Lowering& l, size_t i, const char* what) {
  const ir::Value* v = l.in(i);
  if (!v->type.is_tensor() || !v->type.shape.known)
    return l.error(std::string(what) + "'s rank is unknown; give the model's inputs shapes (kiln needs the rank to "
                   "rewrite this op)");
  return v->type.shape.rank();
}

// SkipLayerNormalization → LayerNormalization(input [+ bias] + skip) over the last dim. Its Mean and
// InvStdDev are the node's outputs 1 and 2 (float32, [..., 1]).
Status lower_skip_layer_norm(Lowering& l) {
  ir::Value* sum = skip_sum(l, 4);
  std::vector<ir::Value*> ins = {sum, l.in(2)};
  if (l.in(3)) ins.push_back(l.in(3));
  ir::Node* ln = l.add("LayerNormalization", 17, ins, {l.out(0), l.wanted(1), l.wanted(2)});
  while (!ln->outputs.empty() && !ln->outputs.back()) ln->outputs.pop_back();
  Lowering::set_int(ln, "axis", -1);
  Lowering::set_float(ln, "epsilon", l.node().attr_float("epsilon", 1e-12f));
  return Status::Ok();
}

// BiasSoftmax(data, bias) → Softmax(data + bias) over the dims from `axis` flattened (ai.onnx Softmax of
// opset 11 has that meaning). ONNX Runtime makes it of an Add and a Softmax, so the bias broadcasts as
// numpy's does: with is_inner_broadcast (the bias of a mask [B, 1, 1, T]) only when it has data's rank.
Status lower_bias_softmax(Lowering& l) {
  const ir::Node& n = l.node();
  const ir::Value* data = l.in(0);
  const ir::Value* bias = l.in(1);
  if (n.attr_int("is_inner_broadcast", 0) != 0 &&
      (!data->type.shape.known || !bias->type.shape.known || data->type.shape.rank() != bias->type.shape.rank()))
    return l.error("is_inner_broadcast needs a bias of the data's rank (dims to broadcast as 1)");
  ir::Node* sm = l.add("Softmax", 11, {l.add_values(l.in(0), l.in(1))}, {l.out(0)});
  Lowering::set_int(sm, "axis", n.attr_int("axis", 1));
  return Status::Ok();
}

// RMS normalization of x over the dims from `axis` into `y`, and its inverse RMS into `inv` when given.
Status rms_norm(Lowering& l, ir::Value* x, ir::Value* scale, int64_t axis, float eps, ir::Value* y, ir::Value* inv) {
  ir::Node* n = l.add("RMSNormalization", 23, {x, scale}, {y});
  Lowering::set_int(n, "axis", axis);
  Lowering::set_float(n, "epsilon", eps);
  if (!inv) return Status::Ok();
  // x's type is the output's (the shape functions of ops/contrib.cpp gave it at import).
  const ir::Type& type = l.out(0)->type;
  if (!type.shape.known) return l.error("inv_std_var is read, and the input's rank is unknown");
  int64_t a = axis;
  if (!ops::normalize_axis(a, type.shape.rank())) return l.error("axis " + std::to_string(axis) + " is out of range");
  inv_rms(l, x, type, a, eps, inv);
  return Status::Ok();
}

Status lower_skip_simplified_layer_norm(Lowering& l) {
  if (l.wanted(1))
    return l.error("its output 1 (mean) is read, but RMS normalization has no mean (ONNX Runtime does not write it "
                   "either); read inv_std_var (output 2) or input_skip_bias_sum (output 3) instead");
  ir::Value* sum = skip_sum(l, 3);
  return rms_norm(l, sum, l.in(2), -1, l.node().attr_float("epsilon", 1e-12f), l.out(0), l.wanted(2));
}

Status lower_simplified_layer_norm(Lowering& l) {
  const int64_t stash = l.node().attr_int("stash_type", 1);
  if (stash != 1) return l.error("stash_type " + std::to_string(stash) + " is not supported (1: float32)");
  return rms_norm(l, l.in(0), l.in(1), l.node().attr_int("axis", -1), l.node().attr_float("epsilon", 1e-5f), l.out(0),
                  l.wanted(1));
}

// FusedMatMul → [Transpose] MatMul, scaled by alpha: a constant B is scaled (constant folding makes one
// weight of it, which fuse-matmul-add then takes), any other product afterwards.
Status lower_fused_matmul(Lowering& l) {
  const ir::Node& n = l.node();
  ir::Value* op[2] = {l.in(0), l.in(1)};
  for (int i = 0; i < 2; ++i) {
    const bool trans = n.attr_int(i ? "transB" : "transA", 0) != 0;
    const bool batch = n.attr_int(i ? "transBatchB" : "transBatchA", 0) != 0;
    if (!trans && !batch) continue;
    KILN_ASSIGN_OR_RETURN(const int rank, rank_of(l, i, i ? "B" : "A"));
    if (rank < 2) return l.error(std::string(i ? "B" : "A") + " must have rank >= 2 to be transposed");
    const std::vector<int> perm = ops::fused_matmul_perm(rank, trans, batch);
    ir::Value* t = l.unary("Transpose", 13, {op[i]});
    t->producer->attrs["perm"] = ints_attribute(std::vector<int64_t>(perm.begin(), perm.end()));
    op[i] = t;
  }
  const float alpha = n.attr_float("alpha", 1.0f);
  if (alpha == 1.0f) {
    l.unary("MatMul", 13, {op[0], op[1]}, l.out(0));
    return Status::Ok();
  }
  const DataType dt = l.in(0)->type.dtype;
  if (l.in(1)->is_constant()) {
    ir::Value* scaled = l.unary("Mul", 14, {op[1], l.scalar(dt, alpha)});
    l.unary("MatMul", 13, {op[0], scaled}, l.out(0));
  } else {
    l.unary("Mul", 14, {l.unary("MatMul", 13, {op[0], op[1]}), l.scalar(dt, alpha)}, l.out(0));
  }
  return Status::Ok();
}

// EmbedLayerNormalization(input_ids, segment_ids, word_embedding, position_embedding, segment_embedding,
// gamma, beta[, mask[, position_ids]]) → LayerNormalization(word[ids] + position[0..S) or [position_ids]
// (+ segment[segment_ids])); mask_index is the mask's sum over the sequence (int32 zeros without a mask),
// embedding_sum the sum before the normalization.
Status lower_embed_layer_norm(Lowering& l) {
  const char* names[] = {"input_ids", "segment_ids", "word_embedding", "position_embedding", "segment_embedding",
                         "gamma", "beta"};
  for (int i : {2, 3, 5, 6})
    if (!l.in(i)) return l.error(std::string("input ") + std::to_string(i) + " (" + names[i] + ") is required");
  if (!l.in(1) != !l.in(4)) return l.error("segment_ids and segment_embedding are given together or not at all");
  ir::Value* ids = l.in(0);
  ir::Value* sum = l.unary("Gather", 13, {l.in(2), ids});
  ir::Value* shape = nullptr;  // Shape(input_ids), made once where needed
  auto dim = [&](int64_t i) {
    if (!shape) shape = l.unary("Shape", 15, {ids});
    return l.unary("Gather", 13, {shape, l.constant(int64_tensor({i}))});
  };
  ir::Value* positions = l.in(8) ? l.unary("Gather", 13, {l.in(3), l.in(8)})
                                 : l.unary("Slice", 13, {l.in(3), l.constant(int64_tensor({0})), dim(1),
                                                         l.constant(int64_tensor({0}))});
  const bool segments = l.in(1) != nullptr;
  sum = l.add_values(sum, positions, segments ? nullptr : l.wanted(2));
  if (segments) sum = l.add_values(sum, l.unary("Gather", 13, {l.in(4), l.in(1)}), l.wanted(2));
  ir::Node* ln = l.add("LayerNormalization", 17, {sum, l.in(5), l.in(6)}, {l.out(0)});
  Lowering::set_int(ln, "axis", -1);
  Lowering::set_float(ln, "epsilon", l.node().attr_float("epsilon", 1e-12f));
  if (ir::Value* mask_index = l.wanted(1)) {
    if (ir::Value* mask = l.in(7)) {
      ir::Value* m = mask;
      if (mask->type.dtype != DataType::kInt32) {
        m = l.unary("Cast", 19, {mask});
        Lowering::set_int(m->producer, "to", static_cast<int64_t>(DataType::kInt32));
      }
      Lowering::set_int(l.add("ReduceSum", 13, {m, l.constant(int64_tensor({1}))}, {mask_index}), "keepdims", 0);
    } else {
      Tensor zero = Tensor::empty(DataType::kInt32, {1});
      zero.data<int32_t>()[0] = 0;
      ir::Node* z = l.add("ConstantOfShape", 9, {dim(0)}, {mask_index});
      z->attrs["value"].kind = ir::Attribute::Kind::kTensor;
      z->attrs["value"].t = zero;
    }
  }
  return Status::Ok();
}

// ---- com.microsoft.Attention (ONNX Runtime's BERT form: one packed projection of the input)

ir::Value* ints_constant(Lowering& l, std::vector<int64_t> v) { return l.constant(int64_tensor(v)); }

// Whether x's and m's first dims are the same (both static and equal, or the same symbol): a 1-D mask of
// lengths per batch row rather than one of its other forms.
bool same_first_dim(const ir::Value* x, const ir::Value* m) {
  const ir::Dim& b = x->type.shape.dims[0];
  const ir::Dim& mb = m->type.shape.dims[0];
  return b.is_static() ? mb.is_static() && mb.value == b.value : !b.symbol.empty() && mb.symbol == b.symbol;
}

// The additive mask of an Attention node: mask_index as 0 where a key is kept and mask_filter_value
// where it is not; the causal mask as the lowest float32 above the diagonal (ONNX Runtime's: a later key
// is never seen, while a padded one is only pushed down by the filter, so a query whose keys are all
// padded still averages them), the two combined by Min; plus attention_bias. Null when there is none.
// `x` is the node's input [B, S, hidden], `S` its static sequence length (or -1).
Expected<ir::Value*> attention_mask(Lowering& l, ir::Value* x, int64_t S) {
  const ir::Node& n = l.node();
  const DataType dt = x->type.dtype;
  const float filter = n.attr_float("mask_filter_value", -10000.0f);
  ir::Value* mask = nullptr;
  if (ir::Value* m = l.in(3)) {
    if (!m->type.shape.known) return l.error("mask_index's rank is unknown");
    const int rank = m->type.shape.rank();
    ir::Value* keep = nullptr;  // bool [B, T] or [B, S, T]
    if (rank == 1) {
      // Right padding: key j of batch b is kept when j < mask_index[b]. ([2B], with start positions,
      // is another form.)
      if (!same_first_dim(x, m))
        return l.error("a 1-D mask_index must be the sequence lengths [batch] (its [2 * batch] form with start "
                       "positions is not supported)");
      ir::Value* len = l.unary("Cast", 19, {m});
      Lowering::set_int(len->producer, "to", static_cast<int64_t>(DataType::kInt64));
      ir::Value* shape = l.unary("Shape", 15, {x});
      Tensor one = int64_tensor({1}, true);
      ir::Value* t = l.unary("Gather", 13, {shape, l.constant(one)});
      ir::Value* keys = l.unary("Range", 11, {l.constant(int64_tensor({0}, true)), t, l.constant(one)});
      keep = l.unary("Less", 13, {keys, l.unary("Unsqueeze", 13, {len, ints_constant(l, {1})})});
    } else if (rank == 2 || rank == 3) {
      // A key is kept where the mask is > 0 (mask_index is int32).
      if (m->type.dtype != DataType::kInt32) return l.error("mask_index must be int32");
      Tensor zero = Tensor::empty(DataType::kInt32, {});
      zero.data<int32_t>()[0] = 0;
      keep = l.unary("Greater", 13, {m, l.constant(zero)});
    } else {
      return l.error("mask_index of rank " + std::to_string(rank) + " is not supported (1-D sequence lengths, or a "
                     "2-D [batch, keys] or 3-D [batch, queries, keys] 0/1 mask)");
    }
    ir::Value* additive = l.unary("Where", 16, {keep, l.scalar(dt, 0), l.scalar(dt, filter)});
    mask = l.unary("Unsqueeze", 13, {additive, ints_constant(l, rank == 3 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2})});
  }
  if (n.attr_int("unidirectional", 0) != 0) {
    if (S < 0) return l.error("unidirectional attention needs a static sequence length");
    auto causal = real_tensor(DataType::kFloat32, {S, S}, std::vector<double>(static_cast<size_t>(S * S), 0.0));
    for (int64_t i = 0; i < S; ++i)
      for (int64_t j = i + 1; j < S; ++j) causal->data<float>()[i * S + j] = std::numeric_limits<float>::lowest();
    ir::Value* c = l.constant(*causal);
    if (dt != DataType::kFloat32) {
      c = l.unary("Cast", 19, {c});
      Lowering::set_int(c->producer, "to", static_cast<int64_t>(dt));
    }
    mask = mask ? l.unary("Min", 13, {mask, c}) : c;
  }
  if (ir::Value* bias = l.in(5)) mask = mask ? l.add_values(mask, bias) : bias;
  return mask;
}

// Attention(input [B, S, E], weights [E, 3·hidden], bias, mask_index, ..., attention_bias) → the packed
// QKV form fuse-attention makes one kiln.Attention of (packed_qkv = 1: Q, K and V read in place from
// the one projection), spelt as timm exports it:
//   qkv = input · weights + bias;  q, k, v = Squeeze(Split(Transpose(Reshape(qkv, [0, 0, 3, H, D]), 2,0,3,1,4)))
//   y   = Reshape(Transpose(Softmax(q · Transpose(k, 0,1,3,2) · scale + mask) · v, 0,2,1,3), [0, 0, H·D])
Status lower_attention(Lowering& l) {
  const ir::Node& n = l.node();
  if (l.in(4) || l.in(6) || l.wanted(1))
    return l.error("past and present key/value states are not supported (a model without a cache runs)");
  if (n.attr_int("do_rotary", 0) != 0) return l.error("do_rotary is not supported");
  ir::Value* x = l.in(0);
  ir::Value* w = l.in(1);
  if (!x->type.shape.known || x->type.shape.rank() != 3) return l.error("the input must be 3-D [batch, sequence, hidden]");
  if (!w->type.shape.known || w->type.shape.rank() != 2 || !w->type.shape.dims[1].is_static())
    return l.error("the weights must be 2-D with a static second dim");
  const int64_t H = n.attr_int("num_heads", 0);
  const int64_t total = w->type.shape.dims[1].value;
  std::vector<int64_t> sizes = n.attr_ints("qkv_hidden_sizes");
  if (sizes.empty()) sizes.assign(3, total / 3);
  if (sizes.size() != 3 || sizes[0] != sizes[1] || sizes[1] != sizes[2] || 3 * sizes[0] != total)
    return l.error("Q, K and V must have one hidden size (qkv_hidden_sizes of three equal parts of the weights' columns)");
  if (H < 1 || sizes[0] % H != 0)
    return l.error("the hidden size " + std::to_string(sizes[0]) + " is not a multiple of num_heads " + std::to_string(H));
  const int64_t D = sizes[0] / H;
  const DataType dt = x->type.dtype;
  const ir::Dim& seq = x->type.shape.dims[1];
  KILN_ASSIGN_OR_RETURN(ir::Value* mask, attention_mask(l, x, seq.is_static() ? seq.value : -1));

  ir::Value* qkv = l.unary("MatMul", 13, {x, w});
  if (l.in(2)) qkv = l.add_values(qkv, l.in(2));
  ir::Value* heads = l.unary("Transpose", 13, {l.unary("Reshape", 14, {qkv, ints_constant(l, {0, 0, 3, H, D})})});
  heads->producer->attrs["perm"] = ints_attribute({2, 0, 3, 1, 4});
  std::vector<ir::Value*> parts = {l.fresh("q"), l.fresh("k"), l.fresh("v")};
  Lowering::set_int(l.add("Split", 13, {heads}, parts), "axis", 0);
  for (ir::Value*& p : parts) p = l.unary("Squeeze", 13, {p, ints_constant(l, {0})});
  ir::Value* kt = l.unary("Transpose", 13, {parts[1]});
  kt->producer->attrs["perm"] = ints_attribute({0, 1, 3, 2});
  const float scale = n.attr_float("scale", 0.0f);
  ir::Value* scores = l.unary("Mul", 14, {l.unary("MatMul", 13, {parts[0], kt}),
                                          l.scalar(dt, scale != 0.0f ? scale : 1.0 / std::sqrt(static_cast<double>(D)))});
  if (mask) scores = l.add_values(scores, mask);
  ir::Value* probs = l.unary("Softmax", 13, {scores});
  Lowering::set_int(probs->producer, "axis", -1);
  ir::Value* context = l.unary("Transpose", 13, {l.unary("MatMul", 13, {probs, parts[2]})});
  context->producer->attrs["perm"] = ints_attribute({0, 2, 1, 3});
  l.unary("Reshape", 14, {context, ints_constant(l, {0, 0, H * D})}, l.out(0));
  return Status::Ok();
}

// ---- com.microsoft.RotaryEmbedding → RotaryEmbedding (opset 23): the same rotation of X [B, S, hidden]
// or [B, H, S, Dh] by the caches cos/sin [max_position, rd/2] at position_ids [B, S], interleaved or
// not, over the first rotary_embedding_dim values of each head. ONNX Runtime's other position_ids, one
// offset [1] (positions offset + s), become offset + Range(S) expanded to [B, S]; without num_heads a 3-D
// X has heads of twice the caches' last dim (as ONNX Runtime reads it). `scale` is not read (ONNX
// Runtime's CPU kernel does not read it either); is_packed_batching is refused.
Status lower_rotary_embedding(Lowering& l) {
  const ir::Node& n = l.node();
  if (n.attr_int("is_packed_batching", 0) != 0) return l.error("is_packed_batching is not supported");
  for (size_t i = 0; i < 4; ++i)
    if (!l.in(i)) return l.error("input " + std::to_string(i) + " is required");
  ir::Value* x = l.in(0);
  ir::Value* pos = l.in(1);
  const ir::SymShape& xs = x->type.shape;
  if (!xs.known || (xs.rank() != 3 && xs.rank() != 4)) return l.error("the input must be 3-D or 4-D");
  const bool packed = xs.rank() == 3;
  int64_t heads = n.attr_int("num_heads", 0);
  const int64_t rd = n.attr_int("rotary_embedding_dim", 0);
  if (packed && heads <= 0) {
    const ir::SymShape& cs = l.in(2)->type.shape;
    const bool known = rd == 0 && cs.known && cs.rank() == 2 && cs.dims[1].is_static() && cs.dims[1].value > 0 &&
                       xs.dims[2].is_static() && xs.dims[2].value % (2 * cs.dims[1].value) == 0;
    if (!known) return l.error("num_heads is required (a 3-D input whose hidden size is not a multiple of 2 x the "
                               "caches' last dim, or rotary_embedding_dim set)");
    heads = xs.dims[2].value / (2 * cs.dims[1].value);
  }
  const ir::SymShape& ps = pos->type.shape;
  if (!ps.known || (ps.rank() != 1 && ps.rank() != 2)) return l.error("position_ids must be [batch, sequence] or [1]");
  ir::Value* ids = pos;
  if (ps.rank() == 1) {
    if (!ps.dims[0].is_static() || ps.dims[0].value != 1 || pos->type.dtype != DataType::kInt64)
      return l.error("a 1-D position_ids must be one int64 offset");
    ir::Value* shape = l.unary("Shape", 15, {x});
    const int64_t seq = packed ? 1 : 2;
    ir::Value* b = l.unary("Gather", 13, {shape, ints_constant(l, {0})});
    ir::Value* s = l.unary("Gather", 13, {shape, ints_constant(l, {seq})});
    ir::Value* s0 = l.unary("Gather", 13, {shape, l.constant(int64_tensor({seq}, true))});
    ir::Value* r = l.unary("Range", 11, {l.constant(int64_tensor({0}, true)), s0, l.constant(int64_tensor({1}, true))});
    ir::Value* bs = l.unary("Concat", 13, {b, s});
    Lowering::set_int(bs->producer, "axis", 0);
    ids = l.unary("Expand", 13, {l.add_values(r, pos), bs});
  }
  ir::Node* rope = l.add("RotaryEmbedding", 23, {x, l.in(2), l.in(3), ids}, {l.out(0)});
  Lowering::set_int(rope, "interleaved", n.attr_int("interleaved", 0));
  if (rd > 0) Lowering::set_int(rope, "rotary_embedding_dim", rd);
  if (packed) Lowering::set_int(rope, "num_heads", heads);
  return Status::Ok();
}

// LayerNormalization of an ai.onnx opset before 17 is ONNX Runtime's own (registered in the ai.onnx
// domain, version 1, with opset 17's inputs, outputs and attributes): its optimizer writes it into
// models of any opset. It becomes the opset-17 op.
Status lower_legacy_layer_norm(Lowering& l) {
  const ir::Node& n = l.node();
  ir::Node* ln = l.add("LayerNormalization", 17, n.inputs, n.outputs);
  ln->attrs = n.attrs;
  return Status::Ok();
}

// ---- ONNX Runtime's QOperator ops (ops/contrib_quant.cpp): DequantizeLinear of each quantized input,
// the float op, QuantizeLinear of its result. ONNX Runtime's CPU kernels compute these in float32 too
// (lookup tables of the dequantized function for the unary ones, float requantization for the rest), so
// an output differs from its by at most one step, where the float value lies within rounding of a
// half step (tests/python/test_contrib_quant.py counts them).

// Input i, or an error naming it when a required input is missing.
Expected<ir::Value*> required(Lowering& l, size_t i, const char* what) {
  if (!l.in(i)) return l.error(std::string(what) + " (input " + std::to_string(i) + ") is required");
  return l.in(i);
}

// The real value of quantized input x: DequantizeLinear(x, scale[, zero point]) (per `axis` when the scale
// is a vector). x must be 8-bit.
Expected<ir::Value*> dequantize(Lowering& l, size_t x, size_t scale, size_t zp, const char* what, int64_t axis = 1) {
  KILN_ASSIGN_OR_RETURN(ir::Value* q, required(l, x, what));
  KILN_ASSIGN_OR_RETURN(ir::Value* s, required(l, scale, "its scale"));
  const DataType dt = q->type.dtype;
  if (dt != DataType::kUInt8 && dt != DataType::kInt8 && dt != DataType::kUndefined)
    return l.error(std::string(what) + " must be uint8 or int8, got " + dtype_name(dt));
  std::vector<ir::Value*> ins = {q, s};
  if (l.in(zp)) ins.push_back(l.in(zp));
  ir::Value* v = l.unary("DequantizeLinear", 13, ins);
  Lowering::set_int(v->producer, "axis", axis);
  return v;
}

// QuantizeLinear(v, scale, zero point) into the node's output; an omitted zero point is 0 of `dt` (the
// type of the op's quantized input, as in ONNX Runtime).
Status quantize(Lowering& l, ir::Value* v, size_t scale, size_t zp, DataType dt) {
  KILN_ASSIGN_OR_RETURN(ir::Value* s, required(l, scale, "the output's scale"));
  ir::Value* z = l.in(zp);
  if (!z) {
    Tensor t = Tensor::empty(dt == DataType::kInt8 ? DataType::kInt8 : DataType::kUInt8, Shape{});
    std::memset(t.raw(), 0, 1);
    z = l.constant(t);
  }
  l.add("QuantizeLinear", 13, {v, s, z}, {l.out(0)});
  return Status::Ok();
}

DataType in_dtype(Lowering& l, size_t i) { return l.in(i) ? l.in(i)->type.dtype : DataType::kUInt8; }

// QLinearAdd, QLinearMul: op(A, B) of the real values, broadcast. (ONNX Runtime 1.22's x86 QLinearMul
// rounds in an order that none of the natural float32 forms reproduces — the integer product times
// a_scale · b_scale / c_scale included — so 0.2-0.4% of its outputs differ by one step from any of them.)
template <const char* kOp>
Status lower_qlinear_binary(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* a, dequantize(l, 0, 1, 2, "A"));
  KILN_ASSIGN_OR_RETURN(ir::Value* b, dequantize(l, 3, 4, 5, "B"));
  return quantize(l, l.unary(kOp, 14, {a, b}), 6, 7, in_dtype(l, 0));
}
constexpr char kAdd[] = "Add";
constexpr char kMul[] = "Mul";

Status lower_qlinear_sigmoid(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* x, dequantize(l, 0, 1, 2, "X"));
  return quantize(l, l.unary("Sigmoid", 13, {x}), 3, 4, in_dtype(l, 0));
}

Status lower_qlinear_leaky_relu(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* x, dequantize(l, 0, 1, 2, "X"));
  ir::Value* y = l.unary("LeakyRelu", 16, {x});
  Lowering::set_float(y->producer, "alpha", l.node().attr_float("alpha", 0.01f));
  return quantize(l, y, 3, 4, in_dtype(l, 0));
}

Status lower_qlinear_concat(Lowering& l) {
  const size_t n = l.node().inputs.size();
  if (n < 5 || (n - 2) % 3 != 0)
    return l.error("inputs must be Y_scale, Y_zero_point and triples (X, X_scale, X_zero_point), got " +
                   std::to_string(n));
  std::vector<ir::Value*> xs;
  for (size_t i = 2; i < n; i += 3) {
    KILN_ASSIGN_OR_RETURN(ir::Value* x, dequantize(l, i, i + 1, i + 2, "each X"));
    xs.push_back(x);
  }
  ir::Value* y = l.unary("Concat", 13, xs);
  Lowering::set_int(y->producer, "axis", l.node().attr_int("axis", 0));
  return quantize(l, y, 0, 1, in_dtype(l, 2));
}

// x (rank r) transposed by `perm`.
ir::Value* transpose(Lowering& l, ir::Value* x, std::vector<int64_t> perm) {
  ir::Value* y = l.unary("Transpose", 13, {x});
  y->producer->attrs["perm"] = ints_attribute(std::move(perm));
  return y;
}

// QLinearAveragePool, QLinearGlobalAveragePool: the float pool with the node's attributes; a
// channels_last input ([N, spatial..., C]) is pooled in NCHW between two transposes.
Status lower_qlinear_pool(Lowering& l) {
  const ir::Node& n = l.node();
  const bool global = n.op_type == "QLinearGlobalAveragePool";
  KILN_ASSIGN_OR_RETURN(ir::Value* x, dequantize(l, 0, 1, 2, "X"));
  const bool last = n.attr_int("channels_last", 0) != 0;
  int r = 0;
  if (last) {
    KILN_ASSIGN_OR_RETURN(r, rank_of(l, 0, "X"));
    if (r < 3) return l.error("X must have rank >= 3, got " + std::to_string(r));
    std::vector<int64_t> to_first = {0, r - 1};
    for (int i = 1; i + 1 < r; ++i) to_first.push_back(i);
    x = transpose(l, x, to_first);
  }
  ir::Value* y = l.unary(global ? "GlobalAveragePool" : "AveragePool", global ? 1 : 19, {x});
  for (const auto& [k, a] : n.attrs)
    if (k != "channels_last") y->producer->attrs[k] = a;
  if (last) {
    std::vector<int64_t> to_last = {0};
    for (int i = 2; i < r; ++i) to_last.push_back(i);
    to_last.push_back(1);
    y = transpose(l, y, to_last);
  }
  return quantize(l, y, 3, 4, in_dtype(l, 0));
}

// QLinearSoftmax: the Softmax of the model's opset (`opset`): before 13 over the dims from axis flattened.
Status lower_qlinear_softmax(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* x, dequantize(l, 0, 1, 2, "X"));
  const bool coerced = l.node().attr_int("opset", 13) < 13;
  ir::Value* y = l.unary("Softmax", coerced ? 11 : 13, {x});
  Lowering::set_int(y->producer, "axis", l.node().attr_int("axis", coerced ? 1 : -1));
  return quantize(l, y, 3, 4, in_dtype(l, 0));
}

// QGemm: alpha · A'B' + alpha · C' (ONNX Runtime adds the int32 C to the accumulator before scaling by
// alpha · a_scale · b_scale), C' = C · a_scale · b_scale; quantized when y_scale is given, else float32.
Status lower_qgemm(Lowering& l) {
  const ir::Node& n = l.node();
  const bool trans_b = n.attr_int("transB", 0) != 0;
  KILN_ASSIGN_OR_RETURN(ir::Value* a, dequantize(l, 0, 1, 2, "A"));
  KILN_ASSIGN_OR_RETURN(ir::Value* b, dequantize(l, 3, 4, 5, "B", trans_b ? 0 : 1));
  const float alpha = n.attr_float("alpha", 1.0f);
  std::vector<ir::Value*> ins = {a, b};
  if (ir::Value* c = l.in(6)) {
    if (c->type.dtype != DataType::kInt32 && c->type.dtype != DataType::kUndefined)
      return l.error(std::string("C must be int32, got ") + dtype_name(c->type.dtype));
    KILN_ASSIGN_OR_RETURN(const int rc, rank_of(l, 6, "C"));
    ir::Value* cv = l.unary("DequantizeLinear", 13, {c, l.unary("Mul", 14, {l.in(1), l.in(4)})});
    Lowering::set_int(cv->producer, "axis", std::max(rc - 1, 0));
    ins.push_back(cv);
  }
  ir::Node* g = l.add("Gemm", 13, ins, {l.in(7) ? l.fresh("gemm") : l.out(0)});
  Lowering::set_float(g, "alpha", alpha);
  Lowering::set_float(g, "beta", alpha);
  Lowering::set_int(g, "transA", n.attr_int("transA", 0));
  Lowering::set_int(g, "transB", trans_b ? 1 : 0);
  if (!l.in(7)) return Status::Ok();
  return quantize(l, g->outputs[0], 7, 8, in_dtype(l, 0));
}

// ---- Dynamic quantization (quantize_dynamic, then ONNX Runtime's optimizer): the int32 product
// scaled to float32 as ONNX Runtime's kernels do, acc · (a_scale · b_scale) + bias.

// Cast(acc) · scale (+ bias) into the node's output.
void scale_product(Lowering& l, ir::Value* acc, ir::Value* scale, ir::Value* bias) {
  ir::Value* f = l.unary("Cast", 19, {acc});
  Lowering::set_int(f->producer, "to", static_cast<int64_t>(DataType::kFloat32));
  ir::Value* y = l.unary("Mul", 14, {f, scale}, bias ? nullptr : l.out(0));
  if (bias) l.add_values(y, bias, l.out(0));
}

// MatMulInteger(a, b, a_zp, b_zp), omitted zero points left out.
ir::Value* integer_product(Lowering& l, ir::Value* a, ir::Value* b, ir::Value* a_zp, ir::Value* b_zp) {
  std::vector<ir::Value*> ins = {a, b, a_zp, b_zp};
  while (!ins.back()) ins.pop_back();
  return l.unary("MatMulInteger", 10, ins);
}

// MatMulIntegerToFloat(A, B, a_scale, b_scale[, a_zp[, b_zp[, bias]]]).
Status lower_matmul_integer_to_float(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* a, required(l, 0, "A"));
  KILN_ASSIGN_OR_RETURN(ir::Value* b, required(l, 1, "B"));
  KILN_ASSIGN_OR_RETURN(ir::Value* as, required(l, 2, "a_scale"));
  KILN_ASSIGN_OR_RETURN(ir::Value* bs, required(l, 3, "b_scale"));
  scale_product(l, integer_product(l, a, b, l.in(4), l.in(5)), l.unary("Mul", 14, {as, bs}), l.in(6));
  return Status::Ok();
}

// DynamicQuantizeMatMul(A, B, b_scale[, b_zp[, bias]]): A quantized to uint8 as DynamicQuantizeLinear does.
Status lower_dynamic_quantize_matmul(Lowering& l) {
  KILN_ASSIGN_OR_RETURN(ir::Value* a, required(l, 0, "A"));
  KILN_ASSIGN_OR_RETURN(ir::Value* b, required(l, 1, "B"));
  KILN_ASSIGN_OR_RETURN(ir::Value* bs, required(l, 2, "b_scale"));
  if (a->type.dtype != DataType::kFloat32 && a->type.dtype != DataType::kUndefined)
    return l.error(std::string("A must be float32, got ") + dtype_name(a->type.dtype));
  ir::Value* q = l.fresh("a_q");
  ir::Value* as = l.fresh("a_scale");
  ir::Value* az = l.fresh("a_zero_point");
  l.add("DynamicQuantizeLinear", 11, {a}, {q, as, az});
  scale_product(l, integer_product(l, q, b, az, l.in(3)), l.unary("Mul", 14, {as, bs}), l.in(4));
  return Status::Ok();
}

// ---- com.microsoft.MultiHeadAttention and GroupQueryAttention → Attention (opset 23) of 4-D Q, K, V
// [batch, heads, sequence, head size], so that every device's attention kernels run them.

// x [B, S, heads·D] → [B, heads, S, D].
ir::Value* split_heads(Lowering& l, ir::Value* x, int64_t heads) {
  return transpose(l, l.unary("Reshape", 14, {x, ints_constant(l, {0, 0, heads, -1})}), {0, 2, 1, 3});
}

// Attention's Y [B, heads, S, D] → [B, S, heads·D] into `out`.
void merge_heads(Lowering& l, ir::Value* y, ir::Value* out) {
  l.unary("Reshape", 14, {transpose(l, y, {0, 2, 1, 3}), ints_constant(l, {0, 0, -1})}, out);
}

// Part `part` of `parts` equal slices of x along `axis`, that axis removed (the packed forms' [.., 3, ..]).
ir::Value* packed_part(Lowering& l, ir::Value* x, int64_t axis, int64_t part) {
  return l.unary("Squeeze", 13, {l.unary("Gather", 13, {x, l.constant(int64_tensor({part}))}), ints_constant(l, {axis})});
}

// Attention(q, k, v[, mask[, past_key, past_value]]) of 4-D operands into y (and the presents).
ir::Node* attention23(Lowering& l, std::vector<ir::Value*> ins, std::vector<ir::Value*> outs, float scale,
                      bool causal) {
  while (!ins.empty() && !ins.back()) ins.pop_back();
  while (!outs.empty() && !outs.back()) outs.pop_back();
  ir::Node* a = l.add("Attention", 23, ins, outs);
  if (scale != 0.0f) Lowering::set_float(a, "scale", scale);
  if (causal) Lowering::set_int(a, "is_causal", 1);
  return a;
}

// MultiHeadAttention(query, key, value, bias, key_padding_mask, attention_bias, past_key, past_value,
// past_sequence_length, cache_indirection) → output, present_key, present_value, qk.
//   query [B, S, D], key/value [B, L, D] / [B, L, Dv] (or [B, N, L, H], the heads already split), or
//   packed: query [B, S, N, 3, H] with no key and value, key [B, L, N, 2, H] with no value;
//   bias [D + D + Dv] added to the 3-D query, key and value;
//   key_padding_mask int32 [B, T] or [B, S, T] (T = past + L): mask_filter_value where it is 0, or the
//   key lengths [B]: mask_filter_value from there;
//   attention_bias [B or 1, N or 1, S, T] added to the scores; unidirectional: a causal mask that lets
//   query i see keys up to past + i (Attention's is_causal; ONNX Runtime's lowest float32 there gives
//   the same probabilities, a row never being all masked by it);
//   past_key/past_value [B, N, P, H]: present = Concat(past, new) along the sequence.
Status lower_multi_head_attention(Lowering& l) {
  const ir::Node& n = l.node();
  const int64_t N = n.attr_int("num_heads", 0);
  if (l.in(8) || l.in(9))
    return l.error("past_sequence_length and cache_indirection (beam search's shared buffers) are not supported");
  if (l.wanted(3)) return l.error("output 3 (qk) is not supported");
  if (!l.in(6) != !l.in(7)) return l.error("past_key and past_value must be given together");
  KILN_ASSIGN_OR_RETURN(const int qr, rank_of(l, 0, "query"));
  const int kr = l.in(1) ? l.in(1)->type.shape.known ? l.in(1)->type.shape.rank() : -1 : 0;
  const int vr = l.in(2) ? l.in(2)->type.shape.known ? l.in(2)->type.shape.rank() : -1 : 0;
  if (kr < 0 || vr < 0) return l.error("key's and value's ranks must be known");
  ir::Value *q = nullptr, *k = nullptr, *v = nullptr;
  if (qr == 5) {
    if (kr || vr) return l.error("a packed 5-D query [B, S, N, 3, H] takes no key and value");
    ir::Value* t = transpose(l, l.in(0), {3, 0, 2, 1, 4});  // [3, B, N, S, H]
    q = packed_part(l, t, 0, 0), k = packed_part(l, t, 0, 1), v = packed_part(l, t, 0, 2);
  } else if (qr == 3 && kr == 5 && vr == 0) {
    ir::Value* t = transpose(l, l.in(1), {3, 0, 2, 1, 4});  // [2, B, N, L, H]
    k = packed_part(l, t, 0, 0), v = packed_part(l, t, 0, 1);
  } else if (qr == 3 && ((kr == 3 && vr == 3) || (kr == 4 && vr == 4))) {
    k = l.in(1), v = l.in(2);
  } else {
    return l.error("query " + std::to_string(qr) + "-D, key " + std::to_string(kr) + "-D and value " +
                   std::to_string(vr) + "-D is not a supported form (3-D Q, K, V; 3-D Q with 4-D K, V; a packed "
                   "5-D key [B, L, N, 2, H]; a packed 5-D query [B, S, N, 3, H])");
  }
  if (qr == 3) q = l.in(0);
  if (ir::Value* bias = l.in(3)) {
    if (qr != 3 || kr != 3) return l.error("bias is supported with 3-D query, key and value only");
    const ir::Dim& d = q->type.shape.dims[2];
    const ir::Dim& dv = v->type.shape.dims[2];
    if (!d.is_static() || !dv.is_static()) return l.error("bias needs static hidden sizes of query and value");
    std::vector<ir::Value*> parts = {l.fresh("bias_q"), l.fresh("bias_k"), l.fresh("bias_v")};
    Lowering::set_int(l.add("Split", 13, {bias, ints_constant(l, {d.value, d.value, dv.value})}, parts), "axis", 0);
    q = l.add_values(q, parts[0]), k = l.add_values(k, parts[1]), v = l.add_values(v, parts[2]);
  }
  if (qr == 3) q = split_heads(l, q, N);
  if (kr == 3) k = split_heads(l, k, N), v = split_heads(l, v, N);
  const DataType dt = l.in(0)->type.dtype;
  ir::Value* mask = nullptr;
  if (ir::Value* m = l.in(4)) {
    const int mr = m->type.shape.known ? m->type.shape.rank() : -1;
    if (mr < 1 || mr > 3)
      return l.error("key_padding_mask must be the key lengths [batch], a 2-D [batch, keys] or a 3-D [batch, "
                     "queries, keys] 0/1 mask");
    if (m->type.dtype != DataType::kInt32) return l.error("key_padding_mask must be int32");
    ir::Value* keep = nullptr;
    if (mr == 1) {
      // Key t of row b is kept when t < lengths[b] (t over past and new keys). ([3·batch + 2], with
      // start and end positions, is another form.)
      if (!same_first_dim(l.in(0), m))
        return l.error("a 1-D key_padding_mask must be the key lengths [batch] (its [3 * batch + 2] form is not "
                       "supported)");
      auto length = [&](ir::Value* x) { return l.unary("Gather", 13, {l.unary("Shape", 15, {x}), ints_constant(l, {2})}); };
      ir::Value* total = length(k);
      if (l.in(6)) total = l.add_values(total, length(l.in(6)));
      ir::Value* keys = l.unary("Range", 11, {l.constant(int64_tensor({0}, true)),
                                              l.unary("Squeeze", 13, {total, ints_constant(l, {0})}),
                                              l.constant(int64_tensor({1}, true))});
      ir::Value* len = l.unary("Cast", 19, {m});
      Lowering::set_int(len->producer, "to", static_cast<int64_t>(DataType::kInt64));
      keep = l.unary("Less", 13, {keys, l.unary("Unsqueeze", 13, {len, ints_constant(l, {1})})});
    } else {
      Tensor zero = Tensor::empty(DataType::kInt32, {});
      zero.data<int32_t>()[0] = 0;
      keep = l.unary("Greater", 13, {m, l.constant(zero)});
    }
    const float filter = n.attr_float("mask_filter_value", -10000.0f);
    ir::Value* additive = l.unary("Where", 16, {keep, l.scalar(dt, 0), l.scalar(dt, filter)});
    const std::vector<int64_t> axes = mr == 3 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 2};
    mask = l.unary("Unsqueeze", 13, {additive, ints_constant(l, axes)});
  }
  if (ir::Value* bias = l.in(5)) mask = mask ? l.add_values(mask, bias) : bias;
  ir::Value* y = l.fresh("y");
  attention23(l, {q, k, v, mask, l.in(6), l.in(7)}, {y, l.in(6) ? l.out(1) : nullptr, l.in(6) ? l.out(2) : nullptr},
              n.attr_float("scale", 0.0f), n.attr_int("unidirectional", 0) != 0);
  if (!l.in(6) && (l.wanted(1) || l.wanted(2))) {
    // Without a past, the presents are the heads of key and value.
    if (l.wanted(1)) l.unary("Identity", 16, {k}, l.out(1));
    if (l.wanted(2)) l.unary("Identity", 16, {v}, l.out(2));
  }
  merge_heads(l, y, l.out(0));
  return Status::Ok();
}

// GroupQueryAttention(query, key, value, past_key, past_value, seqlens_k, total_sequence_length,
// cos_cache, sin_cache, position_ids, attention_bias) → output, present_key, present_value, as ONNX
// Runtime's CPU kernel computes it:
//   query [B, S, N·H], key/value [B, S, Nkv·H] (or a packed query [B, S, (N + 2·Nkv)·H]); the KV heads
//   are shared by N / Nkv query heads each (Attention's GQA);
//   total T = total_sequence_length; a prompt when S = T (then every row's past is 0), else row b's past
//   is p_b = seqlens_k[b] + 1 - S; present [B, Nkv, max(T, P), H] is past_key's first p_b positions,
//   then the S new ones, then zeros (GatherElements of Concat(past, new) by position, and a Where);
//   query i of row b sees keys p_b + i - local_window_size ... p_b + i (a boolean mask);
//   do_rotary: RotaryEmbedding (opset 23) of query and key at positions p_b + i (or position_ids; of a
//   prompt's, ONNX Runtime 1.22 reads only position_ids[0, 0] and counts on from it in every row), over
//   the first 2 · cos_cache's last dim values of each head, interleaved as rotary_interleaved says;
//   softcap: Attention's (cap · tanh(score / cap) before the mask); attention_bias added to the scores
//   after it; smooth_softmax: a softmax with one more logit, 0.
// The local window is ONNX Runtime 1.22's: local_window_size + 1 keys (later releases see one fewer).
// A padded row (seqlens_k[b] + 1 < S in a prompt) has queries past its length whose outputs ONNX Runtime
// leaves undefined; kiln's differ.
Status lower_group_query_attention(Lowering& l) {
  const ir::Node& n = l.node();
  const int64_t N = n.attr_int("num_heads", 0), Nkv = n.attr_int("kv_num_heads", 0);
  if (N < 1 || Nkv < 1 || N % Nkv != 0)
    return l.error("num_heads " + std::to_string(N) + " must be a multiple of kv_num_heads " + std::to_string(Nkv));
  const float softcap = n.attr_float("softcap", 0.0f);
  if (softcap < 0.0f) return l.error("softcap must be >= 0");
  const bool smooth = n.attr_int("smooth_softmax", 0) != 0;
  if (smooth && l.in(10)) return l.error("smooth_softmax with attention_bias is not supported");
  KILN_ASSIGN_OR_RETURN(ir::Value* seqlens, required(l, 5, "seqlens_k"));
  KILN_ASSIGN_OR_RETURN(ir::Value* total_in, required(l, 6, "total_sequence_length"));
  if (!l.in(3) != !l.in(4)) return l.error("past_key and past_value must be given together");
  const bool rotary = n.attr_int("do_rotary", 0) != 0;
  if (rotary && (!l.in(7) || !l.in(8))) return l.error("do_rotary needs cos_cache and sin_cache");
  KILN_ASSIGN_OR_RETURN(const int qr, rank_of(l, 0, "query"));
  if (qr != 3) return l.error("query must be 3-D [batch, sequence, hidden]");
  const ir::Dim& hidden = l.in(0)->type.shape.dims[2];
  if (!hidden.is_static()) return l.error("query's hidden size must be static");
  const bool packed = !l.in(1);
  if (packed != !l.in(2)) return l.error("key and value must be given together (or neither, with a packed query)");
  const int64_t H = hidden.value / (packed ? N + 2 * Nkv : N);
  if (H < 1 || hidden.value % (packed ? N + 2 * Nkv : N) != 0)
    return l.error("query's hidden size " + std::to_string(hidden.value) + " is not a multiple of the heads");
  const DataType dt = l.in(0)->type.dtype;
  ir::Value *q = l.in(0), *k = l.in(1), *v = l.in(2);
  if (packed) {
    std::vector<ir::Value*> parts = {l.fresh("q"), l.fresh("k"), l.fresh("v")};
    Lowering::set_int(l.add("Split", 13, {q, ints_constant(l, {N * H, Nkv * H, Nkv * H})}, parts), "axis", 2);
    q = parts[0], k = parts[1], v = parts[2];
  }
  q = split_heads(l, q, N), k = split_heads(l, k, Nkv), v = split_heads(l, v, Nkv);

  // Lengths as int64: S [1], T [1], each row's past p [B].
  auto cast64 = [&](ir::Value* x) {
    ir::Value* c = l.unary("Cast", 19, {x});
    Lowering::set_int(c->producer, "to", static_cast<int64_t>(DataType::kInt64));
    return c;
  };
  ir::Value* S = l.unary("Gather", 13, {l.unary("Shape", 15, {l.in(0)}), ints_constant(l, {1})});
  ir::Value* T = cast64(l.unary("Reshape", 14, {total_in, ints_constant(l, {1})}));
  ir::Value* one = ints_constant(l, {1});
  ir::Value* zero = l.constant(int64_tensor({0}, true));
  ir::Value* decode_past = l.unary("Sub", 14, {l.add_values(cast64(seqlens), one), S});
  ir::Value* prompt = l.unary("Equal", 13, {S, T});
  ir::Value* p = l.unary("Where", 16, {prompt, zero, decode_past});  // [B]
  ir::Value* pb = l.unary("Unsqueeze", 13, {p, ints_constant(l, {1})});                      // [B, 1]
  ir::Value* s0 = l.unary("Squeeze", 13, {S, ints_constant(l, {0})});
  ir::Value* steps = l.unary("Range", 11, {zero, s0, l.constant(int64_tensor({1}, true))});  // [S]
  ir::Value* positions = l.add_values(pb, l.unary("Unsqueeze", 13, {steps, ints_constant(l, {0})}));  // [B, S]

  if (rotary) {
    const ir::SymShape& cs = l.in(7)->type.shape;
    if (!cs.known || cs.rank() != 2 || !cs.dims[1].is_static())
      return l.error("cos_cache must be 2-D [positions, rotary dim / 2] with a static last dim");
    const int64_t rd = 2 * cs.dims[1].value;
    if (rd > H) return l.error("cos_cache's last dim is more than half the head size");
    ir::Value* at = positions;
    if (ir::Value* ids = l.in(9)) {
      if (!ids->type.shape.known || ids->type.shape.rank() != 2 || ids->type.dtype != DataType::kInt64)
        return l.error("position_ids must be int64 [batch, sequence]");
      // ONNX Runtime 1.22 reads of a prompt's position_ids only the first, position_ids[0, 0], and counts
      // on from it in every row.
      ir::Value* first = l.unary("Slice", 13, {ids, ints_constant(l, {0, 0}), ints_constant(l, {1, 1})});
      ir::Value* from_first = l.add_values(first, l.unary("Unsqueeze", 13, {steps, ints_constant(l, {0})}));
      at = l.unary("Where", 16, {prompt, from_first, ids});
    }
    for (ir::Value** x : {&q, &k}) {
      ir::Value* r = l.unary("RotaryEmbedding", 23, {*x, l.in(7), l.in(8), at});
      Lowering::set_int(r->producer, "interleaved", n.attr_int("rotary_interleaved", 0));
      if (rd != H) Lowering::set_int(r->producer, "rotary_embedding_dim", rd);
      *x = r;
    }
  }

  // The presents: position t of row b holds past[t] for t < p_b, new[t - p_b] for t < p_b + S, else 0.
  ir::Value* P = l.in(3) ? l.unary("Gather", 13, {l.unary("Shape", 15, {l.in(3)}), ints_constant(l, {2})})
                         : ints_constant(l, {0});
  ir::Value* len = l.in(3) ? l.unary("Max", 13, {T, P}) : T;
  ir::Value* t = l.unary("Unsqueeze", 13, {l.unary("Range", 11, {zero, l.unary("Squeeze", 13, {len, ints_constant(l, {0})}),
                                                                  l.constant(int64_tensor({1}, true))}),
                                            ints_constant(l, {0})});  // [1, T']
  ir::Value* from_new = l.add_values(l.unary("Sub", 14, {t, pb}), P);
  ir::Value* idx = l.unary("Where", 16, {l.unary("Less", 13, {t, pb}), t, from_new});
  ir::Value* last = l.unary("Sub", 14, {l.add_values(P, S), one});
  idx = l.unary("Max", 13, {l.unary("Min", 13, {idx, last}), l.constant(int64_tensor({0}, true))});
  ir::Value* filled = l.unary("Less", 13, {t, l.add_values(pb, S)});  // [B, T']
  ir::Value* shape = l.unary("Concat", 13, {l.unary("Gather", 13, {l.unary("Shape", 15, {l.in(0)}), ints_constant(l, {0})}),
                                           ints_constant(l, {Nkv}), len, ints_constant(l, {H})});
  Lowering::set_int(shape->producer, "axis", 0);
  ir::Value* idx4 = l.unary("Expand", 13, {l.unary("Unsqueeze", 13, {idx, ints_constant(l, {1, 3})}), shape});
  ir::Value* filled4 = l.unary("Unsqueeze", 13, {filled, ints_constant(l, {1, 3})});
  ir::Value* present[2];
  for (int i = 0; i < 2; ++i) {
    ir::Value* fresh = i ? v : k;
    ir::Value* all = fresh;
    if (l.in(3 + i)) {
      all = l.unary("Concat", 13, {l.in(3 + i), fresh});
      Lowering::set_int(all->producer, "axis", 2);
    }
    ir::Value* g = l.unary("GatherElements", 13, {all, idx4});
    Lowering::set_int(g->producer, "axis", 2);
    present[i] = l.unary("Where", 16, {filled4, g, l.scalar(dt, 0)}, l.out(1 + i));
  }

  // Query i of row b sees key t when p_b + i - window <= t <= p_b + i. smooth_softmax (a softmax with
  // one more logit, 0) is a key of zeros at t = -1 that every query sees: its score is exactly 0 (after
  // softcap too) and its value adds nothing.
  ir::Value* keys = t;
  ir::Value *k_att = present[0], *v_att = present[1];
  if (smooth) {
    keys = l.unary("Unsqueeze", 13, {l.unary("Range", 11, {l.constant(int64_tensor({-1}, true)),
                                                           l.unary("Squeeze", 13, {len, ints_constant(l, {0})}),
                                                           l.constant(int64_tensor({1}, true))}),
                                     ints_constant(l, {0})});  // [1, T' + 1]
    Tensor z = Tensor::empty(dt, {1});
    std::memset(z.raw(), 0, z.nbytes());
    ir::Value* zshape = l.unary("Concat", 13, {l.unary("Gather", 13, {shape, ints_constant(l, {0, 1})}), one,
                                              ints_constant(l, {H})});
    Lowering::set_int(zshape->producer, "axis", 0);
    ir::Node* zn = l.add("ConstantOfShape", 9, {zshape}, {l.fresh("zeros")});
    zn->attrs["value"].kind = ir::Attribute::Kind::kTensor;
    zn->attrs["value"].t = z;
    for (ir::Value** x : {&k_att, &v_att}) {
      *x = l.unary("Concat", 13, {zn->outputs[0], *x});
      Lowering::set_int((*x)->producer, "axis", 2);
    }
  }
  ir::Value* newest = l.unary("Unsqueeze", 13, {positions, ints_constant(l, {2})});  // [B, S, 1]
  ir::Value* t3 = l.unary("Unsqueeze", 13, {keys, ints_constant(l, {0})});           // [1, 1, keys]
  ir::Value* seen = l.unary("LessOrEqual", 16, {t3, newest});
  const int64_t window = n.attr_int("local_window_size", -1);
  if (window > 0) {
    ir::Value* oldest = l.unary("Sub", 14, {newest, l.constant(int64_tensor({window}, true))});
    ir::Value* in_window = l.unary("GreaterOrEqual", 16, {t3, oldest});
    if (smooth) in_window = l.unary("Or", 7, {in_window, l.unary("Equal", 13, {t3, l.constant(int64_tensor({-1}, true))})});
    seen = l.unary("And", 7, {seen, in_window});
  }
  ir::Value* mask = l.unary("Unsqueeze", 13, {seen, ints_constant(l, {1})});  // [B, 1, S, keys]
  if (ir::Value* bias = l.in(10)) {
    // attention_bias [B or 1, N or 1, S, T'] is added after softcap, as Attention adds its mask.
    mask = l.add_values(l.unary("Where", 16, {mask, l.scalar(dt, 0), l.scalar(dt, -std::numeric_limits<double>::infinity())}), bias);
  }
  ir::Value* y = l.fresh("y");
  ir::Node* a = attention23(l, {q, k_att, v_att, mask}, {y}, n.attr_float("scale", 0.0f), false);
  if (softcap > 0.0f) Lowering::set_float(a, "softcap", softcap);
  merge_heads(l, y, l.out(0));
  return Status::Ok();
}

// One lowering: which nodes (domain, op, and an ai.onnx op only below opset `before`) and how.
struct LoweringRule {
  LowerFn fn;
  int before = std::numeric_limits<int>::max();
};

const std::map<std::pair<std::string, std::string>, LoweringRule>& lowerings() {
  static const std::map<std::pair<std::string, std::string>, LoweringRule> m = {
      {{"", "LayerNormalization"}, {lower_legacy_layer_norm, 17}},
      {{"com.microsoft", "Gelu"}, {lower_gelu}},
      {{"com.microsoft", "FastGelu"}, {lower_fast_gelu}},
      {{"com.microsoft", "BiasGelu"}, {lower_bias_gelu}},
      {{"com.microsoft", "QuickGelu"}, {lower_quick_gelu}},
      {{"com.microsoft", "BiasAdd"}, {lower_bias_add}},
      {{"com.microsoft", "SkipLayerNormalization"}, {lower_skip_layer_norm}},
      {{"com.microsoft", "SkipSimplifiedLayerNormalization"}, {lower_skip_simplified_layer_norm}},
      {{"", "SimplifiedLayerNormalization"}, {lower_simplified_layer_norm}},
      {{"com.microsoft", "FusedMatMul"}, {lower_fused_matmul}},
      {{"com.microsoft", "Attention"}, {lower_attention}},
      {{"com.microsoft", "MultiHeadAttention"}, {lower_multi_head_attention}},
      {{"com.microsoft", "GroupQueryAttention"}, {lower_group_query_attention}},
      {{"com.microsoft", "EmbedLayerNormalization"}, {lower_embed_layer_norm}},
      {{"com.microsoft", "RotaryEmbedding"}, {lower_rotary_embedding}},
      {{"com.microsoft", "BiasSoftmax"}, {lower_bias_softmax}},
      {{"com.microsoft", "QLinearAdd"}, {lower_qlinear_binary<kAdd>}},
      {{"com.microsoft", "QLinearMul"}, {lower_qlinear_binary<kMul>}},
      {{"com.microsoft", "QLinearSigmoid"}, {lower_qlinear_sigmoid}},
      {{"com.microsoft", "QLinearLeakyRelu"}, {lower_qlinear_leaky_relu}},
      {{"com.microsoft", "QLinearConcat"}, {lower_qlinear_concat}},
      {{"com.microsoft", "QLinearAveragePool"}, {lower_qlinear_pool}},
      {{"com.microsoft", "QLinearGlobalAveragePool"}, {lower_qlinear_pool}},
      {{"com.microsoft", "QLinearSoftmax"}, {lower_qlinear_softmax}},
      {{"com.microsoft", "QGemm"}, {lower_qgemm}},
      {{"com.microsoft", "MatMulIntegerToFloat"}, {lower_matmul_integer_to_float}},
      {{"com.microsoft", "DynamicQuantizeMatMul"}, {lower_dynamic_quantize_matmul}},
  };
  return m;
}

Expected<bool> lower_graph(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  const std::vector<ir::Node*> nodes = g.nodes();  // a copy: lowering adds nodes
  for (ir::Node* n : nodes) {
    if (n->removed) continue;
    for (auto& [k, a] : n->attrs) {
      std::vector<ir::Graph*> subs;
      if (a.g) subs.push_back(a.g.get());
      for (auto& sg : a.graphs) subs.push_back(sg.get());
      for (ir::Graph* sg : subs) {
        KILN_ASSIGN_OR_RETURN(const bool sub_changed, lower_graph(*sg, ctx));
        if (sub_changed) {
          KILN_RETURN_IF_ERROR(sg->sort());
          changed = true;
        }
      }
    }
    auto it = lowerings().find({n->domain, n->op_type});
    if (it == lowerings().end() || n->opset >= it->second.before) continue;
    const std::string what = n->describe();
    Lowering l(g, n);
    KILN_RETURN_IF_ERROR(it->second.fn(l));
    g.remove_node(n);
    ctx.log(kPass, "lowered " + what);
    changed = true;
  }
  return changed;
}

}  // namespace

Expected<bool> lower_contrib_ops(ir::Graph& g, PassContext& ctx) { return lower_graph(g, ctx); }

bool is_lowered(const ir::Node& n) {
  auto it = lowerings().find({n.domain, n.op_type});
  return it != lowerings().end() && n.opset < it->second.before;
}

}  // namespace kiln::passes
