// backends/cuda/cuda_training.cpp — Adagrad, Adam and Momentum (ai.onnx.preview.training) on the GPU
// (launcher in cuda_training.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/rnn.h"

namespace kiln::cuda {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

// R and T are scalars read on the host; every other input is a float tensor of one dtype.
std::string check_optimizer(const ir::Node& n) {
  if (n.inputs.size() < 4) return "expects R, T and the tensors to update";
  DataType dt = DataType::kUndefined;
  for (size_t i = 2; i < n.inputs.size(); ++i) {
    if (!n.inputs[i] || !n.inputs[i]->type.is_tensor()) return "every tensor input is required";
    const DataType t = n.inputs[i]->type.dtype;
    if (t == DataType::kUndefined) continue;
    if (!is_float_type(t) && t != DataType::kFloat64) return std::string(dtype_name(t)) + " does not run on CUDA";
    if (dt != DataType::kUndefined && t != dt) return "the updated tensors must share one dtype";
    dt = t;
  }
  return "";
}

double host_scalar(const Tensor* t) {
  switch (t->dtype()) {
    case DataType::kFloat32: return t->data<float>()[0];
    case DataType::kFloat64: return t->data<double>()[0];
    case DataType::kInt64: return static_cast<double>(t->data<int64_t>()[0]);
    case DataType::kInt32: return t->data<int32_t>()[0];
    default: return 0;
  }
}

struct OptimizerPlan {
  OptimizerArgs base;
  int groups = 0, per = 0;
};

Expected<KernelPtr> create_optimizer(const ir::Node& n, int kind) {
  OptimizerArgs base;
  KILN_ASSIGN_OR_RETURN(base.attrs, ops::parse_optimizer(n, kind));
  const int per = 2 + optimizer::states_of(kind);  // X, G, states
  auto reshape = [base, per](ReshapeContext& rc) -> Status {
    const int n_in = static_cast<int>(rc.in.size()) - 2;
    if (n_in <= 0 || n_in % per != 0) return rc.error("expects R, T and " + std::to_string(per) + " tensors per updated input");
    for (int i = 0; i < 2; ++i)
      if (!rc.in[i].value || rc.in[i].value->numel() != 1) return rc.error("R and T must be scalars known on the host");
    auto p = std::make_shared<OptimizerPlan>();
    p->base = base;
    p->base.r = host_scalar(rc.in[0].value);
    p->base.t = host_scalar(rc.in[1].value);
    p->groups = n_in / per;
    p->per = per;
    for (int i = 0; i < p->groups; ++i) {
      const Shape& x = rc.in[2 + i].shape;
      for (int k = 1; k < per; ++k)
        if (rc.in[2 + k * p->groups + i].shape != x) return rc.error("every tensor of an update must have X's shape");
      for (int k = 0; k < per - 1; ++k) {
        const size_t o = static_cast<size_t>(k * p->groups + i);
        if (o < rc.out.size()) rc.out[o] = {rc.in[2 + i].dtype, x};
      }
    }
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<OptimizerPlan>(ctx);
    const int g = p.groups;
    auto out = [&](int o) -> void* { return ctx.has_output(o) ? ctx.output(o).raw() : nullptr; };
    for (int i = 0; i < g; ++i) {
      OptimizerArgs a = p.base;
      const Tensor& x = ctx.input(2 + i);
      a.elem = elem_of(x.dtype());
      a.n = x.numel();
      a.x = x.raw();
      a.g = ctx.input(2 + g + i).raw();
      a.s1 = ctx.input(2 + 2 * g + i).raw();
      a.s2 = p.per == 4 ? ctx.input(2 + 3 * g + i).raw() : nullptr;
      a.xo = out(i);
      a.s1o = out(g + i);
      a.s2o = p.per == 4 ? out(2 * g + i) : nullptr;
      KILN_RETURN_IF_ERROR(launched(ctx, launch_optimizer(a, state_of(ctx).stream)));
    }
    return Status::Ok();
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_training(KernelRegistry& r) {
  const std::pair<const char*, int> ops[] = {{"Adagrad", 0}, {"Adam", 1}, {"Momentum", 2}};
  for (const auto& [op, kind] : ops) {
    KernelDef d = kernel_row(op, 1, check_optimizer, [kind = kind](const ir::Node& n, KernelInit&) {
      return create_optimizer(n, kind);
    }, kTrainingDomain);
    d.host_inputs = 0b11;  // R and T
    d.half_floats = false;
    r.add(d);
  }
}

}  // namespace kiln::cuda
