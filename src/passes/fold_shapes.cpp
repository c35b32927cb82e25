// passes/fold_shapes.cpp — folds shape arithmetic on partly static shapes: Gather(Shape(x), i) and
// Slice(Shape(x), ...) are constants when the dims they pick are static, even when other dims of x
// are symbolic (a dynamic batch). Constant folding then finishes the Concat/Reshape chains.
// Shape(Transpose(y, perm)) becomes Gather(Shape(y), perm), so shape computations stop reading the
// transposed value (which lets fusions take the Transpose: attention's head merge).
#include <algorithm>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// The dims of x's shape that Shape(x) (with its start/end) exposes, or nullopt when x's rank is unknown.
std::optional<std::vector<ir::Dim>> shape_dims(const ir::Node& shape_node) {
  const ir::Value* x = shape_node.inputs[0];
  if (!x || !x->type.is_tensor() || !x->type.shape.known) return std::nullopt;
  const auto& dims = x->type.shape.dims;
  const int64_t rank = static_cast<int64_t>(dims.size());
  int64_t start = shape_node.attr_int("start", 0), end = shape_node.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return std::vector<ir::Dim>(dims.begin() + start, dims.begin() + end);
}

Tensor int64_tensor(const std::vector<int64_t>& v, bool scalar) {
  Tensor t = Tensor::empty(DataType::kInt64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// Picks dims[idx] for Gather's indices (scalar or 1-D); nullopt when one is symbolic or out of range.
std::optional<Tensor> gather_dims(const std::vector<ir::Dim>& dims, const ir::Value* indices) {
  const auto idx = constant_values(indices);
  if (idx.empty() || indices->constant->rank() > 1) return std::nullopt;
  std::vector<int64_t> picked;
  const int64_t n = static_cast<int64_t>(dims.size());
  for (double d : idx) {
    int64_t i = static_cast<int64_t>(d);
    if (i < 0) i += n;
    if (i < 0 || i >= n || !dims[i].is_static()) return std::nullopt;
    picked.push_back(dims[i].value);
  }
  return int64_tensor(picked, indices->constant->rank() == 0);
}

// Slice(Shape(x), starts, ends[, axes[, steps]]) on the one axis with step 1.
std::optional<Tensor> slice_dims(const std::vector<ir::Dim>& dims, const ir::Node& slice) {
  if (slice.opset < 10 || slice.inputs.size() < 3) return std::nullopt;
  for (size_t i = 1; i < slice.inputs.size(); ++i)
    if (slice.inputs[i] && !slice.inputs[i]->is_constant()) return std::nullopt;
  const auto starts = constant_values(slice.inputs[1]), ends = constant_values(slice.inputs[2]);
  if (starts.size() != 1 || ends.size() != 1) return std::nullopt;
  if (slice.has_input(4) && !is_scalar_constant(slice.inputs[4], 1)) return std::nullopt;
  const int64_t n = static_cast<int64_t>(dims.size());
  int64_t b = static_cast<int64_t>(std::max<double>(std::min<double>(starts[0], 1e15), -1e15));
  int64_t e = static_cast<int64_t>(std::max<double>(std::min<double>(ends[0], 1e15), -1e15));
  if (b < 0) b += n;
  if (e < 0) e += n;
  b = std::clamp<int64_t>(b, 0, n);
  e = std::clamp<int64_t>(e, b, n);
  std::vector<int64_t> picked;
  for (int64_t i = b; i < e; ++i) {
    if (!dims[i].is_static()) return std::nullopt;
    picked.push_back(dims[i].value);
  }
  return int64_tensor(picked, false);
}

// The Transpose's permutation restricted to Shape's [start, end); empty when the rank is unknown.
std::vector<int64_t> permuted_dims(const ir::Node& transpose, const ir::Node& shape) {
  std::vector<int64_t> perm = transpose.attr_ints("perm");
  const ir::Value* y = transpose.inputs[0];
  if (perm.empty()) {
    if (!y->type.shape.known) return {};
    for (int64_t i = y->type.shape.rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  const int64_t rank = static_cast<int64_t>(perm.size());
  int64_t start = shape.attr_int("start", 0), end = shape.attr_int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  return std::vector<int64_t>(perm.begin() + start, perm.begin() + end);
}

}  // namespace

Expected<bool> fold_shapes(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-shapes");
  const std::vector<Rule> rules = {
      {"Gather(Shape)", op("Gather", {op("Shape", {any()}).as("shape"), cst("indices")}), kQuiet, false},
      {"Slice(Shape)", op("Slice", {op("Shape", {any()}).as("shape")}), kQuiet, false},
      {"Shape(Transpose)", op("Shape", {op("Transpose", {any("y")}).as("t")}), kQuiet, false},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* root = m.root();
    if (root->op_type == "Shape") {
      const std::vector<int64_t> dims = permuted_dims(*m.node("t"), *root);
      if (dims.empty()) return "rank unknown";
      const int64_t rank = static_cast<int64_t>(m.node("t")->attr_ints("perm").size());
      ir::Value* sy = g.new_value(m["y"]->name + "_shape", ir::Type::tensor(DataType::kInt64, ir::SymShape({rank ? rank : m["y"]->type.shape.rank()})));
      ir::Node* shape = g.add_node("Shape", "", {m["y"]}, {sy});
      shape->opset = root->opset;
      const std::string what = root->describe();
      rw.replace(m, "Gather", "", 13, {sy, rw.constant("perm", int64_tensor(dims, false))});
      rw.log("read " + what + " from the Transpose's input");
      return "";
    }
    if (root->op_type == "Gather" && root->attr_int("axis", 0) != 0) return "axis is not 0";
    auto dims = shape_dims(*m.node("shape"));
    if (!dims) return "rank unknown";
    auto t = root->op_type == "Gather" ? gather_dims(*dims, m["indices"]) : slice_dims(*dims, *root);
    if (!t) return "a picked dim is symbolic";
    ir::Value* out = root->outputs[0];
    rw.log("folded " + root->describe() + " to a constant");
    // The output becomes a constant in place (as constant folding does).
    out->constant = *t;
    out->type = ir::Type::tensor(DataType::kInt64, ir::SymShape::of(t->shape()));
    ir::Node* shape = m.node("shape");
    g.remove_node(root);
    rw.remove_unread({shape});
    return "";
  });
}

}  // namespace kiln::passes
