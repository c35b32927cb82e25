// passes/precision.cpp — reduced-precision engines: float32 tensors become float16 (or bfloat16)
// wherever the target runs the consuming op in that type, with casts only where the precision changes.
//
// Decisions (issue: GPU speed):
//  * A node runs in half when the target has a kernel row for its op that takes half floats
//    (KernelDef::half_floats; the builder hands that in as `runs_in_half`). Its float32 inputs are
//    converted (constants once, at build time; computed values by a Cast), its float32 outputs become
//    half. Other nodes keep float32 and get a Cast back where they read a converted value.
//  * Kernels accumulate in float32 (GEMM/convolution compute type, norms' and softmax's statistics,
//    reductions), so half here means half storage and half tensor-core inputs.
//  * The model's inputs and outputs keep their dtypes: casts at the boundary, and the outputs keep
//    their names. With half_outputs (BuildOptions::half_outputs) an output computed in half stays
//    half: the model's float32 output becomes float16/bfloat16, under its name.
//  * Constants convert with saturation to the half type's finite range: exporters write "minus
//    infinity" masks as the float32 minimum, and (1 - mask) * min must stay 0 where mask is 1, not
//    0 * -inf = NaN.
//  * Shape and Size read only shapes: they take a converted value as it is.
//  * LayerNormalization's Mean/InvStdDev outputs stay float32 (their stash type).
//  * A global pool whose input stays float32 (made by a node that does not run in half, such as an
//    INT8 convolution with float output, or a model input) stays float32 too: converting its input
//    would write and re-read the whole feature map (ResNet-50's last one, 103 MB at batch 256, cost
//    more than the pool itself on the H100), converting its output a vector per image.
#include <cmath>
#include <map>
#include <memory>
#include <set>

#include "ir/float_types.h"
#include "ops/params_nn.h"
#include "ops/params_shape.h"
#include "passes/passes.h"
#include "passes/pattern.h"
#include "util/parallel.h"

