// backends/cuda/cuda_nn_norm.cpp — InstanceNormalization, GroupNormalization, LRN and LpNormalization on
// the GPU (launchers in cuda_nn_norm.cu; BatchNormalization: cuda_nn.cpp; LayerNormalization and
// RMSNormalization: cuda_reduce.cpp).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_ml.h"
#include "ops/params_nn.h"

namespace kiln::cuda {
namespace {

bool real_type(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }

std::string check_real_inputs(const ir::Node& n, size_t required) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  const DataType dt = n.inputs[0]->type.dtype;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) continue;
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    const DataType t = n.inputs[i]->type.dtype;
    if (t != DataType::kUndefined && !real_type(t)) return std::string(dtype_name(t)) + " does not run on CUDA";
    if (t != DataType::kUndefined && dt != DataType::kUndefined && t != dt) return "inputs must share one dtype";
  }
  return "";
}

struct GroupPlan {
  int64_t n = 0, c = 0, s = 0, groups = 1;
  bool per_channel = true;
};

Expected<KernelPtr> create_group_norm(const ir::Node& n, bool instance) {
  double eps = 0;
  int64_t groups_attr = 0;  // InstanceNormalization: unused, a group per channel
  if (instance) {
    eps = ops::parse_instance_norm(n).epsilon;
  } else {
    const ops::GroupNormParams p = ops::parse_group_norm(n);
    eps = p.epsilon;
    groups_attr = p.num_groups;
  }
  auto reshape = [instance, groups_attr](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("X must have rank >= 2");
    auto p = std::make_shared<GroupPlan>();
    p->n = x[0];
    p->c = x[1];
    p->s = 1;
    for (size_t i = 2; i < x.size(); ++i) p->s *= x[i];
    p->groups = instance ? x[1] : groups_attr;
    if (p->groups < 1 || p->c % p->groups != 0) return rc.error("channels must be divisible by num_groups");
    int64_t ns = 1, nb = 1;
    for (int64_t d : rc.in[1].shape) ns *= d;
    for (int64_t d : rc.in[2].shape) nb *= d;
    if (ns != nb || (ns != p->c && ns != p->groups)) return rc.error("scale and bias must have C or num_groups entries");
    p->per_channel = ns == p->c;
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [eps](KernelContext& ctx) -> Status {
    const auto& p = shape_state<GroupPlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_group_norm(elem_of(x.dtype()), x.raw(), ctx.input(1).raw(), ctx.input(2).raw(), p.per_channel,
                                           ctx.output(0).raw(), p.n, p.c, p.s, p.groups, eps, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_lrn(const ir::Node& n) {
  const ops::LrnParams p = ops::parse_lrn(n);
  const int64_t size = p.size;
  const double alpha = p.alpha, beta = p.beta, bias = p.bias;
  if (size < 1) return invalid_model(n.describe() + ": size must be positive");
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() < 2) return rc.error("X must have rank >= 2");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [=](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    const int64_t N = x.dim(0), C = x.dim(1), S = N * C ? x.numel() / (N * C) : 0;
    return launched(ctx, launch_lrn(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), N, C, S, size, alpha, beta, bias,
                                    state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

struct LinePlan {
  int64_t outer = 1, len = 1, inner = 1;
};

Expected<KernelPtr> create_lp_norm(const ir::Node& n) {
  const ops::LpNormalizationParams lpp = ops::parse_lp_normalization(n);
  const int64_t axis_attr = lpp.axis, p = lpp.p;
  if (p != 1 && p != 2) return invalid_model(n.describe() + ": p must be 1 or 2");
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Shape& x = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (x.empty()) return rc.error("input must have rank >= 1");
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    auto lp = std::make_shared<LinePlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) lp->outer *= x[d];
      else if (d == axis) lp->len = x[d];
      else lp->inner *= x[d];
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(lp);
    return Status::Ok();
  };
  auto run = [p](KernelContext& ctx) -> Status {
    const auto& lp = shape_state<LinePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_lp_norm(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), lp.outer, lp.len, lp.inner,
                                        static_cast<int>(p), state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_nn_norm(KernelRegistry& r) {
  r.add(kernel_row("InstanceNormalization", 1, [](const ir::Node& n) { return check_real_inputs(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_group_norm(n, true); }));
  r.add(kernel_row("GroupNormalization", 18, [](const ir::Node& n) { return check_real_inputs(n, 3); },
                   [](const ir::Node& n, KernelInit&) { return create_group_norm(n, false); }));
  r.add(kernel_row("LRN", 1, [](const ir::Node& n) { return check_real_inputs(n, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_lrn(n); }));
  r.add(kernel_row("LpNormalization", 1, [](const ir::Node& n) -> std::string {
    if (std::string why = tensor_inputs(n, 1); !why.empty()) return why;
    const DataType dt = n.inputs[0]->type.dtype;
    if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64) return std::string(dtype_name(dt)) + " input";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_lp_norm(n); }));
}

}  // namespace kiln::cuda
