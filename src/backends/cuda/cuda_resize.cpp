// backends/cuda/cuda_resize.cpp — Resize (opset 10+) and Upsample (7-9) on the GPU, float types.
// The parameters, geometry and taps are the CPU kernel's (ops/resize.h, ops/resize_math.h); roi,
// scales and sizes are host inputs, read while planning. Antialiasing (any number of taps) stays on
// the CPU.
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/resize.h"

namespace kiln::cuda {
namespace {

std::string resize_check(const ir::Node& n) {
  const Expected<ops::ResizeParams> p = ops::parse_resize(n);
  if (!p.ok()) return p.status().message();
  if (p->coef.antialias) return "antialias is not supported on CUDA";
  if (n.has_input(0) && n.inputs[0]->type.shape.known && n.inputs[0]->type.shape.rank() > kMaxRank) return "rank above 8";
  if (n.has_input(0) && n.inputs[0]->type.dtype != DataType::kUndefined && !is_float_type(n.inputs[0]->type.dtype))
    return std::string("X is ") + dtype_name(n.inputs[0]->type.dtype) + " (CUDA Resize takes float types)";
  return "";
}

struct ResizePlan {
  ResizeIndex index;
  int64_t numel = 0;
};

Expected<KernelPtr> create_resize(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ResizeParams p, ops::parse_resize(n));
  auto reshape = [p](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input X is required");
    const Shape& in = rc.in[0].shape;
    if (in.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8 is not supported on CUDA");
    // roi, scales and sizes are host inputs: their values are known while planning.
    std::vector<const Tensor*> operands(rc.in.size(), nullptr);
    for (size_t i = 1; i < rc.in.size(); ++i) {
      if (!rc.in[i].present || shape_numel(rc.in[i].shape) == 0) continue;
      if (!rc.in[i].value) return rc.error("input " + std::to_string(i) + " (roi, scales or sizes) must be known on the host");
      operands[i] = rc.in[i].value;
    }
    ops::ResizeGeometry g;
    if (std::string why = ops::resize_geometry(p, in, operands, &g); !why.empty()) return rc.error(why);
    if (shape_numel(g.out) > 0 && shape_numel(in) == 0) return rc.error("cannot resize an empty input to a non-empty output");
    auto plan = std::make_shared<ResizePlan>();
    ResizeIndex& ix = plan->index;
    ix.rank = static_cast<int>(in.size());
    int64_t stride = 1;
    for (int d = ix.rank - 1; d >= 0; --d) {
      ix.out_dims[d] = g.out[d];
      ix.in_strides[d] = stride;
      stride *= in[d];
      ix.resized[d] = g.resized[d] != 0;
      ix.axes[d] = g.axes[d];
    }
    plan->numel = shape_numel(g.out);
    rc.out[0] = {rc.in[0].dtype, g.out};
    rc.state = std::move(plan);
    return Status::Ok();
  };
  auto run = [p](KernelContext& ctx) -> Status {
    const auto& plan = shape_state<ResizePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_resize(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), plan.numel, plan.index, p.coef,
                                       p.extrapolation, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_resize(KernelRegistry& r) {
  KernelDef resize = kernel_row("Resize", 10, resize_check, create_resize);
  resize.host_inputs = 0b1110;  // roi, scales, sizes (opset 10: scales is input 1)
  r.add(resize);
  KernelDef upsample = kernel_row("Upsample", 7, resize_check, create_resize);
  upsample.until = 9;
  upsample.host_inputs = 0b10;  // scales (opset 9)
  r.add(upsample);
}

}  // namespace kiln::cuda