namespace kiln::passes {
namespace {

bool shape_only(const ir::Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }

bool global_pool(const ir::Node& n) {
  if (n.domain.empty()) return n.op_type == "GlobalAveragePool" || n.op_type == "GlobalMaxPool";
  return n.domain == "kiln" && n.op_type == "ChannelsLastPool" && ops::parse_channels_last_pool(n).global;
}

// A constant in `half`, float16 saturated to its finite range; in parallel chunks (the same bits at any
// thread count: each element on its own).
Tensor to_half(const Tensor& t, DataType half) {
  Tensor h = Tensor::empty(half, t.shape());
  const float* src = t.data<float>();
  uint16_t* dst = h.data<uint16_t>();
  parallel_for(t.numel(), int64_t{1} << 18, [&](int64_t b, int64_t e) {
    if (half == DataType::kFloat16)
      for (int64_t i = b; i < e; ++i) dst[i] = f32_to_f16_saturated(src[i]);
    else
      for (int64_t i = b; i < e; ++i) dst[i] = f32_to_bf16(src[i]);
  });
  return h;
}

// Adds `out = Cast(in, to)` and returns the node.
ir::Node* add_cast(ir::Graph& g, ir::Value* in, ir::Value* out, DataType to, const std::string& name) {
  ir::Node* c = g.add_node("Cast", "", {in}, {out}, name);
  ir::Attribute& a = c->attrs["to"];
  a.kind = ir::Attribute::Kind::kInt;
  a.i = static_cast<int64_t>(to);
  return c;
}

}  // namespace

Expected<int> convert_precision(ir::Graph& g, DataType half, const std::function<bool(const ir::Node&)>& runs_in_half,
                                bool half_outputs) {
  if (half != DataType::kFloat16 && half != DataType::kBFloat16) return invalid_argument("precision must be float16 or bfloat16");
  const int opset = g.opsets.count("") ? g.opsets.at("") : 19;
  std::map<const ir::Value*, ir::Value*> as_half, as_float;  // casts and converted constants, made once
  std::set<const ir::Value*> converted;                      // values whose dtype this pass changed to half
  int changed = 0;
  auto cast = [&](ir::Value* v, DataType to) -> ir::Value* {
    auto& cache = to == DataType::kFloat32 ? as_float : as_half;
    if (auto it = cache.find(v); it != cache.end()) return it->second;
    ir::Value* out = nullptr;
    if (v->constant && !v->is_input && v->constant->device().is_cpu() && to != DataType::kFloat32) {
      out = g.new_value(v->name + "_half", ir::Type::tensor(half, v->type.shape));
      out->constant = to_half(*v->constant, half);
    } else {
      ir::Type t = v->type;
      t.dtype = to;
      out = g.new_value(v->name + (to == DataType::kFloat32 ? "_float" : "_half"), t);
      add_cast(g, v, out, to, out->name + "_cast")->opset = opset;
    }
    cache[v] = out;
    return out;
  };
  const std::vector<ir::Node*> nodes = g.nodes();  // a snapshot: casts added below are not revisited
  for (ir::Node* n : nodes) {
    if (shape_only(*n)) continue;
    // A node with subgraphs (If, Loop, Scan) keeps float32: its bodies are typed so, and its inputs get
    // float32 back like any other float32 node's (a Loop's initial state made in half).
    const bool h = !n->has_subgraphs() && runs_in_half(*n) &&
                   !(global_pool(*n) && n->has_input(0) && n->inputs[0]->type.dtype == DataType::kFloat32 &&
                     !converted.count(n->inputs[0]));
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      ir::Value* v = n->inputs[i];
      if (!v || !v->type.is_tensor()) continue;
      if (h && v->type.dtype == DataType::kFloat32) {
        g.set_input(n, static_cast<int>(i), cast(v, half));
      } else if (!h && converted.count(v)) {
        g.set_input(n, static_cast<int>(i), cast(v, DataType::kFloat32));
      }
    }
    if (!h) continue;
    ++changed;
    if (n->domain.empty() && n->op_type == "Cast" && n->attr_int("to", 0) == static_cast<int64_t>(DataType::kFloat32))
      n->attrs["to"].i = static_cast<int64_t>(half);
    const bool layer_norm = n->domain.empty() && n->op_type == "LayerNormalization";
    for (size_t o = 0; o < n->outputs.size(); ++o) {
      ir::Value* v = n->outputs[o];
      if (!v || !v->type.is_tensor() || v->type.dtype != DataType::kFloat32 || (layer_norm && o > 0)) continue;
      v->type.dtype = half;
      converted.insert(v);
    }
  }
  // Outputs keep their dtype and name, and so do values that subgraphs read by name (an If's branch
  // reading a value made in half outside it: its nodes are typed float32, and a float16 operand failed
  // them): the half value is renamed, a Cast makes the named float32 value.
  const std::set<std::string> captured = ir::names_read_by_subgraphs(g);
  std::vector<ir::Value*> keep_float;
  for (ir::Value* v : g.values())  // a snapshot: the values added below are not revisited
    if (converted.count(v) && ((v->is_output && !half_outputs) || captured.count(v->name))) keep_float.push_back(v);
  for (ir::Value* v : keep_float) {
    const std::string name = v->name;
    ir::Type t = v->type;
    t.dtype = DataType::kFloat32;
    ir::Value* renamed = g.new_value(name + "_half", v->type);
    g.replace_all_uses(v, renamed);  // consumers and a graph-output slot move to `renamed`...
    if (v->producer) g.set_output(v->producer, v->producer_output, renamed);
    v->type = t;
    add_cast(g, renamed, v, DataType::kFloat32, name + "_cast")->opset = opset;
    // float32 readers of v got a Cast of their own above (it now reads `renamed`): they read v instead.
    if (auto it = as_float.find(v); it != as_float.end() && it->second->producer) {
      ir::Value* dup = it->second;
      g.replace_all_uses(dup, v);
      g.remove_node(dup->producer);
    }
    for (size_t i = 0; i < g.outputs.size(); ++i)
      if (g.outputs[i] == renamed) g.outputs[i] = v;  // ...and the original value, float32, is the output again
    if (renamed->is_output) {
      v->is_output = true;
      renamed->is_output = false;
    }
  }
  KILN_RETURN_IF_ERROR(g.sort());
  g.remove_dead_values();
  KILN_RETURN_IF_ERROR(g.verify());
  return changed;
}

