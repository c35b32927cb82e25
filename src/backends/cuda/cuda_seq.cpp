// backends/cuda/cuda_seq.cpp — RotaryEmbedding (23+), CausalConvWithState (27+) and LinearAttention
// (27+) on the GPU: shapes checked as the CPU kernels check them, at reshape; launchers in cuda_seq.cu.
#include <cmath>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

bool real_type(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }

// Inputs [0, required) present; every float input of x's dtype (bool/int inputs listed in `ints`).
std::string check_same_float(const ir::Node& n, size_t required, uint32_t ints = 0) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !real_type(dt)) return std::string(dtype_name(dt)) + " does not run on CUDA";
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    const DataType t = n.inputs[i]->type.dtype;
    if ((ints >> i) & 1u) {
      if (t != DataType::kUndefined && t != DataType::kInt64) return "position_ids must be int64";
    } else if (t != DataType::kUndefined && dt != DataType::kUndefined && t != dt) {
      return "every float input must have the first input's dtype";
    }
  }
  return "";
}

Expected<KernelPtr> create_rotary(const ir::Node& n) {
  const ops::RotaryEmbeddingParams rp = ops::parse_rotary_embedding(n);
  const int64_t num_heads = rp.num_heads, rotary_dim = rp.rotary_embedding_dim;
  const bool interleaved = rp.interleaved;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() != 3 && x.size() != 4) return rc.error("X must be 3-D or 4-D");
    auto a = std::make_shared<RotaryArgs>();
    a->elem = elem_of(rc.in[0].dtype);
    a->packed = x.size() == 3;
    a->interleaved = interleaved;
    a->b = x[0];
    a->s = a->packed ? x[1] : x[2];
    if (a->packed) {
      if (num_heads <= 0) return rc.error("num_heads is required for 3-D input");
      if (x[2] % num_heads) return rc.error("hidden size is not divisible by num_heads");
      a->h = num_heads;
      a->dh = x[2] / num_heads;
    } else {
      a->h = x[1];
      a->dh = x[3];
    }
    a->rd = rotary_dim > 0 ? rotary_dim : a->dh;
    if (a->rd > a->dh || a->rd % 2) return rc.error("rotary_embedding_dim must be even and at most the head size");
    const Shape &cs = rc.in[1].shape, &ss = rc.in[2].shape;
    if (cs != ss || cs.size() < 2 || cs.back() != a->rd / 2)
      return rc.error("cos_cache/sin_cache must agree and end in rotary_embedding_dim/2");
    const bool has_pos = rc.in.size() > 3 && rc.in[3].present;
    if (has_pos) {
      if (cs.size() != 2) return rc.error("with position_ids, the caches must be (max_position, rd/2)");
      int64_t np = 1;
      for (int64_t d : rc.in[3].shape) np *= d;
      if (np != a->b * a->s) return rc.error("position_ids must be (batch, sequence)");
      a->cache_rows = cs[0];
    } else if (cs.size() == 3 && cs[0] == a->b && cs[1] == a->s) {
      a->per_batch_rows = true;
      a->cache_rows = a->b * a->s;
    } else if (cs.size() == 2 && cs[0] == a->s) {
      a->cache_rows = a->s;
    } else {
      return rc.error("without position_ids, the caches must be (batch, sequence, rd/2)");
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(a);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    RotaryArgs a = shape_state<RotaryArgs>(ctx);
    a.x = ctx.input(0).raw();
    a.cos = ctx.input(1).raw();
    a.sin = ctx.input(2).raw();
    a.positions = ctx.has_input(3) ? ctx.input(3).data<int64_t>() : nullptr;
    a.y = ctx.output(0).raw();
    return launched(ctx, launch_rotary(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

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

void register_seq(KernelRegistry& r) {
  r.add(kernel_row("RotaryEmbedding", 23, [](const ir::Node& n) { return check_same_float(n, 3, 0b1000); },
                   [](const ir::Node& n, KernelInit&) { return create_rotary(n); }));
  r.add(kernel_row("CausalConvWithState", 27, [](const ir::Node& n) { return check_same_float(n, 2); },
                   [](const ir::Node& n, KernelInit&) { return create_causal_conv(n); }));
  r.add(kernel_row("LinearAttention", 27, [](const ir::Node& n) { return check_same_float(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_linear_attention(n); }));
}

}  // namespace kiln::cuda
