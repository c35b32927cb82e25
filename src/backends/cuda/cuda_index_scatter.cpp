// backends/cuda/cuda_index_scatter.cpp — TensorScatter (24+) on the GPU (launcher in
// cuda_index_scatter.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

struct ScatterPlan {
  int64_t prefix = 1, per_batch = 1, max_len = 0, len = 0, inner = 1;
};

Expected<KernelPtr> create_tensor_scatter(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::TensorScatterParams params, ops::parse_tensor_scatter(n));
  const int64_t axis_attr = params.axis;
  const bool circular = params.circular;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Shape &past = rc.in[0].shape, &upd = rc.in[1].shape;
    const int64_t rank = static_cast<int64_t>(past.size());
    int64_t axis = axis_attr;
    if (axis < -rank || axis >= rank) return rc.error("axis out of range");
    if (axis < 0) axis += rank;
    if (axis == 0) return rc.error("axis must not be the batch axis");
    if (rc.in[1].dtype != rc.in[0].dtype || static_cast<int64_t>(upd.size()) != rank)
      return rc.error("update must match past_cache in type and rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d == axis ? upd[d] > past[d] : upd[d] != past[d]) return rc.error("update does not fit past_cache");
    auto p = std::make_shared<ScatterPlan>();
    p->max_len = past[axis];
    p->len = upd[axis];
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) p->prefix *= past[d];
      if (d > axis) p->inner *= past[d];
    }
    p->per_batch = past[0] ? p->prefix / past[0] : 0;
    if (rc.in.size() > 2 && rc.in[2].present) {
      int64_t nw = 1;
      for (int64_t d : rc.in[2].shape) nw *= d;
      if (nw != past[0]) return rc.error("write_indices must have batch_size elements");
    }
    rc.out[0] = {rc.in[0].dtype, past};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [circular](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ScatterPlan>(ctx);
    Tensor& y = ctx.output(0);
    KILN_RETURN_IF_ERROR(copy_device(ctx, ctx.input(0), y));
    const int64_t* w = ctx.has_input(2) ? ctx.input(2).data<int64_t>() : nullptr;
    return launched(ctx, launch_tensor_scatter(y.raw(), ctx.input(1).raw(), w, p.prefix, p.per_batch, p.max_len, p.len, p.inner,
                                               static_cast<int>(dtype_size(y.dtype())), circular, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_index_scatter(KernelRegistry& r) {
  r.add(kernel_row("TensorScatter", 24, [](const ir::Node& n) -> std::string {
    if (!n.has_input(0) || !n.has_input(1)) return "past_cache and update are required";
    const DataType dt = n.inputs[0]->type.dtype;
    if (dt != DataType::kUndefined && elem_of(dt) < 0) return std::string(dtype_name(dt)) + " does not run on CUDA";
    if (n.has_input(2) && n.inputs[2]->type.dtype != DataType::kUndefined && n.inputs[2]->type.dtype != DataType::kInt64)
      return "write_indices must be int64";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_tensor_scatter(n); }));
}

}  // namespace kiln::cuda
