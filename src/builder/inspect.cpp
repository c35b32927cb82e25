// builder/inspect.cpp — what `kiln inspect` reports: the optimizer's work on a model, pass by pass.
#include "backends/backend.h"
#include "onnx/importer.h"
#include "builder/build.h"
#include "runtime/engine_impl.h"
#include "passes/passes.h"
#include "kiln/kiln.h"

namespace kiln {

static std::map<std::string, int> histogram(const ir::Graph& g, int* count) {
  std::map<std::string, int> h;
  *count = 0;
  for (const ir::Node* n : g.nodes()) {
    ++h[n->domain.empty() || n->domain == "ai.onnx" ? n->op_type : n->domain + "." + n->op_type];
    ++*count;
  }
  return h;
}

Expected<OptimizationReport> inspect_model(const std::string& onnx_path, int opt_level) {
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  OptimizationReport r;
  r.opt_level = opt_level;
  r.ops_before = histogram(*model.graph, &r.nodes_before);
  passes::PassOptions po = builder_pass_options(opt_level, &cpu_backend().kernels());
  passes::OptimizeStats stats;
  KILN_RETURN_IF_ERROR(passes::optimize(*model.graph, po, &stats));
  r.ops_after = histogram(*model.graph, &r.nodes_after);
  for (const passes::Pass& p : passes::pipeline()) {
    if (p.min_level > opt_level) continue;
    auto it = stats.fired.find(p.name);
    r.passes.push_back({p.name, it == stats.fired.end() ? 0 : it->second});
  }
  r.target_stages = target_stages();
  r.rewrites = stats.rewrites;
  r.near_misses = stats.near_misses;
  return r;
}

}  // namespace kiln
