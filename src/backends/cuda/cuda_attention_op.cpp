// backends/cuda/cuda_attention_op.cpp — the ONNX Attention op (23+) on the GPU: shapes checked and the
// geometry fixed at reshape, as the CPU kernel (backends/cpu/attention.cpp) checks them; a run only
// launches (cuda_attention_op.cu).
#include <cmath>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

bool attention_float(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }

std::string check_attention(const ir::Node& n) {
  for (int i = 0; i < 3; ++i)
    if (!n.has_input(i)) return "Q, K and V are required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !attention_float(dt)) return std::string(dtype_name(dt)) + " does not run on CUDA";
  for (int i : {1, 2, 4, 5})
    if (n.has_input(i) && n.inputs[i]->type.dtype != DataType::kUndefined && n.inputs[i]->type.dtype != dt)
      return "Q, K, V and the past must share one dtype";
  if (n.has_input(3)) {
    const DataType mt = n.inputs[3]->type.dtype;
    if (mt != DataType::kUndefined && mt != DataType::kBool && mt != dt) return "attn_mask must be bool or Q's dtype";
  }
  if (n.has_input(6) && n.inputs[6]->type.dtype != DataType::kUndefined && n.inputs[6]->type.dtype != DataType::kInt64)
    return "nonpad_kv_seqlen must be int64";
  // parse_attention rejects only a qk_matmul_output_mode outside 0..3.
  if (!ops::parse_attention(n).ok()) return "qk_matmul_output_mode must be 0..3";
  return "";
}

struct Layout {
  int64_t heads = 0, seq = 0, dim = 0;
  bool packed = false;
};

Expected<Layout> layout_of(const ReshapeContext& rc, const Shape& s, int64_t heads_attr, const char* what) {
  if (s.size() == 4) return Layout{s[1], s[2], s[3], false};
  if (s.size() != 3) return rc.error("Q, K and V must all be 3-D or all 4-D");
  if (heads_attr <= 0) return rc.error(std::string(what) + " is 3-D: q_num_heads and kv_num_heads are required");
  if (s[2] % heads_attr != 0)
    return rc.error(std::string(what) + " hidden size " + std::to_string(s[2]) + " is not divisible by " +
                    std::to_string(heads_attr) + " heads");
  return Layout{heads_attr, s[1], s[2] / heads_attr, true};
}

struct AttentionPlan {
  OnnxAttentionArgs args;
};

// A run of Attention or FlexAttention (which has no mask, past or extra outputs: absent inputs and
// outputs are null pointers).
Status run_attention(KernelContext& ctx) {
  OnnxAttentionArgs a = shape_state<AttentionPlan>(ctx).args;
  a.q = ctx.input(0).raw();
  a.k = ctx.input(1).raw();
  a.v = ctx.input(2).raw();
  a.mask = ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
  a.past_k = ctx.has_input(4) ? ctx.input(4).raw() : nullptr;
  a.past_v = ctx.has_input(5) ? ctx.input(5).raw() : nullptr;
  a.nonpad = ctx.has_input(6) ? ctx.input(6).data<int64_t>() : nullptr;
  a.y = ctx.output(0).raw();
  a.present_k = ctx.has_output(1) ? ctx.output(1).raw() : nullptr;
  a.present_v = ctx.has_output(2) ? ctx.output(2).raw() : nullptr;
  a.qk_out = ctx.has_output(3) ? ctx.output(3).raw() : nullptr;
  a.workspace = ctx.workspace();
  return launched(ctx, launch_onnx_attention(a, state_of(ctx).stream));
}

