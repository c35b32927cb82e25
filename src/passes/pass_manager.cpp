#include <iostream>

#include "ops/op_table.h"
#include "passes/passes.h"

namespace kiln::passes {

void PassContext::log(const std::string& pass, const std::string& what) {
  ++fired[pass];
  if (options.verbose) std::cerr << "kiln: [" << pass << "] " << what << "\n";
}

const std::vector<Pass>& pipeline() {
  static const std::vector<Pass> p = {
      {"fold-constants", 1, fold_constants},
      {"dead-code", 1, eliminate_dead_code},
  };
  return p;
}

Status optimize(ir::Graph& graph, const PassOptions& options, std::map<std::string, int>* fired) {
  PassContext ctx{options, {}};
  if (options.level > 0) {
    for (int round = 0; round < 8; ++round) {
      bool changed = false;
      for (const Pass& pass : pipeline()) {
        if (pass.min_level > options.level) continue;
        auto r = pass.run(graph, ctx);
        if (!r.ok()) return r.status().with_context("pass " + pass.name);
        changed |= *r;
      }
      if (!changed) break;
      KILN_RETURN_IF_ERROR(graph.sort());
      KILN_RETURN_IF_ERROR(ops::infer_graph(graph));
    }
  }
  graph.remove_dead_values();
  KILN_RETURN_IF_ERROR(graph.verify());
  if (fired) *fired = ctx.fired;
  return Status::Ok();
}

}  // namespace kiln::passes
