// backends/cuda/cuda_fused.cpp — kiln's FusedConv, FusedGemm and FusedMatMul on CUDA (float32,
// float16, bfloat16): the CUDA Conv/Gemm/MatMul kernel writes the output, then one pass applies the
// bias and the activation in place (launch_bias_act). FusedConv's bias is left out of the inner
// convolution and added in that pass, so a fused convolution costs the convolution and one pass over
// its output instead of the convolution, a bias pass and an activation pass.
#include <memory>

#include "backends/cuda/cuda_util.h"
#include "backends/inner_context.h"
#include "backends/staged_kernel.h"
#include "ir/epilogue.h"

namespace kiln::cuda {
namespace {

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

// Where the fused node's input 2 goes: into the inner op (Gemm's C), or into the epilogue along a dim
// of the output (Conv: channels, dim 1; MatMul: the last dim).
enum class Bias { kInner, kChannels, kLastDim };

std::string check_fused(const ir::Node& n) {
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return why;
  if (n.op_type == "FusedConv" && n.has_input(1) && n.inputs[1]->type.shape.known) {
    const int rank = n.inputs[1]->type.shape.rank();
    if (rank != 3 && rank != 4) return "only 1-D and 2-D convolutions run on CUDA";
  }
  return require_float(n);
}

Expected<KernelPtr> make_fused(const ir::Node& n, const std::string& op, int opset, Bias bias) {
  Activation act;
  std::string why;
  if (!read_activation(n, &act, &why)) return invalid_model(n.describe() + ": " + why);
  auto inner = inner_node(n, op, opset, bias == Bias::kInner ? 3 : 2);
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
    return Status::Ok();
  };
  auto run = [inner, kernel, act, epi_bias, bias](KernelContext& ctx) -> Status {
    InnerContext ic(ctx, *inner, static_cast<int>(inner->inputs.size()));
    ic.use_plan(ctx.shape_state());
    KILN_RETURN_IF_ERROR(kernel->run(ic));
    if (!ic.out0()) return ctx.error("the inner kernel wrote no output");
    Tensor& y = *ic.out0();
    const void* b = epi_bias && ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
    int64_t channels = 1, per = 1;
    if (b && bias == Bias::kChannels) {
      channels = y.dim(1);
      per = y.numel() / std::max<int64_t>(1, y.dim(0) * channels);
    } else if (b) {
      channels = y.rank() ? y.dim(-1) : 1;
    }
    return launched(ctx, launch_bias_act(elem_of(y.dtype()), y.raw(), b, y.numel(), std::max<int64_t>(channels, 1),
                                         std::max<int64_t>(per, 1), act.kind != ActKind::kNone, unary_of(act.kind), act.a,
                                         act.b, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_fused(KernelRegistry& r) {
  r.add(kernel_row("FusedConv", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) { return make_fused(n, "Conv", 11, Bias::kChannels); }, "kiln"));
  r.add(kernel_row("FusedGemm", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) { return make_fused(n, "Gemm", 13, Bias::kInner); }, "kiln"));
  r.add(kernel_row("FusedMatMul", 1, check_fused,
                   [](const ir::Node& n, KernelInit&) { return make_fused(n, "MatMul", 13, Bias::kLastDim); }, "kiln"));
}

}  // namespace kiln::cuda