Expected<KernelPtr> create_attention(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::AttentionParams ap, ops::parse_attention(n));
  const int64_t q_heads = ap.q_num_heads, kv_heads = ap.kv_num_heads;
  const bool has_scale = ap.has_scale;
  const double scale_attr = ap.scale;
  const bool causal = ap.is_causal;
  const double softcap = ap.softcap;
  const int mode = static_cast<int>(ap.qk_matmul_output_mode);
  auto reshape = [=](ReshapeContext& rc) -> Status {
    auto present = [&](int i) { return static_cast<int>(rc.in.size()) > i && rc.in[i].present; };
    const Shape &qs = rc.in[0].shape, &ks = rc.in[1].shape, &vs = rc.in[2].shape;
    if (qs.size() != ks.size() || qs.size() != vs.size()) return rc.error("Q, K and V must all be 3-D or all 4-D");
    KILN_ASSIGN_OR_RETURN(Layout ql, layout_of(rc, qs, q_heads, "Q"));
    KILN_ASSIGN_OR_RETURN(Layout kl, layout_of(rc, ks, kv_heads, "K"));
    KILN_ASSIGN_OR_RETURN(Layout vl, layout_of(rc, vs, kv_heads, "V"));
    const int64_t B = qs[0];
    if (ks[0] != B || vs[0] != B) return rc.error("Q, K and V must have the same batch size");
    if (kl.dim != ql.dim) return rc.error("Q and K head sizes differ");
    if (vl.heads != kl.heads || vl.seq != kl.seq) return rc.error("K and V disagree in heads or sequence length");
    if (kl.heads == 0 || ql.heads % kl.heads != 0) return rc.error("q_num_heads must be a multiple of kv_num_heads");
    if (present(4) != present(5)) return rc.error("past_key and past_value must be given together");
    int64_t P = 0;
    if (present(4)) {
      const Shape &pk = rc.in[4].shape, &pv = rc.in[5].shape;
      P = pk.size() == 4 ? pk[2] : -1;
      if (pk != Shape{B, kl.heads, P, kl.dim} || pv != Shape{B, kl.heads, P, vl.dim})
        return rc.error("past_key/past_value must be (batch, kv_num_heads, past_len, head_size)");
    }
    const int64_t T = P + kl.seq;
    auto p = std::make_shared<AttentionPlan>();
    OnnxAttentionArgs& a = p->args;
    a.elem = elem_of(rc.in[0].dtype);
    a.b = B;
    a.hq = ql.heads;
    a.hkv = kl.heads;
    a.sq = ql.seq;
    a.skv = kl.seq;
    a.past = P;
    a.d = ql.dim;
    a.dv = vl.dim;
    a.q_packed = ql.packed;
    a.kv_packed = kl.packed;
    a.scale = has_scale ? scale_attr : 1.0 / std::sqrt(static_cast<double>(ql.dim));
    a.softcap = softcap;
    a.causal = causal;
    a.mode = mode;
    if (present(3)) {
      const Shape& m = rc.in[3].shape;
      if (m.empty() || m.size() > 4) return rc.error("attn_mask must have rank 1 to 4");
      a.mask_bool = rc.in[3].dtype == DataType::kBool;
      a.mask_len = m.back();
      const int64_t target[4] = {B, ql.heads, ql.seq, T};
      int64_t stride = 1;
      for (int i = 3, k = static_cast<int>(m.size()) - 1; k >= 0; --i, --k) {
        const int64_t want = i == 3 ? a.mask_len : target[i];
        if (m[k] != 1 && m[k] != want) return rc.error("attn_mask shape " + shape_to_string(m) + " does not broadcast to the scores");
        a.mask_strides[i] = m[k] == 1 ? 0 : stride;
        stride *= m[k];
      }
      if (a.mask_len > T) return rc.error("attn_mask's last dim is longer than the total sequence length");
    }
    if (present(6)) {
      const Shape& np = rc.in[6].shape;
      int64_t count = 1;
      for (int64_t d : np) count *= d;
      if (count != B) return rc.error("nonpad_kv_seqlen must have batch_size elements");
    }
    rc.out[0] = {rc.in[0].dtype, ql.packed ? Shape{B, ql.seq, ql.heads * vl.dim} : Shape{B, ql.heads, ql.seq, vl.dim}};
    if (rc.out.size() > 1) rc.out[1] = {rc.in[1].dtype, Shape{B, kl.heads, T, kl.dim}};
    if (rc.out.size() > 2) rc.out[2] = {rc.in[2].dtype, Shape{B, kl.heads, T, vl.dim}};
    if (rc.out.size() > 3) rc.out[3] = {rc.in[0].dtype, Shape{B, ql.heads, ql.seq, T}};
    rc.workspace_bytes = onnx_attention_workspace(a);
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, run_attention);
}

// FlexAttention (ai.onnx.preview) without score_mod/prob_mod subgraphs is plain scaled dot-product
// attention over 4-D Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev]: the Attention kernels with no
// mask. A softmax precision other than the one the input's type computes in stays on the CPU.
std::string check_flex(const ir::Node& n) {
  if (n.attr("score_mod") || n.attr("prob_mod")) return "score_mod/prob_mod subgraphs run on the CPU";
  for (int i = 0; i < 3; ++i)
    if (!n.has_input(i) || !n.inputs[i]->type.is_tensor()) return "Q, K and V are required";
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !attention_float(dt)) return std::string(dtype_name(dt)) + " does not run on CUDA";
  for (int i = 1; i < 3; ++i)
    if (n.inputs[i]->type.dtype != DataType::kUndefined && n.inputs[i]->type.dtype != dt) return "Q, K and V must share one dtype";
  // parse_flex_attention rejects only a softmax_precision that is not a float type, never the computed one.
  const Expected<ops::FlexAttentionParams> p = ops::parse_flex_attention(n);
  if (!p.ok()) return "this softmax_precision runs on the CPU";
  if (p->has_softmax_precision) {
    const DataType computes = dt == DataType::kFloat64 ? DataType::kFloat64 : DataType::kFloat32;
    if (p->softmax_precision != computes) return "this softmax_precision runs on the CPU";
  }
  return "";
}

Expected<KernelPtr> create_flex(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::FlexAttentionParams fp, ops::parse_flex_attention(n));
  const bool has_scale = fp.has_scale;
  const double scale_attr = fp.scale;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    const Shape &q = rc.in[0].shape, &k = rc.in[1].shape, &v = rc.in[2].shape;
    if (q.size() != 4 || k.size() != 4 || v.size() != 4) return rc.error("Q, K and V must be 4-D");
    if (k[0] != q[0] || v[0] != q[0] || k[3] != q[3] || v[1] != k[1] || v[2] != k[2])
      return rc.error("Q, K and V shapes disagree");
    if (k[1] == 0 || q[1] % k[1] != 0) return rc.error("query heads must be a multiple of key/value heads");
    auto p = std::make_shared<AttentionPlan>();
    OnnxAttentionArgs& a = p->args;
    a.elem = elem_of(rc.in[0].dtype);
    a.b = q[0];
    a.hq = q[1];
    a.hkv = k[1];
    a.sq = q[2];
    a.skv = k[2];
    a.d = q[3];
    a.dv = v[3];
    a.scale = has_scale ? scale_attr : 1.0 / std::sqrt(static_cast<double>(q[3]));
    rc.out[0] = {rc.in[0].dtype, Shape{q[0], q[1], q[2], v[3]}};
    rc.workspace_bytes = onnx_attention_workspace(a);
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, run_attention);
}

}  // namespace

void register_attention_op(KernelRegistry& r) {
  r.add(kernel_row("Attention", 23, check_attention, [](const ir::Node& n, KernelInit&) { return create_attention(n); }));
  r.add(kernel_row("FlexAttention", 1, check_flex, [](const ir::Node& n, KernelInit&) { return create_flex(n); },
                   "ai.onnx.preview"));
}

}  // namespace kiln::cuda
