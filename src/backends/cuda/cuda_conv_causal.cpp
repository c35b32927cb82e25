// backends/cuda/cuda_conv_causal.cpp — CausalConvWithState (27+) on the GPU: shapes checked as the CPU
// kernel checks them, at reshape (launcher in cuda_conv_causal.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_causal_conv(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::CausalConvWithStateParams cp, ops::parse_causal_conv_with_state(n));
  const bool silu = cp.silu;
  auto reshape = [silu](ReshapeContext& rc) -> Status {
    const Shape &x = rc.in[0].shape, &w = rc.in[1].shape;
    if (x.size() != 3) return rc.error("input must be (batch, channels, length)");
    if (w.size() != 3 || w[0] != x[1] || w[1] != 1 || w[2] < 1) return rc.error("weight must be (channels, 1, k)");
    auto a = std::make_shared<CausalConvArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->b = x[0];
    a->c = x[1];
    a->l = x[2];
    a->k = w[2];
    a->silu = silu;
    if (rc.in.size() > 2 && rc.in[2].present) {
      int64_t nb = 1;
      for (int64_t d : rc.in[2].shape) nb *= d;
      if (nb != a->c) return rc.error("bias must be (channels)");
    }
    if (rc.in.size() > 3 && rc.in[3].present && rc.in[3].shape != Shape{a->b, a->c, a->k - 1})
      return rc.error("past_state must be (batch, channels, k-1)");
    rc.out[0] = {rc.in[0].dtype, x};
    if (rc.out.size() > 1) rc.out[1] = {rc.in[0].dtype, Shape{a->b, a->c, a->k - 1}};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    CausalConvArgs a = shape_state<CausalConvArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.w = ctx.input(1).raw();
    a.bias = ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
    a.past = ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
    a.y = ctx.output(0).raw();
    a.present = ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
    return launched(ctx, launch_causal_conv(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_conv_causal(KernelRegistry& r) {
  r.add(kernel_row("CausalConvWithState", 27, [](const ir::Node& n) { return check_same_float(n, 2); },
                   [](const ir::Node& n, KernelInit&) { return create_causal_conv(n); }));
}

}  // namespace kiln::cuda
