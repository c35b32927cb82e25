// passes/fold_shapes.cpp — folds shape arithmetic on partly static shapes: Gather(Shape(x), i) and
// Slice(Shape(x), ...) are constants when the dims they pick are static, even when other dims of x
// are symbolic (a dynamic batch). Constant folding then finishes the Concat/Reshape chains.
// A Reshape whose shape is computed from dims (Concat of Gather(Shape(..)) pieces, as exporters write
// `x.view(x.size(0), x.size(1), H, D)`) gets a constant shape when each element is a constant, a
// static dim, or x's own dim at the same position (copied with 0). A dim picked by Gather(Shape(x))
// that carries a graph input's symbol is read from that input's shape. Shape(Transpose(x)) and
// Shape(Reshape(x, constant)) read x's shape, and a Gather/Slice of such a rebuilt shape vector is a
// constant when the dims it picks are static. Shape computations then stop reading intermediate
// values, which lets fusions take them (attention's heads and context).
#include <algorithm>
#include <map>

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

// Picks dims[idx] for Gather's indices (scalar or 1-D); nullopt when one is symbolic or out of range.
std::optional<Tensor> gather_dims(const std::vector<ir::Dim>& dims, const ir::Value* indices) {
  const auto idx = constant_values(indices);
  if (idx.empty() || indices->constant->rank() > 1) return std::nullopt;
  std::vector<int64_t> picked;
  const int64_t n = static_cast<int64_t>(dims.size());
  for (double d : idx) {
    int64_t i = saturating_int64(d);
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

// The value of shape element e when it is a constant or a static dim of its tensor.
std::optional<int64_t> static_value(const ShapeElem& e) {
  if (!e.of) return e.value;
  const auto& s = e.of->type.shape;
  if (s.known && e.value < s.rank() && s.dims[e.value].is_static()) return s.dims[e.value].value;
  return std::nullopt;
}

// True when e is a dim carrying the same (named) symbol as d: equal by symbolic inference.
bool same_symbol(const ShapeElem& e, const ir::Dim& d) {
  const auto& s = e.of->type.shape;
  if (d.is_static() || d.symbol.empty() || !s.known || e.value >= s.rank()) return false;
  return s.dims[e.value].symbol == d.symbol;
}

// Where each named symbol of the graph inputs' dims can be read: symbol → (input, dim).
std::map<std::string, std::pair<ir::Value*, int64_t>> input_symbols(const ir::Graph& g) {
  std::map<std::string, std::pair<ir::Value*, int64_t>> r;
  for (ir::Value* v : g.inputs) {
    if (v->is_constant() || !v->type.is_tensor() || !v->type.shape.known) continue;
    for (int i = 0; i < v->type.shape.rank(); ++i) {
      const ir::Dim& d = v->type.shape.dims[i];
      if (!d.is_static() && !d.symbol.empty()) r.emplace(d.symbol, std::make_pair(v, i));
    }
  }
  return r;
}

// Gather(Shape(x), indices) rebuilt from constants and Gather(Shape(graph input), j); false when a
// picked dim is anonymous.
bool gather_from_inputs(Rewriter& rw, Match& m, const std::vector<ir::Dim>& dims) {
  ir::Graph& g = rw.graph();
  const auto symbols = input_symbols(g);
  const ir::Value* indices = m["indices"];
  const auto idx = constant_values(indices);
  const bool scalar = indices->constant->rank() == 0;
  const int64_t n = static_cast<int64_t>(dims.size());
  std::vector<std::pair<ir::Value*, int64_t>> picks;  // (input, dim) or (nullptr, static size)
  for (double d : idx) {
    int64_t i = saturating_int64(d);
    if (i < 0) i += n;
    if (i < 0 || i >= n) return false;
    if (dims[i].is_static()) { picks.push_back({nullptr, dims[i].value}); continue; }
    auto it = symbols.find(dims[i].symbol);
    if (dims[i].symbol.empty() || it == symbols.end() || it->second.first == m.node("shape")->inputs[0]) return false;
    picks.push_back(it->second);
  }
  std::vector<ir::Value*> pieces;
  for (size_t k = 0; k < picks.size();) {
    if (!picks[k].first) {  // a run of static dims: one constant
      std::vector<int64_t> run;
      for (; k < picks.size() && !picks[k].first; ++k) run.push_back(picks[k].second);
      pieces.push_back(rw.constant("dims", int64_tensor(run, false)));
      continue;
    }
    ir::Value* in = picks[k].first;
    ir::Value* shape = g.new_value(in->name + "_shape", ir::Type::tensor(DataType::kInt64, ir::SymShape({in->type.shape.rank()})));
    g.add_node("Shape", "", {in}, {shape})->opset = m.root()->opset;
    ir::Value* j = rw.constant("dim", int64_tensor({picks[k].second}, scalar));
    if (picks.size() == 1) {
      rw.replace(m, "Gather", "", 13, {shape, j});
      return true;
    }
    ir::Value* one = g.new_value(in->name + "_dim", ir::Type::tensor(DataType::kInt64, ir::SymShape({1})));
    g.add_node("Gather", "", {shape, j}, {one})->opset = 13;
    pieces.push_back(one);
    ++k;
  }
  ir::Node* cat = rw.replace(m, "Concat", "", 13, pieces);
  cat->attrs["axis"].kind = ir::Attribute::Kind::kInt;
  cat->attrs["axis"].i = 0;
  return true;
}

}  // namespace

Expected<bool> fold_shapes(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "fold-shapes");
  const std::vector<Rule> rules = {
      {"Gather(Shape)", op("Gather", {op("Shape", {any()}).as("shape"), cst("indices")}), kQuiet, false},
      {"Slice(Shape)", op("Slice", {op("Shape", {any()}).as("shape")}), kQuiet, false},
      {"Reshape shape", op("Reshape", {any("x"), any("shape")}), kQuiet, false},
      {"Gather(shape vector)", op("Gather", {op("Concat").as("vec"), cst("indices")}), kQuiet, false},
      {"Slice(shape vector)", op("Slice", {op("Concat").as("vec")}), kQuiet, false},
      {"Shape(Transpose)", op("Shape", {op("Transpose", {any("x")}).as("moved")}), kQuiet, false},
      {"Shape(Reshape)", op("Shape", {op("Reshape", {any("x"), cst("to")}).as("moved")}), kQuiet, false},
  };
  // Makes the root's output the constant t in place (as constant folding does), dropping the root and
  // its shape-producing input when nothing else reads it.
  auto fold = [&](ir::Node* root, const Tensor& t, ir::Node* source) {
    ir::Value* out = root->outputs[0];
    rw.log("folded " + root->describe() + " to a constant");
    out->constant = t;
    out->type = ir::Type::tensor(DataType::kInt64, ir::SymShape::of(t.shape()));
    g.remove_node(root);
    rw.remove_unread({source});
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* root = m.root();
    if (root->op_type == "Shape") {
      // The shape of a Transpose or of a Reshape to a constant shape, read from its input's shape:
      // the moved tensor loses a reader that only wanted its dims (GPT-2's causal-mask sizes read
      // from Q's and K's head transposes, which kept fuse-attention from taking them).
      if (root->attrs.count("start") || root->attrs.count("end")) return "a Shape with start/end";
      const ir::Node* moved = m.node("moved");
      ir::Value* x = m["x"];
      const auto& xs = x->type.shape;
      std::vector<int64_t> pick;  // per output dim: x's dim index, or -(static size) - 1
      if (moved->op_type == "Transpose") {
        if (!xs.known) return "rank unknown";
        std::vector<int64_t> perm = moved->attr_ints("perm", {});
        if (perm.empty())
          for (int64_t i = xs.rank() - 1; i >= 0; --i) perm.push_back(i);
        if (static_cast<int64_t>(perm.size()) != xs.rank()) return "perm does not match the rank";
        for (int64_t p : perm)
          if (p < 0 || p >= xs.rank()) return "bad perm";
        pick = perm;
      } else {
        if (moved->attr_int("allowzero", 0) != 0) return "allowzero";
        const Tensor& to = *m["to"]->constant;
        if (to.dtype() != DataType::kInt64 || to.rank() != 1) return "shape is not 1-D int64";
        for (int64_t i = 0; i < to.numel(); ++i) {
          const int64_t d = to.data<int64_t>()[i];
          if (d < 0) return "a -1 in the shape";
          if (d == 0 && (!xs.known || i >= xs.rank())) return "a copied dim past x's rank";
          pick.push_back(d == 0 ? i : -d - 1);
        }
      }
      const std::string what = root->describe();
      ir::Value* shape = g.new_value(x->name + "_shape", ir::Type::tensor(DataType::kInt64, ir::SymShape({xs.known ? xs.rank() : 0})));
      g.add_node("Shape", "", {x}, {shape})->opset = root->opset;
      std::vector<ir::Value*> pieces;
      for (size_t k = 0; k < pick.size();) {
        std::vector<int64_t> run;
        const bool from_x = pick[k] >= 0;
        for (; k < pick.size() && (pick[k] >= 0) == from_x; ++k) run.push_back(from_x ? pick[k] : -pick[k] - 1);
        if (!from_x) {
          pieces.push_back(rw.constant("dims", int64_tensor(run, false)));
          continue;
        }
        ir::Value* dims = g.new_value(x->name + "_dims", ir::Type::tensor(DataType::kInt64, ir::SymShape({static_cast<int64_t>(run.size())})));
        ir::Node* gather = g.add_node("Gather", "", {shape, rw.constant("picks", int64_tensor(run, false))}, {dims});
        gather->opset = 13;
        gather->attrs["axis"].kind = ir::Attribute::Kind::kInt;
        gather->attrs["axis"].i = 0;
        pieces.push_back(dims);
      }
      ir::Node* cat = rw.replace(m, "Concat", "", 13, pieces);
      cat->attrs["axis"].kind = ir::Attribute::Kind::kInt;
      cat->attrs["axis"].i = 0;
      rw.log("read " + what + " from the shape of " + x->name);
      return "";
    }
    if (root->op_type == "Reshape") {
      // (An element computed otherwise, torchvision's B*H, is the one -1 below when all others are known.)
      auto elems = shape_value_partial(m["shape"]);
      if (!elems || root->attr_int("allowzero", 0) != 0 || m["shape"]->is_constant()) return "not simplifiable";
      const auto& xs = m["x"]->type.shape;
      if (!xs.known) return "x's rank unknown";
      std::vector<int64_t> dims;
      int unknown = -1;  // the one element read from another tensor's dynamic dim (-1 in the new shape)
      for (size_t i = 0; i < elems->size(); ++i) {
        if (!(*elems)[i]) {
          if (unknown >= 0) return "two dims are computed from other values";
          unknown = static_cast<int>(i);
          dims.push_back(-1);
          continue;
        }
        const ShapeElem& e = *(*elems)[i];
        if (!e.of) { dims.push_back(e.value); continue; }
        if (i < xs.dims.size() && (e.of == m["x"] ? e.value == static_cast<int64_t>(i) : same_symbol(e, xs.dims[i]))) {
          dims.push_back(0);  // x's own dim at this position: copied
          continue;
        }
        if (const auto v = static_value(e)) {
          dims.push_back(*v);
          continue;
        }
        if (unknown >= 0) return "two dims are computed from other values";
        unknown = static_cast<int>(i);
        dims.push_back(-1);
      }
      // One dim read from another tensor (torchvision's attention: the batch, from a transposed copy):
      // the element count fixes it, so it becomes -1 and shape inference learns every other dim.
      if (unknown >= 0)
        for (size_t i = 0; i < dims.size(); ++i)
          if (static_cast<int>(i) != unknown && dims[i] < 0) return "a -1 already";
      const std::string what = root->describe();
      g.set_input(root, 1, rw.constant("shape", int64_tensor(dims, false)));
      rw.log("made the shape of " + what + " constant");
      return "";
    }
    if (root->op_type == "Gather" && root->attr_int("axis", 0) != 0) return "axis is not 0";
    if (m.has("vec")) {
      // Gather/Slice of a shape vector built from pieces (Concat of dims and constants, as the
      // Shape(Transpose/Reshape) rewrites below make): a constant when the picked pieces are static.
      auto elems = shape_value(m["vec"]);
      if (!elems) return "not a shape vector";
      std::vector<ir::Dim> dims;
      for (const ShapeElem& e : *elems) {
        const auto v = static_value(e);
        dims.push_back(v ? ir::Dim(*v) : ir::Dim(std::string()));
      }
      auto t = root->op_type == "Gather" ? gather_dims(dims, m["indices"]) : slice_dims(dims, *root);
      if (!t) return "a picked dim is dynamic";
      fold(root, *t, m.node("vec"));
      return "";
    }
    auto dims = shape_dims(*m.node("shape"));
    if (!dims) return "rank unknown";
    auto t = root->op_type == "Gather" ? gather_dims(*dims, m["indices"]) : slice_dims(*dims, *root);
    if (!t && root->op_type == "Gather" && m["indices"]->constant->rank() <= 1) {
      const std::string what = root->describe();
      if (!gather_from_inputs(rw, m, *dims)) return "a picked dim is symbolic";
      rw.log("read " + what + " from the graph inputs' shapes");
      return "";
    }
    if (!t) return "a picked dim is symbolic";
    fold(root, *t, m.node("shape"));
    return "";
  });
}

}  // namespace kiln::passes
