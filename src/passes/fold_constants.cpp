// passes/fold_constants.cpp — evaluates nodes whose inputs are all constants, through the evaluator
// the builder hands in (PassOptions::evaluate: the CPU kernels),
// and folds Shape/Size of statically shaped values. Results larger than the fold limit (and than
// their inputs) stay computed so weights are not duplicated.
#include <algorithm>
#include <cstdint>
#include <set>

#include "ops/op_table.h"
#include "passes/passes.h"

namespace kiln::passes {
namespace {

// Shape/Size of a value whose shape is static.
bool fold_shape_of(ir::Node& n, Tensor* out) {
  if (!n.domain.empty() || (n.op_type != "Shape" && n.op_type != "Size") || !n.has_input(0)) return false;
  const ir::Type& t = n.inputs[0]->type;
  if (!t.is_tensor() || !t.shape.is_static()) return false;
  const Shape s = t.shape.to_static();
  if (n.op_type == "Size") {
    *out = Tensor::empty(DataType::kInt64, {});
    *out->data<int64_t>() = shape_numel(s);
    return true;
  }
  int64_t rank = static_cast<int64_t>(s.size());
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  *out = Tensor::empty(DataType::kInt64, {end - start});
  for (int64_t i = start; i < end; ++i) out->data<int64_t>()[i - start] = s[i];
  return true;
}

// Bytes of the node's outputs as inferred (saturating); unknown shapes count as 0 (the size cap after
// evaluation and max_tensor_bytes still bound them).
size_t inferred_bytes(const ir::Node& n) {
  size_t total = 0;
  for (const ir::Value* o : n.outputs) {
    if (!o || !o->type.is_tensor() || !o->type.shape.is_static()) continue;
    const size_t b = shape_nbytes(o->type.dtype, o->type.shape.to_static());
    total = b > SIZE_MAX - total ? SIZE_MAX : total + b;
  }
  return total;
}

}  // namespace

Expected<bool> fold_constants(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  const auto nodes = g.nodes();
  for (ir::Node* n : nodes) {
    if (ops::is_nondeterministic(*n) || n->has_subgraphs() || keep_dequantize_for_fusion(*n, ctx)) continue;
    std::vector<Value> outputs;
    Tensor shape_value;
    if (fold_shape_of(*n, &shape_value)) {
      outputs.push_back(Value::of(shape_value));
    } else {
      bool all_const = true;
      size_t input_bytes = 0;
      std::vector<Value> inputs;
      for (ir::Value* v : n->inputs) {
        if (!v) { inputs.emplace_back(); continue; }
        if (!v->is_constant()) { all_const = false; break; }
        input_bytes += v->constant->nbytes();
        inputs.push_back(Value::of(*v->constant));
      }
      if (!all_const || !ctx.options.evaluate) continue;
      // Outputs whose inferred size is already over the limit are not evaluated at all (a 95-byte
      // ConstantOfShape must not make gigabytes at build time just to be thrown away).
      if (inferred_bytes(*n) > std::max(ctx.options.fold_limit_bytes, input_bytes)) continue;
      auto r = ctx.options.evaluate(*n, inputs);
      if (!r.ok()) continue;  // no kernel or a run-time error: leave it for the engine to report
      size_t out_bytes = 0;
      bool tensors = true;
      for (const Value& s : *r) {
        tensors &= s.kind == Value::Kind::kTensor;
        out_bytes += s.tensor.nbytes();
      }
      if (!tensors || (out_bytes > ctx.options.fold_limit_bytes && out_bytes > input_bytes)) continue;
      outputs = std::move(r).value();
    }
    if (outputs.size() < n->outputs.size()) continue;
    // The outputs become constants in place (names, uses and graph-output roles stay).
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      ir::Value* o = n->outputs[i];
      if (!o) continue;
      o->constant = outputs[i].tensor;
      o->type = ir::Type::tensor(outputs[i].tensor.dtype(), ir::SymShape::of(outputs[i].tensor.shape()));
    }
    ctx.log("fold-constants", "folded " + n->describe());
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
