// backends/cuda/cuda_grid.cpp — GridSample (16+, N-D from 20; up to 4 spatial dims) and AffineGrid
// (20+; its size operand is a host input) on the GPU.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

std::string check_real(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "two inputs are required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64)
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  return "";
}

Expected<KernelPtr> create_grid_sample(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::GridSampleParams p, ops::parse_grid_sample(n));
  grid::Rule rule;
  rule.mode = p.mode;
  rule.pad = p.padding;
  rule.align = p.align_corners;
  auto reshape = [rule](ReshapeContext& rc) -> Status {
    const Shape &x = rc.in[0].shape, &g = rc.in[1].shape;
    const int r = static_cast<int>(x.size()) - 2;
    if (r < 1) return rc.error("X must be (N, C, D1, ..., Dr)");
    if (r > 4) return rc.error("more than 4 spatial dims do not run on CUDA");
    if (static_cast<int>(g.size()) != r + 2 || g[0] != x[0] || g.back() != r)
      return rc.error("grid must be (N, D1_out, ..., Dr_out, " + std::to_string(r) + ")");
    if (rc.in[1].dtype != rc.in[0].dtype) return rc.error("grid must have X's dtype on CUDA");
    auto a = std::make_shared<GridSampleArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->r = r;
    a->n = x[0];
    a->c = x[1];
    a->rule = rule;
    Shape ys{x[0], x[1]};
    int64_t out_sp = 1, in_sp = 1;
    for (int i = 0; i < r; ++i) {
      a->in[i] = x[2 + i];
      a->out[i] = g[1 + i];
      ys.push_back(g[1 + i]);
      out_sp *= g[1 + i];
      in_sp *= x[2 + i];
    }
    if (in_sp == 0 && out_sp * x[0] * x[1] > 0) return rc.error("X has an empty spatial dimension");
    rc.out[0] = {rc.in[0].dtype, ys};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    GridSampleArgs a = shape_state<GridSampleArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.grid = ctx.input(1).raw();
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_grid_sample(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

struct AffinePlan {
  int64_t n = 0;
  int r = 0;
  int64_t sizes[3] = {};
};

Expected<KernelPtr> create_affine_grid(const ir::Node& n) {
  const bool align = ops::parse_affine_grid(n).align_corners;
  auto reshape = [](ReshapeContext& rc) -> Status {
    auto sz = host_ints(rc.in[1].value);
    if (!sz || (sz->size() != 4 && sz->size() != 5)) return rc.error("size must be (N, C, H, W) or (N, C, D, H, W) on the host");
    const int r = static_cast<int>(sz->size()) - 2;
    for (int64_t v : *sz)
      if (v < 0) return rc.error("size must not be negative");
    const int64_t N = (*sz)[0];
    if (rc.in[0].shape != Shape{N, r, r + 1})
      return rc.error("theta must be (N, " + std::to_string(r) + ", " + std::to_string(r + 1) + ")");
    auto p = std::make_shared<AffinePlan>();
    p->n = N;
    p->r = r;
    Shape ys{N};
    for (int i = 0; i < r; ++i) {
      p->sizes[i] = (*sz)[2 + i];
      ys.push_back((*sz)[2 + i]);
    }
    ys.push_back(r);
    rc.out[0] = {rc.in[0].dtype, ys};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [align](KernelContext& ctx) -> Status {
    const auto& p = shape_state<AffinePlan>(ctx);
    const Tensor& theta = ctx.input(0);
    return launched(ctx, launch_affine_grid(elem_of(theta.dtype()), theta.raw(), ctx.output(0).raw(), p.n, p.r, p.sizes, align,
                                            state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_grid(KernelRegistry& r) {
  r.add(kernel_row("GridSample", 16, check_real, [](const ir::Node& n, KernelInit&) { return create_grid_sample(n); }));
  KernelDef affine = kernel_row("AffineGrid", 20, check_real, [](const ir::Node& n, KernelInit&) { return create_affine_grid(n); });
  affine.host_inputs = 0b10;
  r.add(affine);
}

}  // namespace kiln::cuda
