// passes/pattern.cpp — the pattern matcher and rewriter (see pattern.h).
#include "passes/pattern.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "ir/float_types.h"

namespace kiln::passes {

Pat any(std::string name) { Pat p; p.kind = Pat::Kind::kAny; p.name = std::move(name); return p; }
Pat cst(std::string name) { Pat p; p.kind = Pat::Kind::kConst; p.name = std::move(name); return p; }

Pat op(const std::string& ops, std::vector<Pat> inputs) {
  Pat p;
  p.kind = Pat::Kind::kOp;
  std::stringstream ss(ops);
  for (std::string s; std::getline(ss, s, '|');) p.ops.push_back(s);
  p.in = std::move(inputs);
  return p;
}

Pat maybe(Pat p) { p.optional = true; return p; }

ir::Value* Match::operator[](const std::string& n) const {
  auto it = values.find(n);
  return it == values.end() ? nullptr : it->second;
}

ir::Node* Match::node(const std::string& n) const {
  auto it = nodes.find(n);
  return it == nodes.end() ? nullptr : it->second;
}

namespace {

std::string label(const Pat& p) {
  std::string s;
  for (size_t i = 0; i < p.ops.size(); ++i) s += (i ? "|" : "") + p.ops[i];
  return s;
}

std::string value_label(const ir::Value* v) {
  if (!v) return "an omitted input";
  if (v->producer) return "'" + v->name + "' from " + v->producer->op_type;
  if (v->is_constant()) return "constant '" + v->name + "'";
  return "'" + v->name + "'";
}

bool bind(const Pat& p, ir::Value* v, Match& m) {
  if (p.name.empty()) return true;
  auto it = m.values.find(p.name);
  if (it != m.values.end()) {
    if (it->second == v) return true;
    m.why = "'" + p.name + "' is not the same value in both places";
    return false;
  }
  m.values[p.name] = v;
  return true;
}

bool match_inputs(const Pat& p, ir::Node* n, Match& m) {
  if (n->inputs.size() < p.in.size()) {
    m.why = n->describe() + " has fewer inputs than the pattern";
    return false;
  }
  auto in_order = [&](size_t a, size_t b) {
    return match(p.in[0], n->inputs[a], m) && match(p.in[1], n->inputs[b], m);
  };
  if (p.commutative && p.in.size() == 2) {
    Match saved = m;
    if (in_order(0, 1)) return true;
    Match first_try = m;
    m = saved;
    if (in_order(1, 0)) return true;
    if (first_try.depth > m.depth) m = first_try;  // report the order that got further
    return false;
  }
  for (size_t k = 0; k < p.in.size(); ++k) {
    const size_t i = p.last_first ? p.in.size() - 1 - k : k;
    if (!match(p.in[i], n->inputs[i], m)) return false;
  }
  return true;
}

bool match_op(const Pat& p, ir::Value* v, Match& m) {
  if (!p.name.empty() && m.values.count(p.name)) return bind(p, v, m);  // already matched there
  ir::Node* n = v ? v->producer : nullptr;
  if (!n || (v->producer_output != 0 && !p.any_output) || n->domain != p.domain ||
      std::find(p.ops.begin(), p.ops.end(), n->op_type) == p.ops.end()) {
    m.why = "expected " + label(p) + ", found " + value_label(v);
    return false;
  }
  if (std::find(m.matched.begin(), m.matched.end(), n) == m.matched.end()) m.matched.push_back(n);
  ++m.depth;
  if (!bind(p, v, m)) return false;
  if (!p.name.empty()) m.nodes[p.name] = n;
  return match_inputs(p, n, m);
}

}  // namespace

bool match(const Pat& p, ir::Value* v, Match& m) {
  switch (p.kind) {
    case Pat::Kind::kAny:
      if (!v) { m.why = "an input is omitted"; return false; }
      return bind(p, v, m);
    case Pat::Kind::kConst:
      if (!v || !v->is_constant()) {
        m.why = (p.name.empty() ? std::string("an input") : "'" + p.name + "'") + " is not constant (" +
                value_label(v) + ")";
        return false;
      }
      return bind(p, v, m);
    case Pat::Kind::kOp:
      if (!p.optional) return match_op(p, v, m);
      {
        Match saved = m;
        if (match_op(p, v, m)) return true;
        Match tried = m;
        m = saved;
        if (!p.in.empty() && match(p.in[0], v, m)) return true;
        if (tried.depth > m.depth) m = tried;
        return false;
      }
  }
  return false;
}

std::vector<double> constant_values(const ir::Value* v) {
  std::vector<double> r;
  if (!v || !v->is_constant()) return r;
  const Tensor& t = *v->constant;
  const int64_t n = t.numel();
  r.reserve(static_cast<size_t>(n));
  switch (t.dtype()) {
#define KILN_CASE(DT, T) \
    case DT: for (int64_t i = 0; i < n; ++i) r.push_back(static_cast<double>(t.data<T>()[i])); break;
    KILN_CASE(DataType::kFloat32, float)
    KILN_CASE(DataType::kFloat64, double)
    KILN_CASE(DataType::kInt64, int64_t)
    KILN_CASE(DataType::kInt32, int32_t)
    KILN_CASE(DataType::kInt8, int8_t)
    KILN_CASE(DataType::kUInt8, uint8_t)
#undef KILN_CASE
    case DataType::kFloat8E4M3FN:
      for (int64_t i = 0; i < n; ++i) r.push_back(mini_to_f32(static_cast<const uint8_t*>(t.raw())[i], MiniFloat::kE4M3FN));
      break;
    default: r.clear();
  }
  return r;
}

std::optional<double> scalar_value(const ir::Value* v) {
  if (!v || !v->is_constant() || v->constant->numel() != 1) return std::nullopt;
  auto vals = constant_values(v);
  if (vals.size() != 1) return std::nullopt;
  return vals[0];
}

bool is_scalar_constant(const ir::Value* v, double x, double tol) {
  auto vals = constant_values(v);
  if (vals.empty()) return false;
  for (double d : vals)
    if (!(std::fabs(d - x) <= tol * std::max(1.0, std::fabs(x)))) return false;
  return true;
}

std::optional<Tensor> real_tensor(DataType dt, const Shape& shape, const std::vector<double>& v) {
  if (dt != DataType::kFloat32 && dt != DataType::kFloat64) return std::nullopt;
  Tensor t = Tensor::empty(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == DataType::kFloat32) t.data<float>()[i] = static_cast<float>(v[i]);
    else t.data<double>()[i] = v[i];
  }
  return t;
}

