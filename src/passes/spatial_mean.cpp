// passes/spatial_mean.cpp — ReduceMean over every spatial axis of an NCHW tensor, keeping the dims, is
// GlobalAveragePool (the same values, [N, C, 1, 1]): torch 2.x exports a squeeze-excitation block's
// pooling (EfficientNet, MobileNetV3, RegNet-Y) as ReduceMean(axes = [2, 3], keepdims = 1), and a
// reduction knows nothing of channels-last layouts while the pool does (passes/channels_last.cpp keeps
// it in the NHWC chain, no transpose back to NCHW around it). EfficientNet-B3 from torch 2.11 at 1
// thread: its 26 ReduceMeans took 4.2 ms with their transposes, ORT 1.30's 0.7.
#include "passes/pattern.h"

namespace kiln::passes {

Expected<bool> spatial_mean_to_pool(ir::Graph& g, PassContext& ctx) {
  bool changed = false;
  for (ir::Node* n : g.nodes()) {
    if (!n->domain.empty() || n->op_type != "ReduceMean" || !n->has_input(0) || n->outputs.empty() || !n->outputs[0])
      continue;
    const ir::Value* x = n->inputs[0];
    const DataType dt = x->type.dtype;
    // Images only (NCHW): a rank-3 ReduceMean over its last axis is a transformer's LayerNorm, which
    // fuse-layer-norm must still see.
    if (!x->type.shape.known || x->type.shape.rank() != 4) continue;
    if (dt != DataType::kFloat32 && dt != DataType::kFloat16 && dt != DataType::kFloat64) continue;
    const int64_t rank = x->type.shape.rank();
    if (n->attr_int("keepdims", 1) != 1) {
      ctx.near_miss("spatial-mean", n->describe() + ": keepdims = 0");
      continue;
    }
    // The axes: an attribute before opset 18, a constant input from 18.
    std::vector<int64_t> axes;
    if (n->opset < 18) {
      axes = n->attr_ints("axes");
    } else {
      if (!n->has_input(1)) continue;  // no axes: every axis (or none with noop_with_empty_axes)
      if (!n->inputs[1]->is_constant()) continue;
      for (double a : constant_values(n->inputs[1])) axes.push_back(static_cast<int64_t>(a));
    }
    if (axes.empty()) continue;
    std::vector<bool> seen(static_cast<size_t>(rank), false);
    bool spatial = static_cast<int64_t>(axes.size()) == rank - 2;
    for (int64_t a : axes) {
      if (a < 0) a += rank;
      if (a < 2 || a >= rank || seen[static_cast<size_t>(a)]) spatial = false;
      else seen[static_cast<size_t>(a)] = true;
    }
    if (!spatial) continue;
    if (n->has_input(1)) {
      g.set_input(n, 1, nullptr);
      n->inputs.resize(1);
    }
    const std::string before = n->describe();
    n->op_type = "GlobalAveragePool";
    n->opset = 1;
    n->attrs.clear();
    ctx.log("spatial-mean", before + " over every spatial axis is GlobalAveragePool");
    changed = true;
  }
  return changed;
}

}  // namespace kiln::passes