int allow_tf32(ir::Graph& g) {
  static const std::set<std::string> ops = {"Conv", "Gemm", "MatMul", "FusedConv", "FusedGemm", "FusedMatMul"};
  int marked = 0;
  for (ir::Node* n : g.nodes()) {
    if (!ops.count(n->op_type) || !(n->domain.empty() || n->domain == "kiln")) continue;
    if (!n->has_input(0) || n->inputs[0]->type.dtype != DataType::kFloat32) continue;
    ir::Attribute& a = n->attrs[ops::kTF32Attr];
    a.kind = ir::Attribute::Kind::kInt;
    a.i = 1;
    ++marked;
  }
  return marked;
}

int quantize_half_directly(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  int folded = 0;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* q : nodes) {
    if (q->removed || !q->domain.empty() || q->op_type != "QuantizeLinear" || !q->has_input(0)) continue;
    ir::Value* was = q->inputs[0];
    ir::Node* cast = was->producer;
    if (!cast || !cast->domain.empty() || cast->op_type != "Cast" || !cast->has_input(0) || was->type.dtype != DataType::kFloat32)
      continue;
    ir::Value* half = cast->inputs[0];
    if (half->type.dtype != DataType::kFloat16 && half->type.dtype != DataType::kBFloat16) continue;
    g.set_input(q, 0, half);
    if (!accepts(*q)) {
      g.set_input(q, 0, was);
      continue;
    }
    ++folded;
    if (was->uses.empty() && !was->is_output) g.remove_node(cast);
  }
  if (folded) g.remove_dead_values();
  return folded;
}

int products_write_half(ir::Graph& g, DataType half, const std::function<bool(const ir::Node&)>& accepts) {
  if (half != DataType::kFloat16) return 0;  // the int8 epilogue writes float32 or float16
  int changed = 0;
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* p : nodes) {
    if (p->removed || p->domain != "kiln" || p->op_type != "QMatMul" || p->has_input(6)) continue;
    ir::Value* y = p->outputs[0];
    if (!y || y->is_output || y->type.dtype != DataType::kFloat32 || y->uses.size() != 1) continue;
    ir::Node* cast = y->uses[0].node;
    if (!cast->domain.empty() || cast->op_type != "Cast" || cast->attr_int("to", 0) != static_cast<int64_t>(half)) continue;
    ir::Value* h = cast->outputs[0];
    if (h->is_output) continue;
    ir::Attribute& a = p->attrs["output_dtype"];
    a.kind = ir::Attribute::Kind::kInt;
    a.i = static_cast<int64_t>(half);
    if (!accepts(*p)) {
      p->attrs.erase("output_dtype");
      continue;
    }
    y->type.dtype = half;
    g.replace_all_uses(h, y);
    g.remove_node(cast);
    ++changed;
  }
  if (changed) g.remove_dead_values();
  return changed;
}

namespace {

// c when `slice` takes the columns [0, c) of its input's last axis (of `rank`) with step 1, 0 otherwise.
int64_t leading_columns(const ir::Node& slice, int64_t rank) {
  // Where the bounds are is the kernels' decision (ops::parse_slice): input i (Slice-10 on, or a node
  // of unknown opset) or the attribute (Slice-1, no steps). {} when absent, nullopt when not constant.
  const ops::SliceParams sp = ops::parse_slice(slice);
  auto ints = [&](size_t i, const std::vector<int64_t>& attr) -> std::optional<std::vector<int64_t>> {
    if (!sp.bounds_as_inputs) return attr;
    if (!slice.has_input(i)) return std::vector<int64_t>{};
    if (!slice.inputs[i]->is_constant()) return std::nullopt;
    return integer_values(*slice.inputs[i]->constant);
  };
  const auto starts = ints(1, sp.starts), ends = ints(2, sp.ends), axes = ints(3, sp.axes), steps = ints(4, {});
  if (!starts || !ends || !axes || !steps || starts->size() != 1 || ends->size() != 1) return 0;
  const int64_t axis = axes->empty() ? 0 : (*axes)[0] < 0 ? (*axes)[0] + rank : (*axes)[0];
  if (axes->size() > 1 || axis != rank - 1 || (*starts)[0] != 0 || (steps->size() == 1 && (*steps)[0] != 1) ||
      steps->size() > 1)
    return 0;
  return std::max<int64_t>(0, (*ends)[0]);
}

// The kiln.FusedMatMul that would replace product p (its A and B, `attrs`, writing `out`), for the
// target's `accepts` to judge; not in the graph.
std::unique_ptr<ir::Node> fused_probe(const ir::Node& p, const std::map<std::string, ir::Attribute>& attrs,
                                      ir::Value* out) {
  auto probe = std::make_unique<ir::Node>();
  probe->op_type = "FusedMatMul";
  probe->domain = "kiln";
  probe->opset = 1;
  probe->name = p.name;
  probe->attrs = attrs;
  probe->inputs = {p.inputs[0], p.inputs[1]};
  probe->outputs = {out};
  return probe;
}

}  // namespace