std::optional<std::vector<double>> per_channel(const ir::Value* c, int rank, int64_t M) {
  auto vals = constant_values(c);
  if (vals.empty()) return std::nullopt;
  if (vals.size() == 1) return std::vector<double>(static_cast<size_t>(M), vals[0]);
  const Shape& s = c->constant->shape();
  const int r = static_cast<int>(s.size());
  if (r > rank || r < rank - 1) return std::nullopt;  // must reach the channel axis
  for (int i = 0; i < r; ++i) {
    const int axis = rank - r + i;
    if (axis == 1 ? (s[i] != M && s[i] != 1) : s[i] != 1) return std::nullopt;
  }
  if (static_cast<int64_t>(vals.size()) != M) return std::nullopt;
  return vals;
}

ir::Node* sole_reader(const ir::Value* v, bool any_times) {
  if (!v || v->is_output || v->uses.empty() || (!any_times && v->uses.size() != 1)) return nullptr;
  ir::Node* n = v->uses.front().node;
  for (const ir::Use& u : v->uses)
    if (u.node != n) return nullptr;
  return n;
}

bool same_dim(const ir::Dim& a, const ir::Dim& b) {
  return a.is_static() ? a.value == b.value : (!a.symbol.empty() && a.symbol == b.symbol);
}

std::optional<Shape> static_shape(const ir::Value* v) {
  if (!v || !v->type.is_tensor() || !v->type.shape.known || !v->type.shape.is_static()) return std::nullopt;
  return v->type.shape.to_static();
}

