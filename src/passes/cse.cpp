// passes/cse.cpp — common subexpression elimination: equal small constants become one value, then
// nodes with the same op, opset, attributes and inputs are computed once.
#include <cstring>
#include <set>
#include <sstream>

#include "ops/op_table.h"
#include "passes/pattern.h"

namespace kiln::passes {
namespace {

constexpr size_t kMaxConstantBytes = 1 << 16;  // larger constants are weights: not worth hashing

bool exact_key(const ir::Attribute& a, std::ostringstream& os) {
  using K = ir::Attribute::Kind;
  auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
  switch (a.kind) {
    case K::kFloat: os << "f" << bits(a.f); return true;
    case K::kInt: os << "i" << a.i; return true;
    case K::kString: os << "s" << a.s.size() << ":" << a.s; return true;
    case K::kFloats: os << "F"; for (float f : a.floats) os << bits(f) << ","; return true;
    case K::kInts: os << "I"; for (int64_t i : a.ints) os << i << ","; return true;
    case K::kStrings: os << "S"; for (const auto& s : a.strings) os << s.size() << ":" << s; return true;
    default: return false;  // tensors, graphs, types: not merged
  }
}

// A key equal for two nodes that compute the same thing, or "" when n must not be merged.
std::string node_key(const ir::Node& n) {
  if (ops::is_nondeterministic(n) || n.outputs.empty()) return "";
  std::ostringstream os;
  os << n.domain << "|" << n.op_type << "|" << n.opset << "|" << n.outputs.size() << "|";
  for (const ir::Value* v : n.inputs) os << static_cast<const void*>(v) << ",";
  for (const auto& [k, a] : n.attrs) {
    os << "|" << k << "=";
    if (!exact_key(a, os)) return "";
  }
  return os.str();
}

std::string constant_key(const Tensor& t) {
  if (t.dtype() == DataType::kString || t.nbytes() > kMaxConstantBytes) return "";
  std::string k = std::to_string(static_cast<int>(t.dtype())) + shape_to_string(t.shape()) + ":";
  k.append(static_cast<const char*>(t.raw()), t.nbytes());
  return k;
}

}  // namespace

Expected<bool> eliminate_common_subexpressions(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "cse");
  bool changed = false;
  std::map<std::string, ir::Value*> constants;
  for (ir::Value* v : g.values()) {
    if (!v->is_constant() || v->is_output || v->uses.empty() || v->producer) continue;
    const std::string k = constant_key(*v->constant);
    if (k.empty()) continue;
    auto [it, fresh] = constants.emplace(k, v);
    if (fresh) continue;
    rw.log("constant '" + v->name + "' is '" + it->second->name + "'");
    g.replace_all_uses(v, it->second);
    changed = true;
  }
  std::map<std::string, ir::Node*> seen;
  // Iterate over a copy: merging removes nodes from the graph's order.
  const std::vector<ir::Node*> nodes = g.nodes();
  for (ir::Node* n : nodes) {
    if (rw.dead(n)) continue;
    const std::string k = node_key(*n);
    if (k.empty()) continue;
    auto [it, fresh] = seen.emplace(k, n);
    if (fresh) continue;
    ir::Node* first = it->second;
    bool ok = true;
    for (size_t i = 0; i < n->outputs.size(); ++i)
      ok &= !n->outputs[i] || !n->outputs[i]->is_output || (first->outputs[i] && !first->outputs[i]->is_output);
    if (!ok) continue;  // both write graph outputs: keep both names
    for (size_t i = 0; i < n->outputs.size(); ++i) ok &= !n->outputs[i] || first->outputs[i];
    if (!ok) continue;
    for (size_t i = 0; i < n->outputs.size(); ++i) {
      ir::Value* o = n->outputs[i];
      if (!o) continue;
      if (o->is_output) {
        // Keep the graph output's name: the first node writes it, and its old value's readers follow.
        ir::Value* keep = first->outputs[i];
        g.replace_all_uses(keep, o);
        g.set_output(first, static_cast<int>(i), o);
      } else {
        g.replace_all_uses(o, first->outputs[i]);
      }
    }
    rw.log("merged " + n->describe() + " into " + first->describe());
    n->outputs.assign(n->outputs.size(), nullptr);
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
