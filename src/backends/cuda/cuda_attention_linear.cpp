// backends/cuda/cuda_attention_linear.cpp — LinearAttention (27+) on the GPU: shapes checked as the CPU
// kernel (backends/cpu/attention.cpp) checks them, at reshape (launcher in cuda_attention_linear.cu).
#include <cmath>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

Expected<KernelPtr> create_linear_attention(const ir::Node& n) {
  using Rule = ops::LinearAttentionParams::UpdateRule;
  KILN_ASSIGN_OR_RETURN(const ops::LinearAttentionParams lp, ops::parse_linear_attention(n));
  const int64_t q_heads = lp.q_num_heads, kv_heads = lp.kv_num_heads;
  const float scale_attr = lp.scale;
  const int rule = lp.update_rule == Rule::kLinear  ? 0
                   : lp.update_rule == Rule::kGated ? 1
                   : lp.update_rule == Rule::kDelta ? 2
                                                    : 3;  // kGatedDelta
  auto reshape = [=](ReshapeContext& rc) -> Status {
    auto present = [&](size_t i) { return rc.in.size() > i && rc.in[i].present; };
    const bool gated = rule == 1 || rule == 3, delta = rule == 2 || rule == 3;
    const Shape &q = rc.in[0].shape, &k = rc.in[1].shape, &v = rc.in[2].shape;
    if (q.size() != 3 || k.size() != 3 || v.size() != 3) return rc.error("query, key and value must be 3-D (B, T, H*D)");
    if (q_heads <= 0 || kv_heads <= 0 || q_heads % kv_heads != 0)
      return rc.error("q_num_heads must be a positive multiple of kv_num_heads");
    auto a = std::make_shared<LinearAttentionArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->rule = rule;
    a->b = q[0];
    a->t = q[1];
    a->hq = q_heads;
    a->hk = kv_heads;
    if (q[2] % q_heads || k[2] % kv_heads || v[2] % kv_heads) return rc.error("hidden sizes are not divisible by the heads");
    a->dk = q[2] / q_heads;
    a->dv = v[2] / kv_heads;
    if (k != Shape{a->b, a->t, kv_heads * a->dk} || v[0] != a->b || v[1] != a->t)
      return rc.error("key/value shapes do not match query");
    if (gated != present(4)) return rc.error(gated ? "this update_rule needs decay" : "this update_rule takes no decay");
    if (delta != present(5)) return rc.error(delta ? "this update_rule needs beta" : "this update_rule takes no beta");
    if (gated) {
      const Shape& g = rc.in[4].shape;
      a->decay_w = g.size() == 3 ? g[2] : -1;
      if (g.size() != 3 || g[0] != a->b || g[1] != a->t || (a->decay_w != a->hk && a->decay_w != a->hk * a->dk))
        return rc.error("decay must be (B, T, kv_num_heads) or (B, T, kv_num_heads*d_k)");
    }
    if (delta) {
      const Shape& bt = rc.in[5].shape;
      a->beta_w = bt.size() == 3 ? bt[2] : -1;
      if (bt.size() != 3 || bt[0] != a->b || bt[1] != a->t || (a->beta_w != a->hk && a->beta_w != 1))
        return rc.error("beta must be (B, T, kv_num_heads) or (B, T, 1)");
    }
    if (present(3) && rc.in[3].shape != Shape{a->b, a->hk, a->dk, a->dv})
      return rc.error("past_state must be (B, kv_num_heads, d_k, d_v)");
    a->scale = scale_attr != 0 ? scale_attr : 1.0f / std::sqrt(static_cast<float>(a->dk));
    rc.out[0] = {rc.in[0].dtype, Shape{a->b, a->t, a->hq * a->dv}};
    if (rc.out.size() > 1) rc.out[1] = {present(3) ? rc.in[3].dtype : rc.in[0].dtype, Shape{a->b, a->hk, a->dk, a->dv}};
    rc.workspace_bytes = static_cast<size_t>(a->b * a->hk * a->dk * a->dv) * sizeof(float);
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    LinearAttentionArgs a = shape_state<LinearAttentionArgs>(ctx);
    a.q = ctx.input(0).raw();
    a.k = ctx.input(1).raw();
    a.v = ctx.input(2).raw();
    a.past = ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
    a.decay = ctx.has_input(4) ? ctx.input(4).raw() : nullptr;
    a.beta = ctx.has_input(5) ? ctx.input(5).raw() : nullptr;
    a.y = ctx.output(0).raw();
    a.present = ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
    a.workspace = static_cast<float*>(ctx.workspace());
    return launched(ctx, launch_linear_attention(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_attention_linear(KernelRegistry& r) {
  r.add(kernel_row("LinearAttention", 27, [](const ir::Node& n) { return check_same_float(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_linear_attention(n); }));
}

}  // namespace kiln::cuda
