// backends/cuda/cuda_conv_transpose.cpp — ConvTranspose (1+) on the GPU: any spatial rank up to 6,
// groups, dilations, output_padding/output_shape/auto_pad through ops::transpose_geometry (the CPU
// kernel's geometry); the direct kernel of cuda_conv_transpose.cu.
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/nn.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

std::string check_conv_transpose(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "X and W are required";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    const DataType dt = n.inputs[i]->type.dtype;
    if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64)
      return std::string(dtype_name(dt)) + " does not run on CUDA";
  }
  return "";
}

Expected<KernelPtr> create_conv_transpose(const ir::Node& n) {
  const ops::ConvParams p = ops::parse_conv(n);
  const ops::WindowAttrs w = p.window;
  const int64_t group = p.group;
  auto reshape = [w, group](ReshapeContext& rc) -> Status {
    const Shape &xs = rc.in[0].shape, &ws = rc.in[1].shape;
    if (xs.size() < 3 || ws.size() != xs.size()) return rc.error("X and W must have the same rank >= 3");
    if (xs.size() - 2 > 6) return rc.error("more than 6 spatial dims do not run on CUDA");
    if (rc.in[1].dtype != rc.in[0].dtype) return rc.error("X and W must share a dtype");
    const int64_t C = xs[1];
    if (group < 1 || ws[0] != C || C % group != 0)
      return rc.error("channels do not match: X " + shape_to_string(xs) + ", W " + shape_to_string(ws));
    const int64_t M = ws[1] * group;
    const std::vector<int64_t> in(xs.begin() + 2, xs.end());
    auto g = ops::transpose_geometry(w, in, std::vector<int64_t>(ws.begin() + 2, ws.end()));
    if (!g.ok()) return rc.error(g.status().message());
    if (rc.in.size() > 2 && rc.in[2].present) {
      int64_t nb = 1;
      for (int64_t d : rc.in[2].shape) nb *= d;
      if (nb != M || rc.in[2].dtype != rc.in[0].dtype) return rc.error("B must have M = " + std::to_string(M) + " entries of X's dtype");
    }
    auto a = std::make_shared<ConvTransposeArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->win = window_index(*g, in);
    a->batch = xs[0];
    a->c = C;
    a->m = M;
    a->group = group;
    Shape ys = {xs[0], M};
    ys.insert(ys.end(), g->out.begin(), g->out.end());
    rc.out[0] = {rc.in[0].dtype, ys};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    ConvTransposeArgs a = shape_state<ConvTransposeArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.w = ctx.input(1).raw();
    a.bias = ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_conv_transpose(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_conv_transpose(KernelRegistry& r) {
  KernelDef d = kernel_row("ConvTranspose", 1, check_conv_transpose,
                           [](const ir::Node& n, KernelInit&) { return create_conv_transpose(n); });
  d.name = "cuda.ConvTranspose.direct";
  r.add(d);
}

}  // namespace kiln::cuda
