// passes/transposes.cpp — Transpose(Transpose(x)) becomes one Transpose (or nothing when the
// permutations cancel), and identity Transposes are removed.
#include <numeric>

#include "passes/pattern.h"

namespace kiln::passes {
namespace {

// The node's permutation; empty when it is the default (reverse) and the rank is unknown.
std::vector<int64_t> perm_of(const ir::Node& n) {
  if (n.attr("perm")) return n.attr_ints("perm");
  const ir::Value* x = n.inputs[0];
  if (!x->type.is_tensor() || !x->type.shape.known) return {};
  std::vector<int64_t> p(x->type.shape.rank());
  std::iota(p.rbegin(), p.rend(), 0);
  return p;
}

bool is_identity(const std::vector<int64_t>& p) {
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

}  // namespace

Expected<bool> simplify_transposes(ir::Graph& g, PassContext& ctx) {
  Rewriter rw(g, ctx, "transposes");
  const std::vector<Rule> rules = {
      {"Transpose∘Transpose", op("Transpose", {op("Transpose", {any("x")}).as("inner")}), 2, false},
      {"identity Transpose", op("Transpose", {any("x")}), kQuiet},
  };
  return rw.run(rules, [&](Match& m) -> std::string {
    ir::Node* root = m.root();
    const std::vector<int64_t> p2 = perm_of(*root);
    if (p2.empty()) return "rank unknown";
    if (!m.node("inner")) {
      if (!is_identity(p2)) return "not an identity";
      const std::string what = root->describe();
      if (!rw.bypass(root, m["x"])) return "its output name must stay";
      rw.log("removed identity " + what);
      return "";
    }
    const std::vector<int64_t> p1 = perm_of(*m.node("inner"));
    if (p1.size() != p2.size()) return "permutations of different ranks";
    std::vector<int64_t> q(p2.size());
    for (size_t i = 0; i < q.size(); ++i) q[i] = p1[p2[i]];
    const std::string what = m.node("inner")->describe() + " + " + root->describe();
    if (is_identity(q)) {
      if (!rw.bypass(root, m["x"])) return "its output name must stay";
      rw.remove_unread({m.node("inner")});
      rw.log("cancelled " + what);
      return "";
    }
    ir::Node* t = rw.replace(m, "Transpose", "", root->opset, {m["x"]});
    t->attrs["perm"].kind = ir::Attribute::Kind::kInts;
    t->attrs["perm"].ints = q;
    rw.log("merged " + what);
    return "";
  });
}

}  // namespace kiln::passes