Tensor int64_tensor(const std::vector<int64_t>& v, bool scalar) {
  Tensor t = Tensor::empty(DataType::kInt64, scalar ? Shape{} : Shape{static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// Exactly (through double, INT64_MAX would round to 2^63, past int64: undefined behaviour, found by
// fuzz_import).
std::optional<std::vector<int64_t>> integer_values(const Tensor& t) {
  std::vector<int64_t> r(static_cast<size_t>(t.numel()));
  if (t.dtype() == DataType::kInt64)
    for (int64_t i = 0; i < t.numel(); ++i) r[i] = t.data<int64_t>()[i];
  else if (t.dtype() == DataType::kInt32)
    for (int64_t i = 0; i < t.numel(); ++i) r[i] = t.data<int32_t>()[i];
  else
    return std::nullopt;
  return r;
}

std::optional<std::vector<int64_t>> reduce_axes(const ir::Node& n) {
  const int axes_input_since = n.op_type == "ReduceSum" ? 13 : 18;
  if (n.opset >= axes_input_since) {
    if (!n.has_input(1)) return std::vector<int64_t>{};
    if (!n.inputs[1]->is_constant()) return std::nullopt;
    return integer_values(*n.inputs[1]->constant);
  }
  return n.attr_ints("axes");
}

// The elements of a 1-D int64 shape vector built by Shape/Gather/Slice/Unsqueeze/Squeeze/Concat/Cast
// from constants and other tensors' dims; nullopt when something else computes it.
std::optional<std::vector<ShapeElem>> shape_value(const ir::Value* v, int depth) {
  if (!v || depth > 16) return std::nullopt;
  if (v->is_constant()) {
    if (v->constant->rank() > 1 || (v->constant->dtype() != DataType::kInt64 && v->constant->dtype() != DataType::kInt32))
      return std::nullopt;
    const std::optional<std::vector<int64_t>> values = integer_values(*v->constant);  // (kept: the loop reads it)
    std::vector<ShapeElem> r;
    for (int64_t d : *values) r.push_back({nullptr, d});
    return r;
  }
  const ir::Node* n = v->producer;
  if (!n || !n->domain.empty() || v->producer_output != 0 || n->inputs.empty()) return std::nullopt;
  const std::string& op = n->op_type;
  if (op == "Shape") {
    const ir::Value* x = n->inputs[0];
    if (!x || !x->type.is_tensor() || !x->type.shape.known) return std::nullopt;
    const int64_t rank = x->type.shape.rank();
    int64_t start = n->attr_int("start", 0), end = n->attr_int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, start, rank);
    std::vector<ShapeElem> r;
    for (int64_t i = start; i < end; ++i) {
      const ir::Dim& d = x->type.shape.dims[i];
      r.push_back(d.is_static() ? ShapeElem{nullptr, d.value} : ShapeElem{x, i});
    }
    return r;
  }
  if (op == "Unsqueeze" || op == "Squeeze" || (op == "Cast" && n->attr_int("to", 0) == static_cast<int64_t>(DataType::kInt64)))
    return shape_value(n->inputs[0], depth + 1);
  if (op == "Concat") {
    std::vector<ShapeElem> r;
    for (const ir::Value* in : n->inputs) {
      auto part = shape_value(in, depth + 1);
      if (!part) return std::nullopt;
      r.insert(r.end(), part->begin(), part->end());
    }
    return r;
  }
  if (op == "Gather" && n->attr_int("axis", 0) == 0 && n->has_input(1)) {
    auto src = shape_value(n->inputs[0], depth + 1);
    const auto idx = constant_values(n->inputs[1]);
    if (!src || idx.empty() || n->inputs[1]->constant->rank() > 1) return std::nullopt;
    std::vector<ShapeElem> r;
    const int64_t size = static_cast<int64_t>(src->size());
    for (double d : idx) {
      int64_t i = saturating_int64(d);
      if (i < 0) i += size;
      if (i < 0 || i >= size) return std::nullopt;
      r.push_back((*src)[i]);
    }
    return r;
  }
  if (op == "Slice" && n->opset >= 10 && n->inputs.size() >= 3) {
    auto src = shape_value(n->inputs[0], depth + 1);
    const auto starts = constant_values(n->inputs[1]), ends = constant_values(n->inputs[2]);
    if (!src || starts.size() != 1 || ends.size() != 1) return std::nullopt;
    if (n->has_input(4) && !is_scalar_constant(n->inputs[4], 1, 0)) return std::nullopt;
    const int64_t size = static_cast<int64_t>(src->size());
    int64_t b = static_cast<int64_t>(std::clamp<double>(starts[0], -1e15, 1e15));
    int64_t e = static_cast<int64_t>(std::clamp<double>(ends[0], -1e15, 1e15));
    if (b < 0) b += size;
    if (e < 0) e += size;
    b = std::clamp<int64_t>(b, 0, size);
    e = std::clamp<int64_t>(e, b, size);
    return std::vector<ShapeElem>(src->begin() + b, src->begin() + e);
  }
  return std::nullopt;
}

std::optional<std::vector<std::optional<ShapeElem>>> shape_value_partial(const ir::Value* v) {
  std::vector<std::optional<ShapeElem>> r;
  if (auto all = shape_value(v)) {
    for (const ShapeElem& e : *all) r.push_back(e);
    return r;
  }
  const ir::Node* n = v ? v->producer : nullptr;
  if (!n || !n->domain.empty() || n->op_type != "Concat") return std::nullopt;
  for (const ir::Value* in : n->inputs) {
    if (auto part = shape_value(in)) {
      for (const ShapeElem& e : *part) r.push_back(e);
      continue;
    }
    // An element computed otherwise: a 1-element 1-D part.
    if (!in || !in->type.shape.known || in->type.shape.rank() != 1 || !in->type.shape.dims[0].is_static() ||
        in->type.shape.dims[0].value != 1)
      return std::nullopt;
    r.push_back(std::nullopt);
  }
  return r;
}

int64_t proven_last_dim(const ir::Value* x) {
  auto static_last = [](const ir::Value* v) -> int64_t {
    const ir::SymShape& s = v->type.shape;
    return s.known && s.rank() > 0 && s.dims.back().is_static() ? s.dims.back().value : 0;
  };
  if (int64_t d = static_last(x)) return d;
  const ir::Node* p = x->producer;
  // (through Add/Mul a last dim of 1 proves nothing: broadcasting may widen it)
  for (int i = 0; i < 4 && p && p->domain.empty() && (p->op_type == "Add" || p->op_type == "Mul") && p->has_input(0); ++i) {
    if (int64_t d = static_last(p->inputs[0])) return d > 1 ? d : 0;
    p = p->inputs[0]->producer;
  }
  const bool through = p != x->producer;
  if (!p || !p->domain.empty() || p->op_type != "Transpose" || !p->has_input(0)) return 0;
  const std::vector<int64_t> perm = p->attr_ints("perm");
  const ir::Node* r = p->inputs[0]->producer;
  if (perm.empty() || !r || !r->domain.empty() || r->op_type != "Reshape") return 0;
  const auto el = shape_value_partial(r->inputs.size() > 1 ? r->inputs[1] : nullptr);
  const int64_t src = perm.back();
  if (!el || src < 0 || src >= static_cast<int64_t>(el->size()) || el->size() != perm.size()) return 0;
  const auto& e = (*el)[static_cast<size_t>(src)];
  return e && !e->of && (e->value > 1 || (e->value == 1 && !through)) ? e->value : 0;
}

std::string check_exclusive(const Match& m) {
  for (size_t i = 1; i < m.matched.size(); ++i) {
    const ir::Node* n = m.matched[i];
    for (const ir::Value* o : n->outputs) {
      if (!o) continue;
      if (o->is_output) return "'" + o->name + "' (" + n->op_type + ") is a graph output";
      for (const ir::Use& u : o->uses)
        if (std::find(m.matched.begin(), m.matched.end(), u.node) == m.matched.end())
          return "'" + o->name + "' (" + n->op_type + ") is also read by " + u.node->describe();
    }
  }
  return "";
}

bool Rewriter::run(const std::vector<Rule>& rules, const Build& build) {
  bool changed = false;
  // Consumers first, so the largest pattern (rooted at its last node) wins over the ones inside it.
  const std::vector<ir::Node*> nodes(g_.nodes().rbegin(), g_.nodes().rend());
  for (ir::Node* n : nodes) {
    if (dead(n) || n->outputs.empty() || !n->outputs[0]) continue;
    Match best;
    const Rule* best_rule = nullptr;
    std::vector<std::string> full_misses;
    bool done = false;
    for (const Rule& r : rules) {
      Match m;
      if (!match(r.pattern, n->outputs[0], m)) {
        if (m.depth >= r.near_miss_depth && m.depth > best.depth) { best = m; best_rule = &r; }
        continue;
      }
      std::string why = r.exclusive ? check_exclusive(m) : std::string();
      if (why.empty()) why = build(m);
      if (why.empty()) { changed = done = true; break; }
      if (r.near_miss_depth >= kQuiet) continue;
      full_misses.push_back(r.what + " at " + n->describe() + ": " + why);  // each full match that did not fire
    }
    if (done) continue;
    for (const std::string& s : full_misses) near_miss(s);
    if (full_misses.empty() && best_rule) near_miss(best_rule->what + " at " + n->describe() + ": " + best.why);
  }
  return changed;
}

ir::Node* Rewriter::replace(Match& m, const std::string& op, const std::string& domain, int opset,
                            std::vector<ir::Value*> inputs, std::vector<ir::Value*> extra_outputs) {
  ir::Node* root = m.root();
  ir::Value* out = root->outputs[0];
  const std::string name = root->name;
  std::vector<ir::Node*> matched = m.matched;
  // The root goes first so that its output value can be given to the new node.
  for (size_t i = 1; i < root->outputs.size(); ++i)
    if (root->outputs[i]) root->outputs[i]->producer = nullptr;
  g_.remove_node(root);
  dead_.insert(root);
  std::vector<ir::Value*> outs = {out};
  outs.insert(outs.end(), extra_outputs.begin(), extra_outputs.end());
  ir::Node* n = g_.add_node(op, domain, std::move(inputs), std::move(outs), name + "_fused");
  n->opset = opset;
  matched.erase(matched.begin());
  remove_unread(matched);
  return n;
}

void Rewriter::remove(ir::Node* n) {
  g_.remove_node(n);
  dead_.insert(n);
}

void Rewriter::remove_unread(std::vector<ir::Node*> nodes) {
  for (bool progress = true; progress;) {
    progress = false;
    for (ir::Node*& n : nodes) {
      if (!n || dead(n)) continue;
      bool read = false;
      for (const ir::Value* o : n->outputs) read |= o && (o->is_output || !o->uses.empty());
      if (read) continue;
      g_.remove_node(n);
      dead_.insert(n);
      n = nullptr;
      progress = true;
    }
  }
}

bool Rewriter::bypass(ir::Node* n, ir::Value* in) {
  ir::Value* out = n->outputs[0];
  if (!out->is_output) {
    g_.replace_all_uses(out, in);
    remove_unread({n});
    return true;
  }
  // `out` is a graph output: keep its name by making in's producer write `out` directly.
  ir::Node* p = in->producer;
  if (!p || in->is_output || in->is_input || in->uses.size() != 1) return false;
  const int k = in->producer_output;
  g_.remove_node(n);
  dead_.insert(n);
  out->type = in->type.kind == ir::Type::Kind::kUnknown ? out->type : in->type;
  g_.set_output(p, k, out);
  return true;
}

void set_int(ir::Node* n, const char* key, int64_t v) {
  n->attrs[key].kind = ir::Attribute::Kind::kInt;
  n->attrs[key].i = v;
}

void set_float(ir::Node* n, const char* key, double v) {
  n->attrs[key].kind = ir::Attribute::Kind::kFloat;
  n->attrs[key].f = static_cast<float>(v);
}

ir::Attribute ints_attribute(std::vector<int64_t> v) {
  ir::Attribute a;
  a.kind = ir::Attribute::Kind::kInts;
  a.ints = std::move(v);
  return a;
}

ir::Value* new_constant(ir::Graph& g, const std::string& hint, Tensor t) {
  ir::Value* v = g.new_value(hint, ir::Type::tensor(t.dtype(), ir::SymShape::of(t.shape())));
  v->constant = std::move(t);
  return v;
}

ir::Value* Rewriter::constant(const std::string& hint, const Tensor& t) { return new_constant(g_, hint, t); }

}  // namespace kiln::passes
