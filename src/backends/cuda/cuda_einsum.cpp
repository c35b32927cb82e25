// backends/cuda/cuda_einsum.cpp — Einsum (12+) on the GPU: the contraction plan of ops/einsum.h, one
// thread per output element (launcher in cuda_einsum.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/einsum.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_einsum(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::EinsumParams p, ops::parse_einsum(n));
  const ops::EinsumSpec spec = p.spec;
  auto reshape = [spec](ReshapeContext& rc) -> Status {
    std::vector<Shape> shapes;
    for (const auto& in : rc.in) {
      if (!in.present || in.dtype != rc.in[0].dtype) return rc.error("all inputs must be present and share one dtype");
      shapes.push_back(in.shape);
    }
    if (shapes.size() > static_cast<size_t>(kMaxEinsumInputs)) return rc.error("more than 4 inputs do not run on CUDA");
    auto plan = ops::plan_einsum(spec, shapes);
    if (!plan.ok()) return rc.error(plan.status().message());
    if (plan->out_shape.size() > static_cast<size_t>(kMaxRank) || plan->red_sizes.size() > static_cast<size_t>(kMaxRank))
      return rc.error("more than 8 output or contracted labels do not run on CUDA");
    auto a = std::make_shared<EinsumArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->inputs = static_cast<int>(shapes.size());
    a->out_rank = static_cast<int>(plan->out_shape.size());
    a->red_rank = static_cast<int>(plan->red_sizes.size());
    for (int d = 0; d < a->out_rank; ++d) a->out_sizes[d] = plan->out_shape[d];
    for (int d = 0; d < a->red_rank; ++d) a->red_sizes[d] = plan->red_sizes[d];
    for (int k = 0; k < a->inputs; ++k) {
      for (int d = 0; d < a->out_rank; ++d) a->out_strides[k][d] = plan->out_strides[k][d];
      for (int d = 0; d < a->red_rank; ++d) a->red_strides[k][d] = plan->red_strides[k][d];
    }
    rc.out[0] = {rc.in[0].dtype, plan->out_shape};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    EinsumArgs a = shape_state<EinsumArgs>(ctx);
    for (int k = 0; k < a.inputs; ++k) a.in[k] = ctx.input(k).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_einsum(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_einsum(KernelRegistry& r) {
  r.add(kernel_row("Einsum", 12, [](const ir::Node& n) -> std::string {
    for (const ir::Value* v : n.inputs) {
      if (!v || !v->type.is_tensor()) return "every input is required";
      const DataType t = v->type.dtype;
      if (t != DataType::kUndefined && !is_float_type(t) && t != DataType::kFloat64 && t != DataType::kInt32 &&
          t != DataType::kInt64)
        return std::string(dtype_name(t)) + " does not run on CUDA";
    }
    return n.inputs.size() > static_cast<size_t>(kMaxEinsumInputs) ? "more than 4 inputs" : "";
  }, [](const ir::Node& n, KernelInit&) { return create_einsum(n); }));
}

}  // namespace kiln::cuda
