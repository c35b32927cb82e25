// backends/cuda/cuda_fused.cpp — kiln's fused ops on CUDA. Attention: one kernel (cuda_attention.cu).
// FusedConv, FusedGemm and FusedMatMul (float32,
// float16, bfloat16): the CUDA Conv/Gemm/MatMul kernel writes the output, then one pass applies the
// bias, FusedConv's residual (input 3) and the activation in place (launch_bias_act), unless the
// library took them into its own epilogue (cuBLASLt's bias with a ReLU or tanh GELU, cuDNN's fused
// convolution); FusedMatMul with output_dtype writes float32 from half operands. FusedConv's bias is left out of the inner
// convolution and added in that pass, so a fused convolution costs the convolution and one pass over
// its output instead of the convolution, a bias pass and an activation pass.
#include <algorithm>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_attention_cudnn.h"
#include "backends/cuda/cuda_util.h"
#include "backends/inner_context.h"
#include "backends/staged_kernel.h"
#include "util/log.h"
#include "ops/nn.h"
#include "ops/params_nn.h"
#include "ir/epilogue.h"

namespace kiln::cuda {

UnaryOp unary_of(ActKind k) {
  switch (k) {
    case ActKind::kRelu: return UnaryOp::kRelu;
    case ActKind::kLeakyRelu: return UnaryOp::kLeakyRelu;
    case ActKind::kClip: return UnaryOp::kClip;
    case ActKind::kSigmoid: return UnaryOp::kSigmoid;
    case ActKind::kHardSigmoid: return UnaryOp::kHardSigmoid;
    case ActKind::kHardSwish: return UnaryOp::kHardSwish;
    case ActKind::kSilu: return UnaryOp::kSilu;
    case ActKind::kTanh: return UnaryOp::kTanh;
    case ActKind::kGelu: return UnaryOp::kGelu;
    case ActKind::kGeluTanh: return UnaryOp::kGeluTanh;
    case ActKind::kNone: break;
  }
  return UnaryOp::kRelu;  // not reached: kNone applies no activation
}

namespace {


// Where the fused node's input 2 goes: into the inner op (Gemm's C), or into the epilogue along a dim
// of the output (Conv: channels, dim 1; MatMul: the last dim).
enum class Bias { kInner, kChannels, kLastDim };

// FusedMatMul's output_columns (passes::products_write_float): what reshape_matmul's half GEMM and
// widening take — half A and B, B a matrix (or batch) with a known multiple of 8 columns (the
// workspace rows' pitch), no bias or activation. Refused here, the pass keeps the float32 Slice.
std::string check_output_columns(const ir::Node& n, const Activation& act) {
  if (!n.has_input(0) || !n.has_input(1)) return "output_columns: A and B are required";
  const DataType dt = n.inputs[0]->type.dtype;
  if ((dt != DataType::kFloat16 && dt != DataType::kBFloat16) || n.inputs[1]->type.dtype != dt)
    return "output_columns: float16 or bfloat16 operands only";
  const ir::SymShape& b = n.inputs[1]->type.shape;
  if (!b.known || b.rank() < 2 || !b.dims.back().is_static() || b.dims.back().value % 8 != 0)
    return "output_columns: B's column count must be known and a multiple of 8";
  if (n.has_input(2) || act.kind != ActKind::kNone) return "output_columns: no bias or activation";
  return "";
}

std::string check_fused(const ir::Node& n) {
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return why;
  if (n.op_type == "FusedMatMul" && n.attr("output_columns")) {
    if (std::string r = check_output_columns(n, act); !r.empty()) return r;
  }
  return n.op_type == "FusedConv" ? conv_check(n) : require_float(n);
}

Expected<KernelPtr> make_fused(const ir::Node& n, const std::string& op, int opset, Bias bias) {
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return invalid_model(n.describe() + ": " + why);
  // FusedMatMul: the bias (and a ReLU or tanh GELU) go to cuBLASLt's epilogue where it has an
  // algorithm for it; FusedGemm's ReLU or tanh GELU join its bias (C) there likewise. FusedConv with a
  // bias and a ReLU or no activation: bias, residual and ReLU go into cuDNN's fused convolution where
  // the plan takes it (cuda_conv.cpp).
  const bool lt_bias = op == "MatMul" && bias == Bias::kLastDim && n.has_input(2);
  const bool dnn_fused = op == "Conv" && n.has_input(2) && (act.kind == ActKind::kRelu || act.kind == ActKind::kNone);
  const bool lt_act = act.kind == ActKind::kRelu || act.kind == ActKind::kGeluTanh;
  const bool gemm_epi = op == "Gemm" && n.has_input(2) && lt_act;
  auto inner = inner_node(n, op, opset, dnn_fused ? 4 : bias == Bias::kInner || lt_bias ? 3 : 2);
  if (auto od = inner->attrs.find("output_dtype"); od != inner->attrs.end()) {
    if (op == "MatMul") inner->attrs[kOutputDtypeAttr] = od->second;
    inner->attrs.erase("output_dtype");
  }
  if (auto oc = inner->attrs.find("output_columns"); oc != inner->attrs.end()) {
    if (op == "MatMul") inner->attrs[kOutputColumnsAttr] = oc->second;
    inner->attrs.erase("output_columns");
  }
  if (lt_bias || dnn_fused || gemm_epi) {
    ir::Attribute& e = inner->attrs[kBiasEpilogueAttr];
    e.kind = ir::Attribute::Kind::kInt;
    e.i = act.kind == ActKind::kRelu ? 2 : act.kind == ActKind::kGeluTanh && !dnn_fused ? 3 : 1;
  }
  KILN_ASSIGN_OR_RETURN(Backend * gpu, cuda_backend());
  const KernelDef* def = gpu->kernels().find(*inner, &why);
  if (!def) return unsupported(n.describe() + ": no CUDA " + op + " kernel (" + why + ")");
  KernelInit init;
  KILN_ASSIGN_OR_RETURN(KernelPtr k, def->create(*inner, init));
  std::shared_ptr<Kernel> kernel(std::move(k));
  if (!kernel->has_reshape()) return internal_error(n.describe() + ": the CUDA " + op + " kernel is not planned per shape");
  const bool epi_bias = bias != Bias::kInner;
  auto reshape = [inner, kernel, epi_bias, bias](ReshapeContext& rc) -> Status {
    KILN_RETURN_IF_ERROR(reshape_inner(*inner, *kernel, rc));
    const auto& [dtype, shape] = rc.out[0];
    if (epi_bias && rc.in.size() > 2 && rc.in[2].present) {
      const int64_t want = bias == Bias::kChannels ? (shape.size() > 1 ? shape[1] : 0) : (shape.empty() ? 1 : shape.back());
      if (rc.in[2].dtype != dtype || shape_numel(rc.in[2].shape) != want)
        return rc.error("bias must have " + std::to_string(want) + " values of the output's dtype");
    }
    if (rc.in.size() > 3 && rc.in[3].present && (rc.in[3].dtype != dtype || rc.in[3].shape != shape))
      return rc.error("the residual must have the output's dtype and shape " + shape_to_string(shape));
    return Status::Ok();
  };
  auto run = [inner, kernel, act, epi_bias, bias, lt_bias, gemm_epi, dnn_fused](KernelContext& ctx) -> Status {
    InnerContext ic(ctx, *inner, static_cast<int>(inner->inputs.size()));
    ic.use_plan(ctx.shape_state());
    KILN_RETURN_IF_ERROR(kernel->run(ic));
    if (!ic.out0()) return ctx.error("the inner kernel wrote no output");
    Tensor& y = *ic.out0();
    if (dnn_fused && conv_epilogue_applied(ctx.shape_state())) return Status::Ok();
    const int applied = lt_bias || gemm_epi ? matmul_epilogue_applied(ctx.shape_state()) : 0;
    if (applied == 2 || (applied == 1 && act.kind == ActKind::kNone)) return Status::Ok();
    const void* b = epi_bias && ctx.has_input(2) && !applied ? ctx.input(2).raw() : nullptr;
    const bool residual = ctx.num_inputs() > 3 && ctx.has_input(3);
    if (!b && !residual && act.kind == ActKind::kNone) return Status::Ok();  // nothing left for a pass over Y
    int64_t channels = 1, per = 1;
    if (b && bias == Bias::kChannels) {
      channels = y.dim(1);
      per = y.numel() / std::max<int64_t>(1, y.dim(0) * channels);
    } else if (b) {
      channels = y.rank() ? y.dim(-1) : 1;
    }
    const void* z = residual ? ctx.input(3).raw() : nullptr;
    return launched(ctx, launch_bias_act(elem_of(y.dtype()), y.raw(), b, z, y.numel(), std::max<int64_t>(channels, 1),
                                         std::max<int64_t>(per, 1), act.kind != ActKind::kNone, unary_of(act.kind), act.a,
                                         act.b, state_of(ctx).stream));
  };
  return make_staged(reshape, run, [inner, kernel](const ReshapeContext& rc) { return inner_tactics(*inner, *kernel, rc); });
}

// ---- Attention(Q, K, V[, mask[, bool_mask]]): one kernel (launch_attention), no scores tensor.

// Tactic names by AttentionVariant (index 0, auto, is the empty tactic).
// Indexed by AttentionVariant.
const std::string kAttentionTactics[] = {"", "fa2", "fa4", "fa8", "wmma", "fp2", "fp4", "fp8"};
static_assert(std::size(kAttentionTactics) == kAttentionVariants);
// cuDNN's fused attention (cuda_attention_cudnn.h), offered beside kiln's kernels where it may apply.
const char kCudnnAttentionTactic[] = "cudnn";

// A shape's plan: kiln's kernel arguments, and cuDNN's plan when the tactic is "cudnn".
struct AttentionPlan {
  AttentionArgs args;
  std::shared_ptr<const CudnnAttention> cudnn;
};

std::string check_attention(const ir::Node& n) {
  const ops::FusedAttentionParams p = ops::parse_fused_attention(n);
  if (std::string why = ops::fused_attention_attrs_error(p); !why.empty()) return why;
  const int64_t heads = p.num_heads;
  if (n.has_input(4) && n.inputs[4]->type.dtype != DataType::kBool) return "the bool mask must be bool";
  for (int i = 0; i < 4; ++i) {
    if (i < 3 && !n.has_input(i)) return "Q, K and V are required";
    if (!n.has_input(i)) continue;
    const DataType dt = n.inputs[i]->type.dtype;
    if (dt != DataType::kUndefined && !is_float_type(dt)) return "float Q, K, V and mask only";
  }
  for (int i : {0, 2}) {
    const auto& sh = n.inputs[i]->type.shape;
    // (a packed QKV's last dim holds Q's, K's and V's heads: a third of it is one part's; V has
    // kv_num_heads heads where given; a heads-first tensor's last dim is the head size)
    const int64_t hs = i == 2 && p.kv_num_heads > 0 ? p.kv_num_heads : heads;
    const int64_t size = !sh.known || sh.rank() == 0 || !sh.dims.back().is_static() ? 0
                         : p.heads_first                           ? sh.dims.back().value
                                                                   : sh.dims.back().value / (p.packed_qkv ? 3 : 1) / hs;
    if (size > kMaxAttentionHead) return "head sizes above " + std::to_string(kMaxAttentionHead) + " do not run on CUDA";
  }
  return "";
}

Expected<KernelPtr> create_attention(const ir::Node& n) {
  const ops::FusedAttentionParams p = ops::parse_fused_attention(n);
  AttentionArgs base;
  base.heads = p.num_heads;
  base.scale = p.scale;
  base.fill = p.mask_fill;
  base.fill_where_true = p.mask_fill_where_true;
  base.zero_nan_rows = p.zero_nan_rows;
  base.mask_period = p.mask_batch_period;
  auto reshape = [base, p](ReshapeContext& rc) -> Status {
    for (int i = 0; i < 3; ++i)
      if (static_cast<size_t>(i) >= rc.in.size() || !rc.in[i].present) return rc.error("Q, K and V are required");
    const Shape& q = rc.in[0].shape;
    const DataType dt = rc.in[0].dtype;
    if (!is_float_type(dt) || rc.in[1].dtype != dt || rc.in[2].dtype != dt) return rc.error("Q, K, V must have one float dtype");
    ops::AttentionGeometry g;
    if (std::string why = ops::attention_geometry(p, q, rc.in[1].shape, rc.in[2].shape, &g); !why.empty()) return rc.error(why);
    const int64_t B = g.B, S = g.S, T = g.T, H = g.H;
    auto plan = std::make_shared<AttentionPlan>();
    plan->args = base;
    AttentionArgs* a = &plan->args;
    a->elem = elem_of(dt);
    a->b = B;
    a->s = S;
    a->t = T;
    a->heads = H;
    a->kv_group = H / g.Hkv;
    if (g.D > kMaxAttentionHead || g.Dv > kMaxAttentionHead)
      return rc.error("head sizes above " + std::to_string(kMaxAttentionHead) + " do not run on CUDA");
    a->d = static_cast<int>(g.D);
    a->dv = static_cast<int>(g.Dv);
    a->packed_qkv = p.packed_qkv;
    const ops::AttentionStrides& st = g.st;
    a->q_row = st.q_row, a->k_row = st.k_row, a->v_row = st.v_row, a->y_row = st.y_row;
    a->q_batch = st.q_batch, a->k_batch = st.k_batch, a->v_batch = st.v_batch, a->y_batch = st.y_batch;
    a->q_head = st.q_head, a->k_head = st.k_head, a->v_head = st.v_head;
    const int64_t full[4] = {B, H, S, T};
    if (rc.in.size() > 3 && rc.in[3].present) {
      a->has_mask = true;
      if (rc.in[3].dtype != dt) return rc.error("the mask must have Q's dtype");
      if (!ops::attention_mask_strides(rc.in[3].shape, full, a->ms, a->mask_period))
        return rc.error("mask " + shape_to_string(rc.in[3].shape) + " does not broadcast to [B, H, S, T]" +
                        (a->mask_period ? " with batch period " + std::to_string(a->mask_period) : std::string()));
    } else if (a->mask_period) {
      return rc.error("mask_batch_period is given without an additive mask");
    }
    if (rc.in.size() > 4 && rc.in[4].present) {
      a->has_cond = true;
      if (rc.in[4].dtype != DataType::kBool) return rc.error("the bool mask must be bool");
      if (!ops::attention_mask_strides(rc.in[4].shape, full, a->cs))
        return rc.error("bool mask " + shape_to_string(rc.in[4].shape) + " does not broadcast to [B, H, S, T]");
    }
    if (rc.tactic == kCudnnAttentionTactic) {
      // Chosen at the profile's opt shapes; where cuDNN cannot run these (another shape of the
      // profile, a kiln or cuDNN that lacks it), kiln's own choice runs them, as for a tactic not offered.
      std::string why = "no device state to plan with";
      if (CudaState* st = reshape_state(rc)) plan->cudnn = plan_cudnn_attention(*st, *a, &why);
      if (plan->cudnn)
        rc.workspace_bytes = cudnn_attention_workspace(*plan->cudnn);
      else
        log(LogLevel::kVerbose, rc.node.describe() + ": cuDNN's attention does not run " + shape_to_string(q) + " (" + why +
                                    "): kiln's own kernel runs it");
    } else if (!rc.tactic.empty()) {
      const auto v = std::find(std::begin(kAttentionTactics), std::end(kAttentionTactics), rc.tactic);
      if (v == std::end(kAttentionTactics) || v == std::begin(kAttentionTactics) ||
          !attention_variant_applies(*a, static_cast<int>(v - std::begin(kAttentionTactics))))
        return rc.error("tactic '" + rc.tactic + "' does not apply to these shapes");
      a->variant = static_cast<int>(v - std::begin(kAttentionTactics));
    }
    rc.out[0] = {dt, p.heads_first      ? Shape{B, S, H, a->dv}
                     : p.sequence_first ? Shape{S, B, H * a->dv}
                                        : Shape{B, S, H * a->dv}};
    rc.state = std::move(plan);
    return Status::Ok();
  };
  // Tactics: the kernel variants that apply, timed where a register-resident kernel does (the default first).
  auto tactics = [reshape](const ReshapeContext& rc) -> std::vector<std::string> {
    ReshapeContext probe = rc;
    probe.tactic.clear();
    probe.out.assign(1, {});
    if (!reshape(probe).ok() || !probe.state) return {};
    const auto& a = static_cast<const AttentionPlan*>(probe.state.get())->args;
    if (!attention_variants_apply(a)) return {};
    std::vector<std::string> names;
    for (int v : {kAttentionFp4, kAttentionFp2, kAttentionFp8, kAttentionFa4, kAttentionFa2, kAttentionFa8, kAttentionWmma})
      if (attention_variant_applies(a, v)) names.push_back(kAttentionTactics[v]);
    if (cudnn_attention_refusal(a).empty()) names.push_back(kCudnnAttentionTactic);
    return names;
  };
  auto run = [](KernelContext& ctx) -> Status {
    const AttentionPlan& plan = shape_state<AttentionPlan>(ctx);
    AttentionArgs a = plan.args;
    a.q = ctx.input(0).raw();
    a.k = ctx.input(1).raw();
    a.v = ctx.input(2).raw();
    if (a.packed_qkv) {
      const size_t part = static_cast<size_t>(a.heads) * a.d * dtype_size(ctx.input(0).dtype());
      a.k = static_cast<const char*>(a.q) + part;
      a.v = static_cast<const char*>(a.q) + 2 * part;
    }
    a.mask = ctx.has_input(3) ? ctx.input(3).raw() : nullptr;
    a.cond = ctx.num_inputs() > 4 && ctx.has_input(4) ? ctx.input(4).data<bool>() : nullptr;
    a.y = ctx.output(0).raw();
    if (plan.cudnn) {
      const std::string err = run_cudnn_attention(*plan.cudnn, state_of(ctx).dnn, a, ctx.workspace());
      return err.empty() ? Status::Ok() : runtime_error(ctx.node().describe() + ": " + err);
    }
    return launched(ctx, launch_attention(a, state_of(ctx).stream));
  };
  return make_staged(reshape, run, tactics);
}

// kiln.ChannelAffine: act(X · scale[c] + shift[c]) in one pass (launch_channel_affine).
std::string check_channel_affine(const ir::Node& n) {
  const ops::ChannelAffineParams p = ops::parse_channel_affine(n);
  if (!p.error.empty()) return p.error;
  if (n.inputs.size() != 3) return "needs X, scale and shift";
  for (int i = 1; i < 3; ++i)
    if (n.has_input(i) && n.inputs[i]->type.dtype != DataType::kFloat32) return "scale and shift must be float32";
  return require_float(n);
}

Expected<KernelPtr> create_channel_affine(const ir::Node& n) {
  const ops::ChannelAffineParams p = ops::parse_channel_affine(n);
  const bool last = p.channels_last;
  const Activation act = p.act;
  auto reshape = [last](ReshapeContext& rc) -> Status {
    if (rc.in.size() < 3 || !rc.in[0].present || !rc.in[1].present || !rc.in[2].present)
      return rc.error("X, scale and shift are required");
    const std::string why = ops::channel_affine_shape_error(rc.in[0].shape, rc.in[1].shape, rc.in[2].shape, last);
    if (!why.empty()) return rc.error(why);
    if (rc.in[1].dtype != DataType::kFloat32 || rc.in[2].dtype != DataType::kFloat32)
      return rc.error("scale and shift must be float32");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [last, act](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t n = x.numel();
    if (n == 0) return Status::Ok();
    const int64_t c = last ? x.dim(-1) : x.dim(1);
    const int64_t inner = last ? 1 : n / (x.dim(0) * c);
    const bool has_act = act.kind != ActKind::kNone;
    return launched(ctx, launch_channel_affine(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), ctx.input(1).data<float>(),
                                               ctx.input(2).data<float>(), n, c, inner, has_act,
                                               has_act ? unary_of(act.kind) : UnaryOp::kRelu, act.a, act.b,
                                               state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(kernel_row("ChannelAffine", 1, check_channel_affine,
                   [](const ir::Node& n, KernelInit&) { return create_channel_affine(n); }, "kiln"));
  r.add(kernel_row("Attention", 1, check_attention, [](const ir::Node& n, KernelInit&) { return create_attention(n); },
                   "kiln"));
  r.add(kernel_row("FusedConv", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) {
                     // channels_last: the bias runs along the last dim
                     const bool nhwc = ops::parse_conv(n).channels_last;
                     return make_fused(n, "Conv", 11, nhwc ? Bias::kLastDim : Bias::kChannels);
                   }, "kiln"));
  r.add(kernel_row("FusedGemm", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) { return make_fused(n, "Gemm", 13, Bias::kInner); }, "kiln"));
  r.add(kernel_row("FusedMatMul", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) { return make_fused(n, "MatMul", 13, Bias::kLastDim); }, "kiln"));
}

}  // namespace kiln::cuda
