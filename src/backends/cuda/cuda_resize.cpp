// backends/cuda/cuda_resize.cpp — Resize (opset 10+) and Upsample (7-9) on the GPU, float types.
// The parameters, geometry and taps are the CPU kernel's (ops/resize.h, ops/resize_math.h); roi,
// scales and sizes are host inputs, read while planning. Antialiasing (any number of taps) stays on
// the CPU.
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/float_types.h"
#include "ops/resize.h"

namespace kiln::cuda {
namespace {

std::string resize_check(const ir::Node& n) {
  const std::string mode = n.attr_string("mode", "nearest");
  if (n.attr_int("antialias", 0) != 0 && mode != "nearest") return "antialias is not supported on CUDA";
  if (n.has_input(0) && n.inputs[0]->type.shape.known && n.inputs[0]->type.shape.rank() > kMaxRank) return "rank above 8";
  if (n.has_input(0) && n.inputs[0]->type.dtype != DataType::kUndefined && !is_float_type(n.inputs[0]->type.dtype))
    return std::string("X is ") + dtype_name(n.inputs[0]->type.dtype) + " (CUDA Resize takes float types)";
  return "";
}

// A host tensor's values as doubles (float32/float64/float16), or false.
bool host_reals(const Tensor* t, std::vector<double>& out) {
  if (!t) return false;
  out.clear();
  const int64_t n = t->numel();
  switch (t->dtype()) {
    case DataType::kFloat32: for (int64_t i = 0; i < n; ++i) out.push_back(t->data<float>()[i]); return true;
    case DataType::kFloat64: for (int64_t i = 0; i < n; ++i) out.push_back(t->data<double>()[i]); return true;
    case DataType::kFloat16:
      for (int64_t i = 0; i < n; ++i) out.push_back(f16_to_f32(t->data<uint16_t>()[i]));
      return true;
    default: return false;
  }
}

struct ResizePlan {
  ResizeIndex index;
  int64_t numel = 0;
};

Expected<KernelPtr> create_resize(const ir::Node& n, KernelInit&) {
  KILN_ASSIGN_OR_RETURN(ops::ResizeParams p, ops::parse_resize(n));
  auto given = [](const ReshapeContext& rc, int i) { return i >= 0 && static_cast<size_t>(i) < rc.in.size() && rc.in[i].present; };
  auto reshape = [p, given](ReshapeContext& rc) -> Status {
    if (!given(rc, 0)) return rc.error("input X is required");
    const Shape& in = rc.in[0].shape;
    if (in.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8 is not supported on CUDA");
    std::vector<double> scales, roi;
    std::vector<int64_t> sizes;
    if (given(rc, p.scales_input) && shape_numel(rc.in[p.scales_input].shape) > 0 &&
        !host_reals(rc.in[p.scales_input].value, scales))
      return rc.error("scales must be float values known on the host");
    if (given(rc, p.sizes_input) && shape_numel(rc.in[p.sizes_input].shape) > 0) {
      auto v = host_ints(rc.in[p.sizes_input].value);
      if (!v) return rc.error("sizes must be int64 values known on the host");
      sizes = *v;
    }
    if (given(rc, p.roi_input) && shape_numel(rc.in[p.roi_input].shape) > 0 && !host_reals(rc.in[p.roi_input].value, roi))
      return rc.error("roi must be float values known on the host");
    ops::ResizeGeometry g;
    if (std::string why = ops::resize_geometry(p, in, scales, sizes, roi, &g); !why.empty()) return rc.error(why);
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
