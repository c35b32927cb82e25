// backends/inner_context.h — runs the kernel of an op inside a fused op's kernel (FusedConv runs
// Conv's kernel, then its epilogue): the fused node's inputs and output 0, as the inner op sees them.
// Shared by the CPU and CUDA fused kernels.
#pragma once

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "backends/kernel.h"
#include "ir/graph.h"

namespace kiln {

// A fused node's ai.onnx counterpart: its attributes without the activation, its first `inputs`
// inputs and its output 0.
inline std::shared_ptr<ir::Node> inner_node(const ir::Node& n, const std::string& op, int opset, size_t inputs) {
  auto inner = std::make_shared<ir::Node>();
  inner->name = n.name;
  inner->op_type = op;
  inner->opset = opset;
  inner->attrs = n.attrs;
  inner->attrs.erase("activation");
  inner->attrs.erase("activation_params");
  inner->inputs.assign(n.inputs.begin(), n.inputs.begin() + std::min(n.inputs.size(), inputs));
  inner->outputs = {n.outputs[0]};
  return inner;
}

// The inner kernel's reshape as the fused node's: same output, workspace and per-shape state.
inline Status reshape_inner(const ir::Node& inner, const Kernel& kernel, ReshapeContext& rc) {
  ReshapeContext ir{inner, {}, {}, rc.device_state, 0, nullptr, rc.tactic};
  ir.in.assign(rc.in.begin(), rc.in.begin() + std::min(rc.in.size(), inner.inputs.size()));
  ir.out.resize(1);
  KILN_RETURN_IF_ERROR(kernel.reshape(ir));
  rc.out[0] = ir.out[0];
  rc.workspace_bytes = ir.workspace_bytes;
  rc.state = std::move(ir.state);
  rc.planned_tactic = std::move(ir.planned_tactic);
  return Status::Ok();
}

// The inner kernel's tactics for the fused node's shapes (a fused op tunes as its inner op does).
inline std::vector<std::string> inner_tactics(const ir::Node& inner, const Kernel& kernel, const ReshapeContext& rc) {
  ReshapeContext ir{inner, {}, {}, rc.device_state, 0, nullptr, {}};
  ir.in.assign(rc.in.begin(), rc.in.begin() + std::min(rc.in.size(), inner.inputs.size()));
  ir.out.resize(1);
  return kernel.tactics(ir);
}

// Runs an inner kernel with the fused node's inputs and output 0.
class InnerContext final : public KernelContext {
 public:
  InnerContext(KernelContext& outer, const ir::Node& node, int inputs) : outer_(outer), node_(node), inputs_(inputs) {}
  int num_inputs() const override { return std::min(inputs_, outer_.num_inputs()); }
  int num_outputs() const override { return 1; }
  bool has_input(int i) const override { return i < num_inputs() && outer_.has_input(i); }
  const Slot& input_slot(int i) const override { return outer_.input_slot(i); }
  bool has_output(int i) const override { return i == 0; }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    out0_ = &outer_.output(i, dtype, shape);
    return *out0_;
  }
  Tensor& output(int i) override {
    if (planned_) return *(out0_ = &outer_.output(i));
    return output(i, shapes.out[i].first, shapes.out[i].second);
  }
  void* workspace() override { return planned_ ? outer_.workspace() : shapes.workspace_ptr(); }
  const void* shape_state() const override { return planned_ ? planned_ : shapes.state.get(); }
  // The inner kernel was reshaped with the fused node's plan: its state, output and workspace are
  // the fused node's.
  void use_plan(const void* inner_state) { planned_ = inner_state; }
  Tensor* out0() const { return out0_; }
  Slot& output_slot(int i) override { return outer_.output_slot(i); }
  Tensor owned_copy(const Tensor& t) override { return outer_.owned_copy(t); }
  Status run_subgraph(const CompiledGraph& body, std::vector<Slot> in, std::vector<Slot>& out) override {
    return outer_.run_subgraph(body, std::move(in), out);
  }
  void* device_state() const override { return outer_.device_state(); }
  Status check_stop() const override { return outer_.check_stop(); }
  const ir::Node& node() const override { return node_; }
  AdHocShapes shapes;  // the inner kernel's reshape, made on each run when the fused node was not planned

 private:
  KernelContext& outer_;
  const ir::Node& node_;
  int inputs_;
  Tensor* out0_ = nullptr;
  const void* planned_ = nullptr;
};

}  // namespace kiln
