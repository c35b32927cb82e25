// backends/cuda/cuda_elementwise.cpp — the table of float32 unary and broadcasting binary kernels.
#include <cfloat>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"

namespace kiln::cuda {
namespace {

struct UnaryRow {
  const char* op;
  int since;
  UnaryOp fn;
};

// Ops whose only parameters are attributes (Clip and Gelu are registered below).
constexpr UnaryRow kUnary[] = {
    {"Relu", 6, UnaryOp::kRelu},       {"Sigmoid", 6, UnaryOp::kSigmoid},     {"Tanh", 6, UnaryOp::kTanh},
    {"Exp", 6, UnaryOp::kExp},         {"Log", 6, UnaryOp::kLog},             {"Sqrt", 6, UnaryOp::kSqrt},
    {"Abs", 6, UnaryOp::kAbs},         {"Neg", 6, UnaryOp::kNeg},             {"Erf", 9, UnaryOp::kErf},
    {"LeakyRelu", 6, UnaryOp::kLeakyRelu}, {"HardSigmoid", 6, UnaryOp::kHardSigmoid},
    {"HardSwish", 14, UnaryOp::kHardSwish},
};

Status run_unary(KernelContext& ctx, UnaryOp fn, float alpha, float beta) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DataType::kFloat32) return ctx.error("CUDA kernel takes float32 only");
  Tensor& y = ctx.output(0, DataType::kFloat32, x.shape());
  return launched(ctx, launch_unary_f32(fn, x.data<float>(), y.data<float>(), x.numel(), alpha, beta,
                                        state_of(ctx).stream));
}

KernelDef unary_def(const UnaryRow& row) {
  KernelDef d;
  d.op = row.op;
  d.since = row.since;
  d.name = std::string("cuda.") + row.op + ".f32";
  d.check = require_f32;
  const UnaryOp fn = row.fn;
  d.create = [fn](const ir::Node& n, KernelInit&) {
    float alpha = 0, beta = 0;
    if (fn == UnaryOp::kLeakyRelu) alpha = n.attr_float("alpha", 0.01f);
    if (fn == UnaryOp::kHardSigmoid) {
      alpha = n.attr_float("alpha", 0.2f);
      beta = n.attr_float("beta", 0.5f);
    }
    return make_kernel([fn, alpha, beta](KernelContext& ctx) { return run_unary(ctx, fn, alpha, beta); });
  };
  return d;
}

KernelDef gelu_def() {
  KernelDef d;
  d.op = "Gelu";
  d.since = 20;
  d.name = "cuda.Gelu.f32";
  d.check = [](const ir::Node& n) -> std::string {
    const std::string a = n.attr_string("approximate", "none");
    if (a != "none" && a != "tanh") return "approximate='" + a + "' is not 'none' or 'tanh'";
    return require_f32(n);
  };
  d.create = [](const ir::Node& n, KernelInit&) {
    const UnaryOp fn = n.attr_string("approximate", "none") == "tanh" ? UnaryOp::kGeluTanh : UnaryOp::kGelu;
    return make_kernel([fn](KernelContext& ctx) { return run_unary(ctx, fn, 0, 0); });
  };
  return d;
}

// Clip: bounds are attributes before opset 11 and constant inputs from 11 on.
KernelDef clip_def() {
  KernelDef d;
  d.op = "Clip";
  d.since = 6;
  d.name = "cuda.Clip.f32";
  d.check = [](const ir::Node& n) -> std::string {
    if (n.opset >= 11) {
      for (int i : {1, 2}) {
        if (!n.has_input(i)) continue;
        if (!constant_float(n, i)) return "min/max must be constant float32 scalars to run on CUDA";
      }
    }
    return require_f32(n);
  };
  d.create = [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    float lo = -FLT_MAX, hi = FLT_MAX;
    if (n.opset >= 11 || n.opset == 0) {
      if (auto v = constant_float(n, 1)) lo = *v;
      if (auto v = constant_float(n, 2)) hi = *v;
      if ((n.has_input(1) && !constant_float(n, 1)) || (n.has_input(2) && !constant_float(n, 2)))
        return unsupported(n.describe() + ": min/max must be constant float32 scalars to run on CUDA");
    } else {
      lo = n.attr_float("min", -FLT_MAX);
      hi = n.attr_float("max", FLT_MAX);
    }
    return make_kernel([lo, hi](KernelContext& ctx) { return run_unary(ctx, UnaryOp::kClip, lo, hi); });
  };
  return d;
}

