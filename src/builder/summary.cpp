// builder/summary.cpp — what `kiln info` reports about a model.
#include "backends/backend.h"
#include "onnx/importer.h"
#include "ops/op_table.h"
#include "passes/passes.h"
#include "runtime/engine_impl.h"

namespace kiln {

static void walk(const ir::Graph& g, ModelSummary& s) {
  for (const ir::Node* n : g.nodes()) {
    const std::string key = n->domain.empty() || n->domain == "ai.onnx" ? n->op_type : n->domain + "." + n->op_type;
    ++s.op_histogram[key];
    ++s.num_nodes;
    std::string why;
    // A lowered op (ONNX Runtime's contrib ops) has no kernel of its own: lower-contrib-ops rewrites it
    // into ops that have, and refuses (naming the node) only the forms it cannot rewrite.
    if (!passes::is_lowered(*n) && !cpu_backend().kernels().find(*n, &why))
      s.unsupported.push_back(n->describe() + ": " + (why.empty() ? "no CPU kernel for this op" : why));
    for (const auto& [k, a] : n->attrs) {
      if (a.g) walk(*a.g, s);
      for (const auto& sg : a.graphs) walk(*sg, s);
    }
  }
}

Expected<ModelSummary> summarize_model(const std::string& onnx_path) {
  KILN_ASSIGN_OR_RETURN(ir::Model model, onnx::import_file(onnx_path));
  ModelSummary s;
  s.path = onnx_path;
  s.producer = model.producer_name + (model.producer_version.empty() ? "" : " " + model.producer_version);
  s.graph_name = model.graph->name;
  s.ir_version = model.ir_version;
  s.opsets = model.graph->opsets;
  for (const ir::Value* v : model.graph->inputs)
    if (!v->constant) s.inputs.push_back(tensor_info(*v));
  for (const ir::Value* v : model.graph->outputs) s.outputs.push_back(tensor_info(*v));
  for (const ir::Value* v : model.graph->values())
    if (v->constant && !v->producer) {
      s.num_parameters += v->constant->numel();
      s.parameter_bytes += static_cast<int64_t>(v->constant->nbytes());
    }
  walk(*model.graph, s);
  return s;
}

std::vector<KernelInfo> list_kernels() {
  std::vector<KernelInfo> out;
  std::vector<Backend*> backends = {&cpu_backend()};
  if (auto cuda = cuda_backend(); cuda.ok()) backends.push_back(*cuda);
  for (Backend* b : backends) {
    for (const KernelDef& d : b->kernels().all()) {
      KernelInfo k;
      k.op = d.op;
      k.domain = d.domain;
      k.name = d.name;
      k.device = b->name();
      k.since = d.since;
      k.until = d.until;
      if (const ops::OpDef* def = ops::find_op(d.domain, d.op)) k.how = def->how;
      for (int code = 1; code <= 26; ++code) {
        const DataType dt = static_cast<DataType>(code);
        ir::Graph g;
        ir::Value* in = g.add_value("x", ir::Type::tensor(dt));
        ir::Node* n = g.add_node(d.op, d.domain, {in}, {g.add_value("y")});
        n->opset = d.since;
        if (!d.check || d.check(*n).empty()) k.dtypes.push_back(dt);
      }
      out.push_back(std::move(k));
    }
  }
  return out;
}

std::vector<LoweredOpInfo> list_lowered_ops() {
  std::vector<LoweredOpInfo> out;
  for (const ops::OpDef& d : ops::op_table())
    if (d.how == "lowered") out.push_back({d.name, d.domain, d.since});
  return out;
}

}  // namespace kiln
