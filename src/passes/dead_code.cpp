// passes/dead_code.cpp — removes nodes none of whose outputs is read or returned.
#include "passes/passes.h"

namespace kiln::passes {

Expected<bool> eliminate_dead_code(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  const std::set<std::string> read_inside = ir::names_read_by_subgraphs(g);  // captures count as reads
  const auto nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    ir::Node* n = *it;
    bool live = false;
    for (ir::Value* o : n->outputs) live |= o && (!o->uses.empty() || o->is_output || read_inside.count(o->name));
    if (live) continue;
    ctx.log("dead-code", "removed " + n->describe());
    g.remove_node(n);
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