struct BinaryRow {
  const char* op;
  int since;
  BinaryOp fn;
  bool variadic;
};

constexpr BinaryRow kBinary[] = {
    {"Add", 7, BinaryOp::kAdd, false}, {"Sub", 7, BinaryOp::kSub, false}, {"Mul", 7, BinaryOp::kMul, false},
    {"Div", 7, BinaryOp::kDiv, false}, {"Pow", 7, BinaryOp::kPow, false}, {"Max", 8, BinaryOp::kMax, true},
    {"Min", 8, BinaryOp::kMin, true},
};

// y = in0 op in1 op in2 ... with numpy broadcasting (two inputs unless the op is variadic).
// reshape() computes the output shape and one broadcast index per launch; run() launches.
struct BinaryPlan {
  int64_t numel = 0;
  std::vector<BroadcastIndex> index;  // launch 0: in0 op in1 (or a copy of in0); then y op in_i
};

Status reshape_binary(ReshapeContext& rc) {
  const size_t n = rc.in.size();
  if (n < 1) return rc.error("needs at least one input");
  Shape out = rc.in[0].shape;
  for (size_t i = 0; i < n; ++i) {
    if (!rc.in[i].present) return rc.error("omitted inputs are not supported");
    if (rc.in[i].dtype != DataType::kFloat32) return rc.error("CUDA kernel takes float32 only");
    Shape next;
    if (!broadcast_shape(out, rc.in[i].shape, next))
      return rc.error("shapes " + shape_to_string(out) + " and " + shape_to_string(rc.in[i].shape) + " do not broadcast");
    out = next;
  }
  auto p = std::make_shared<BinaryPlan>();
  p->numel = shape_numel(out);
  BroadcastIndex idx;
  if (!make_broadcast_index(out, rc.in[0].shape, n == 1 ? out : rc.in[1].shape, idx)) return rc.error("rank too large for CUDA");
  p->index.push_back(idx);
  for (size_t i = 2; i < n; ++i) {
    if (!make_broadcast_index(out, out, rc.in[i].shape, idx)) return rc.error("rank too large for CUDA");
    p->index.push_back(idx);
  }
  rc.out[0] = {DataType::kFloat32, out};
  rc.state = std::move(p);
  return Status::Ok();
}

Status run_binary(KernelContext& ctx, BinaryOp fn) {
  const auto& p = *static_cast<const BinaryPlan*>(ctx.shape_state());
  Tensor& y = ctx.output(0);
  cudaStream_t s = state_of(ctx).stream;
  const int n = ctx.num_inputs();
  if (n == 1)
    return launched(ctx, launch_binary_f32(BinaryOp::kFirst, ctx.input(0).data<float>(), nullptr, y.data<float>(),
                                           p.numel, p.index[0], s));
  KILN_RETURN_IF_ERROR(launched(ctx, launch_binary_f32(fn, ctx.input(0).data<float>(), ctx.input(1).data<float>(),
                                                       y.data<float>(), p.numel, p.index[0], s)));
  for (int i = 2; i < n; ++i)  // fold the rest into y, in place (each element reads then writes itself)
    KILN_RETURN_IF_ERROR(launched(ctx, launch_binary_f32(fn, y.data<float>(), ctx.input(i).data<float>(), y.data<float>(),
                                                         p.numel, p.index[i - 1], s)));
  return Status::Ok();
}

KernelDef binary_def(const BinaryRow& row) {
  KernelDef d;
  d.op = row.op;
  d.since = row.since;
  d.name = std::string("cuda.") + row.op + ".f32";
  const bool variadic = row.variadic;
  d.check = [variadic](const ir::Node& n) -> std::string {
    if (!variadic && n.inputs.size() != 2) return "needs exactly two inputs";
    for (const ir::Value* v : n.inputs)
      if (!v) return "omitted inputs are not supported";
    for (const ir::Value* v : n.inputs)
      if (v->type.shape.known && v->type.shape.rank() > kMaxRank) return "rank above 8";
    return require_f32(n);
  };
  const BinaryOp fn = row.fn;
  d.create = [fn](const ir::Node&, KernelInit&) {
    return make_staged(reshape_binary, [fn](KernelContext& ctx) { return run_binary(ctx, fn); });
  };
  return d;
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  for (const UnaryRow& row : kUnary) r.add(unary_def(row));
  r.add(gelu_def());
  r.add(clip_def());
  for (const BinaryRow& row : kBinary) r.add(binary_def(row));
}

}  // namespace kiln::cuda
