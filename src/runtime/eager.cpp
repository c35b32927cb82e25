#include "runtime/eager.h"

#include "backends/backend.h"

namespace kiln {
namespace {

class EagerContext final : public KernelContext {
 public:
  EagerContext(const ir::Node& node, const std::vector<Slot>& in, std::vector<Slot>& out,
               std::chrono::steady_clock::time_point deadline)
      : node_(node), in_(in), out_(out), deadline_(deadline) {}
  int num_inputs() const override { return static_cast<int>(in_.size()); }
  int num_outputs() const override { return static_cast<int>(out_.size()); }
  bool has_input(int i) const override { return i < num_inputs() && in_[i].kind != Slot::Kind::kNone; }
  const Slot& input_slot(int i) const override { return in_[i]; }
  bool has_output(int i) const override { return node_.has_output(i); }
  Tensor& output(int i, DataType dtype, const Shape& shape) override {
    out_[i] = Slot::of(Tensor::empty(dtype, shape));
    return out_[i].tensor;
  }
  Tensor& output(int i) override { return output(i, shapes.out[i].first, shapes.out[i].second); }
  void* workspace() override { return shapes.workspace_ptr(); }
  const void* shape_state() const override { return shapes.state.get(); }
  Slot& output_slot(int i) override { return out_[i]; }
  Tensor owned_copy(const Tensor& t) override { return t.clone(); }
  Status run_subgraph(const CompiledGraph&, std::vector<Slot>, std::vector<Slot>&) override {
    return unsupported(node_.describe() + ": subgraphs cannot run eagerly");
  }
  void* device_state() const override { return nullptr; }
  Status check_stop() const override {
    if (deadline_ != std::chrono::steady_clock::time_point::max() && std::chrono::steady_clock::now() > deadline_)
      return cancelled(node_.describe() + ": stopped: the build ran past its time limit");
    return Status::Ok();
  }
  const ir::Node& node() const override { return node_; }
  AdHocShapes shapes;

 private:
  const ir::Node& node_;
  const std::vector<Slot>& in_;
  std::vector<Slot>& out_;
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace

Expected<std::vector<Slot>> run_node_eager(const ir::Node& node, const std::vector<Slot>& inputs,
                                           SubgraphRunner* subgraphs, std::chrono::steady_clock::time_point deadline) {
  std::string why;
  const KernelDef* def = cpu_backend().kernels().find(node, &why);
  if (!def) return unsupported(node.describe() + ": no CPU kernel" + (why.empty() ? "" : " (" + why + ")"));
  KernelInit init;
  init.subgraphs = subgraphs;
  std::vector<Slot> outputs(node.outputs.size());
  try {
    KILN_ASSIGN_OR_RETURN(KernelPtr kernel, def->create(node, init));
    EagerContext ctx(node, inputs, outputs, deadline);
    KILN_RETURN_IF_ERROR(ctx.shapes.prepare(*kernel, ctx, [](size_t b) { return cpu_backend().allocate(b); }));
    KILN_RETURN_IF_ERROR(kernel->run(ctx));
  } catch (const std::bad_alloc&) {
    return runtime_error(node.describe() + ": out of memory");
  } catch (const std::exception& e) {
    return runtime_error(node.describe() + ": " + e.what());
  }
  return outputs;
}

}  // namespace kiln
