// backends/cuda/cuda_reduce_topk.cpp — TopK (1+) on the GPU; K is a host input (launcher in
// cuda_reduce_topk.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

struct TopkPlan {
  int64_t outer = 1, n = 1, inner = 1, k = 0;
};

Expected<KernelPtr> create_topk(const ir::Node& nd) {
  const ops::TopKParams tp = ops::parse_topk(nd);
  const int64_t axis_attr = tp.axis;
  const bool largest = tp.largest;
  // A node without an opset (0: made in code) takes K from input 1 here, as the newest opsets do;
  // the shape function and the CPU kernel read the attribute for it.
  const bool k_input = tp.k_input || nd.opset == 0;
  const int64_t k_attr = tp.k;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    int64_t k = k_attr;
    if (k_input) {
      auto kv = rc.in.size() > 1 ? host_ints(rc.in[1].value) : std::nullopt;
      if (!kv || kv->size() != 1) return rc.error("K must be a 1-element int64 tensor known on the host");
      k = (*kv)[0];
    }
    auto p = std::make_shared<TopkPlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) p->outer *= x[d];
      else if (d == axis) p->n = x[d];
      else p->inner *= x[d];
    }
    if (k < 0 || k > p->n) return rc.error("K " + std::to_string(k) + " out of range for an axis of " + std::to_string(p->n));
    p->k = k;
    Shape out = x;
    out[axis] = k;
    rc.out[0] = {rc.in[0].dtype, out};
    if (rc.out.size() > 1) rc.out[1] = {DataType::kInt64, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [largest](KernelContext& ctx) -> Status {
    const auto& p = shape_state<TopkPlan>(ctx);
    const Tensor& x = ctx.input(0);
    // The indices are needed for the selection even when the node drops them: the workspace holds them.
    int64_t* idx = ctx.has_output(1) ? ctx.output(1).data<int64_t>() : static_cast<int64_t*>(ctx.workspace());
    return launched(ctx, launch_topk(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), idx, p.outer, p.n, p.inner, p.k, largest,
                                     state_of(ctx).stream));
  };
  auto reshape_ws = [reshape](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(reshape(rc));
    // Reserved whether or not the node uses its Indices output (the plan knows only at run time).
    rc.workspace_bytes = static_cast<size_t>(shape_numel(rc.out[0].second)) * sizeof(int64_t);
    return Status::Ok();
  };
  return make_staged(reshape_ws, run);
}

}  // namespace

void register_reduce_topk(KernelRegistry& r) {
  KernelDef topk = kernel_row("TopK", 1, [](const ir::Node& n) { return check_numeric0(n, false); },
                              [](const ir::Node& n, KernelInit&) { return create_topk(n); });
  topk.host_inputs = 0b10;
  r.add(topk);
}

}  // namespace kiln::cuda