int products_write_float(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  int changed = 0;
  const std::set<std::string> captured = ir::names_read_by_subgraphs(g);
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* p : nodes) {
    if (p->removed || !p->has_output(0)) continue;
    const bool matmul = p->domain.empty() && p->op_type == "MatMul";
    const bool fused = p->domain == "kiln" && p->op_type == "FusedMatMul" && !p->has_input(2) && !p->attr("output_dtype");
    if ((!matmul && !fused) || p->inputs.size() < 2 || !p->has_input(0) || !p->has_input(1)) continue;
    ir::Value* y = p->outputs[0];
    const DataType half = y->type.dtype;
    if ((half != DataType::kFloat16 && half != DataType::kBFloat16) || y->is_output || y->uses.size() != 1 ||
        captured.count(y->name))
      continue;
    // y → [Slice →] Cast(float32), each value read once and by nothing else.
    ir::Node* slice = nullptr;
    ir::Node* cast = y->uses[0].node;
    if (cast->domain.empty() && cast->op_type == "Slice" && y->uses[0].input_index == 0 && cast->has_output(0)) {
      ir::Value* s = cast->outputs[0];
      if (s->is_output || s->uses.size() != 1 || captured.count(s->name)) continue;
      slice = cast;
      cast = s->uses[0].node;
    }
    if (!cast->domain.empty() || cast->op_type != "Cast" || !cast->has_output(0) ||
        cast->attr_int("to", 0) != static_cast<int64_t>(DataType::kFloat32))
      continue;
    ir::Value* z = cast->outputs[0];
    // The product, as a float32-writing kiln.FusedMatMul (a MatMul's attributes are none).
    std::map<std::string, ir::Attribute> attrs = p->attrs;
    ir::Attribute& od = attrs["output_dtype"];
    od.kind = ir::Attribute::Kind::kInt;
    od.i = static_cast<int64_t>(DataType::kFloat32);
    // A Slice of the leading columns (pad-matmul-columns') goes into the product too, where its
    // kernel takes it: the half product is widened into the float32 columns in one pass, instead of
    // a float32 product realigned by the Slice (twice the bytes written, then copied).
    const ir::SymShape& ys = y->type.shape;
    const int64_t n_cols = ys.known && ys.rank() >= 2 && ys.dims.back().is_static() ? ys.dims.back().value : 0;
    const int64_t columns = slice && n_cols ? leading_columns(*slice, ys.rank()) : 0;
    if (columns > 0 && columns < n_cols) {
      std::map<std::string, ir::Attribute> narrow = attrs;
      ir::Attribute& oc = narrow["output_columns"];
      oc.kind = ir::Attribute::Kind::kInt;
      oc.i = columns;
      if (accepts(*fused_probe(*p, narrow, z))) {
        const std::string name = p->name;
        std::vector<ir::Value*> ab = {p->inputs[0], p->inputs[1]};
        g.remove_node(cast);
        g.remove_node(slice);
        g.remove_node(p);
        ir::Node* f = g.add_node("FusedMatMul", "kiln", ab, {z}, name + "_writes_float_columns");
        f->opset = 1;
        f->attrs = std::move(narrow);
        ++changed;
        continue;
      }
    }
    ir::Value wide_probe;
    wide_probe.type = ir::Type::tensor(DataType::kFloat32, y->type.shape);
    if (!accepts(*fused_probe(*p, attrs, slice ? &wide_probe : z))) continue;
    const std::string name = p->name;
    std::vector<ir::Value*> ab = {p->inputs[0], p->inputs[1]};
    std::vector<ir::Value*> slice_in = slice ? slice->inputs : std::vector<ir::Value*>{};
    const int slice_opset = slice ? slice->opset : 0;
    const std::map<std::string, ir::Attribute> slice_attrs = slice ? slice->attrs : std::map<std::string, ir::Attribute>{};
    g.remove_node(cast);
    if (slice) g.remove_node(slice);
    g.remove_node(p);
    ir::Value* out = z;
    if (slice) {
      out = g.new_value(name + "_float", ir::Type::tensor(DataType::kFloat32, y->type.shape));
      slice_in[0] = out;
      ir::Node* sl = g.add_node("Slice", "", slice_in, {z}, name + "_float_columns");
      sl->opset = slice_opset;
      sl->attrs = slice_attrs;  // Slice-1's starts/ends/axes are attributes
    }
    ir::Node* f = g.add_node("FusedMatMul", "kiln", ab, {out}, name + "_writes_float");
    f->opset = 1;
    f->attrs = std::move(attrs);
    ++changed;
  }
  if (changed) g.remove_dead_values();
  return changed;
}

