// backends/cuda/cuda_index_one_hot.cpp — OneHot (9+) on the GPU; depth is a host input (launcher in
// cuda_index_one_hot.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

struct OneHotPlan {
  int64_t outer = 1, depth = 0, inner = 1;
};

Expected<KernelPtr> create_one_hot(const ir::Node& n) {
  const int64_t axis_attr = ops::parse_one_hot(n).axis;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Tensor* dv = rc.in[1].value;
    if (!dv || dv->numel() != 1) return rc.error("depth must be one value known on the host");
    double depth_d = 0;
    switch (dv->dtype()) {
      case DataType::kInt64: depth_d = static_cast<double>(dv->data<int64_t>()[0]); break;
      case DataType::kInt32: depth_d = dv->data<int32_t>()[0]; break;
      case DataType::kFloat32: depth_d = dv->data<float>()[0]; break;
      case DataType::kFloat64: depth_d = dv->data<double>()[0]; break;
      default: return rc.error("depth must be int64, int32, float or double on CUDA");
    }
    const auto depth = static_cast<int64_t>(depth_d);
    if (depth < 1) return rc.error("depth must be positive");
    int64_t vn = 1;
    for (int64_t d : rc.in[2].shape) vn *= d;
    if (vn != 2) return rc.error("values must have two elements [off, on]");
    const Shape& ind = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, static_cast<int64_t>(ind.size()) + 1)) return rc.error("axis out of range");
    auto p = std::make_shared<OneHotPlan>();
    p->depth = depth;
    for (int64_t d = 0; d < static_cast<int64_t>(ind.size()); ++d) (d < axis ? p->outer : p->inner) *= ind[d];
    Shape out = ind;
    out.insert(out.begin() + axis, depth);
    rc.out[0] = {rc.in[2].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<OneHotPlan>(ctx);
    const Tensor& ind = ctx.input(0);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_one_hot(ind.raw(), elem_of(ind.dtype()), ctx.input(2).raw(), y.raw(), p.outer, p.depth, p.inner,
                                        static_cast<int>(dtype_size(y.dtype())), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_index_one_hot(KernelRegistry& r) {
  KernelDef one_hot = kernel_row("OneHot", 9, [](const ir::Node& n) -> std::string {
    if (std::string why = tensor_inputs(n, 3); !why.empty()) return why;
    const DataType it = n.inputs[0]->type.dtype;
    if (it != DataType::kUndefined && (elem_of(it) < 0 || it == DataType::kBool)) return "indices must be numeric";
    const DataType vt = n.inputs[2]->type.dtype;
    if (vt != DataType::kUndefined && elem_of(vt) < 0) return std::string(dtype_name(vt)) + " values do not run on CUDA";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_one_hot(n); });
  one_hot.host_inputs = 0b10;  // depth
  r.add(one_hot);
}

}  // namespace kiln::cuda
