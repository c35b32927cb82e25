// backends/cuda/cuda_shape_depth_space.cpp — DepthToSpace and SpaceToDepth (1+) on the GPU, as one
// strided copy.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

// DepthToSpace (DCR/CRD) and SpaceToDepth as one strided copy over a 6-D view of X.
Expected<KernelPtr> create_depth_space(const ir::Node& n, bool to_space) {
  KILN_ASSIGN_OR_RETURN(const ops::DepthToSpaceParams dp, ops::parse_depth_to_space(n));
  const int64_t b = dp.blocksize;
  const bool crd = dp.crd;
  auto reshape = [b, crd, to_space](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 4) return rc.error("X must be 4-D");
    const int64_t N = x[0], C = x[1], H = x[2], W = x[3];
    int64_t view[6], perm[6];
    Shape out;
    if (to_space) {
      if (C % (b * b)) return rc.error("channels must be divisible by blocksize²");
      const int64_t c = C / (b * b);
      if (crd) {
        const int64_t v[6] = {N, c, b, b, H, W}, p[6] = {0, 1, 4, 2, 5, 3};
        std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      } else {
        const int64_t v[6] = {N, b, b, c, H, W}, p[6] = {0, 3, 4, 1, 5, 2};
        std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      }
      out = {N, c, H * b, W * b};
    } else {
      if (H % b || W % b) return rc.error("height and width must be divisible by blocksize");
      const int64_t v[6] = {N, C, H / b, b, W / b, b}, p[6] = {0, 3, 5, 1, 2, 4};
      std::copy(v, v + 6, view), std::copy(p, p + 6, perm);
      out = {N, C * b * b, H / b, W / b};
    }
    int64_t st[6];
    for (int d = 5, s = 1; d >= 0; --d) {
      st[d] = s;
      s *= static_cast<int>(view[d]);
    }
    auto ix = std::make_shared<StridedIndex>();
    ix->rank = 6;
    for (int d = 0; d < 6; ++d) {
      ix->out_dims[d] = view[perm[d]];
      ix->in_strides[d] = st[perm[d]];
    }
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(ix);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_strided_copy(x.raw(), ctx.output(0).raw(), x.numel(), static_cast<int>(dtype_size(x.dtype())),
                                             shape_state<StridedIndex>(ctx), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_shape_depth_space(KernelRegistry& r) {
  auto any_4d = [](const ir::Node& n) -> std::string {
    if (!n.has_input(0) || !n.inputs[0]->type.is_tensor()) return "X is required";
    const DataType dt = n.inputs[0]->type.dtype;
    return dt != DataType::kUndefined && elem_of(dt) < 0 ? std::string(dtype_name(dt)) + " does not run on CUDA" : "";
  };
  r.add(kernel_row("DepthToSpace", 1, any_4d, [](const ir::Node& n, KernelInit&) { return create_depth_space(n, true); }));
  r.add(kernel_row("SpaceToDepth", 1, any_4d, [](const ir::Node& n, KernelInit&) { return create_depth_space(n, false); }));
}

}  // namespace kiln::cuda