namespace {

// The constant uint8 scalar zero point at input `i` of n, or null.
ir::Value* uint8_zero_point(const ir::Node* n, size_t i) {
  if (!n->has_input(i)) return nullptr;
  ir::Value* z = n->inputs[i];
  return z->is_constant() && z->type.dtype == DataType::kUInt8 && z->constant->numel() == 1 ? z : nullptr;
}

}  // namespace

int signed_activations(ir::Graph& g, const std::function<bool(const ir::Node&)>& accepts) {
  int changed = 0, tried = 0;
  const std::vector<ir::Node*> nodes = g.nodes();
  const std::set<std::string> captured = ir::names_read_by_subgraphs(g);  // readers not in `uses`
  for (ir::Node* p : nodes) {
    if (p->removed || !p->has_output(0)) continue;
    const bool quantize = p->domain.empty() && p->op_type == "QuantizeLinear";
    const bool product = p->domain == "kiln" && p->op_type == "QMatMul";
    if (!quantize && !product) continue;
    const size_t pz = quantize ? 2 : 7;  // the producer's output zero point
    ir::Value* v = p->outputs[0];
    ir::Value* z = uint8_zero_point(p, pz);
    if (!z || v->type.dtype != DataType::kUInt8 || v->is_output || v->uses.empty() || captured.count(v->name)) continue;
    if (quantize && p->attr_int("output_dtype", 0) != 0) continue;
    const uint8_t zp = z->constant->data<uint8_t>()[0];
    // Every reader: an int8 product's A or a DequantizeLinear, with the same zero point.
    std::vector<std::pair<ir::Node*, size_t>> zero_points = {{p, pz}};
    bool all = true;
    for (const ir::Use& u : v->uses) {
      ir::Node* r = u.node;
      const bool reads_a = u.input_index == 0 && ((r->domain == "kiln" && r->op_type == "QMatMul") ||
                                                  (r->domain.empty() && r->op_type == "DequantizeLinear"));
      ir::Value* rz = reads_a ? uint8_zero_point(r, 2) : nullptr;
      if (!rz || rz->constant->data<uint8_t>()[0] != zp) {
        all = false;
        break;
      }
      zero_points.push_back({r, 2});
    }
    if (!all) continue;
    Tensor t = Tensor::empty(DataType::kInt8, z->constant->shape());
    t.data<int8_t>()[0] = static_cast<int8_t>(static_cast<int>(zp) - 128);
    ir::Value* z8 = new_constant(g, z->name + "_int8", t);
    ++tried;
    std::vector<ir::Value*> was;
    for (auto [n, i] : zero_points) {
      was.push_back(n->inputs[i]);
      g.set_input(n, i, z8);
    }
    v->type.dtype = DataType::kInt8;
    bool taken = true;
    for (auto [n, i] : zero_points) taken = taken && accepts(*n);
    if (!taken) {
      for (size_t k = 0; k < zero_points.size(); ++k) g.set_input(zero_points[k].first, zero_points[k].second, was[k]);
      v->type.dtype = DataType::kUInt8;
      continue;
    }
    ++changed;
  }
  if (tried) g.remove_dead_values();
  return changed;
}

}  // namespace kiln::passes
