// backends/cuda/cuda_train.cpp — Adagrad, Adam and Momentum (ai.onnx.preview.training),
// DynamicQuantizeLinear (11+) and TensorScatter (24+) on the GPU (launchers in cuda_train.cu).
#include <cuda_runtime_api.h>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"
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

Expected<KernelPtr> create_dynamic_quantize() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    rc.out[0] = {DataType::kUInt8, rc.in[0].shape};
    if (rc.out.size() > 1) rc.out[1] = {DataType::kFloat32, Shape{}};
    if (rc.out.size() > 2) rc.out[2] = {DataType::kUInt8, Shape{}};
    rc.workspace_bytes = 16;  // the scale and zero point, whether or not the node outputs them
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    auto* ws = static_cast<char*>(ctx.workspace());
    auto* scale = reinterpret_cast<float*>(ws);
    auto* zp = reinterpret_cast<uint8_t*>(ws + 8);
    cudaStream_t s = state_of(ctx).stream;
    KILN_RETURN_IF_ERROR(launched(ctx, launch_dynamic_quantize(x.data<float>(), ctx.output(0).data<uint8_t>(), scale, zp, x.numel(), s)));
    if (ctx.has_output(1))
      KILN_RETURN_IF_ERROR(launched(ctx, cudaMemcpyAsync(ctx.output(1).raw(), scale, 4, cudaMemcpyDeviceToDevice, s)));
    if (ctx.has_output(2))
      KILN_RETURN_IF_ERROR(launched(ctx, cudaMemcpyAsync(ctx.output(2).raw(), zp, 1, cudaMemcpyDeviceToDevice, s)));
    return Status::Ok();
  };
  return make_staged(reshape, run);
}

struct ScatterPlan {
  int64_t prefix = 1, per_batch = 1, max_len = 0, len = 0, inner = 1;
};

Expected<KernelPtr> create_tensor_scatter(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::TensorScatterParams params, ops::parse_tensor_scatter(n));
  const int64_t axis_attr = params.axis;
  const bool circular = params.circular;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Shape &past = rc.in[0].shape, &upd = rc.in[1].shape;
    const int64_t rank = static_cast<int64_t>(past.size());
    int64_t axis = axis_attr;
    if (axis < -rank || axis >= rank) return rc.error("axis out of range");
    if (axis < 0) axis += rank;
    if (axis == 0) return rc.error("axis must not be the batch axis");
    if (rc.in[1].dtype != rc.in[0].dtype || static_cast<int64_t>(upd.size()) != rank)
      return rc.error("update must match past_cache in type and rank");
    for (int64_t d = 0; d < rank; ++d)
      if (d == axis ? upd[d] > past[d] : upd[d] != past[d]) return rc.error("update does not fit past_cache");
    auto p = std::make_shared<ScatterPlan>();
    p->max_len = past[axis];
    p->len = upd[axis];
    for (int64_t d = 0; d < rank; ++d) {
      if (d < axis) p->prefix *= past[d];
      if (d > axis) p->inner *= past[d];
    }
    p->per_batch = past[0] ? p->prefix / past[0] : 0;
    if (rc.in.size() > 2 && rc.in[2].present) {
      int64_t nw = 1;
      for (int64_t d : rc.in[2].shape) nw *= d;
      if (nw != past[0]) return rc.error("write_indices must have batch_size elements");
    }
    rc.out[0] = {rc.in[0].dtype, past};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [circular](KernelContext& ctx) -> Status {
    const auto& p = shape_state<ScatterPlan>(ctx);
    Tensor& y = ctx.output(0);
    KILN_RETURN_IF_ERROR(copy_device(ctx, ctx.input(0), y));
    const int64_t* w = ctx.has_input(2) ? ctx.input(2).data<int64_t>() : nullptr;
    return launched(ctx, launch_tensor_scatter(y.raw(), ctx.input(1).raw(), w, p.prefix, p.per_batch, p.max_len, p.len, p.inner,
                                               static_cast<int>(dtype_size(y.dtype())), circular, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_train(KernelRegistry& r) {
  const std::pair<const char*, int> ops[] = {{"Adagrad", 0}, {"Adam", 1}, {"Momentum", 2}};
  for (const auto& [op, kind] : ops) {
    KernelDef d = kernel_row(op, 1, check_optimizer, [kind = kind](const ir::Node& n, KernelInit&) {
      return create_optimizer(n, kind);
    }, kTrainingDomain);
    d.host_inputs = 0b11;  // R and T
    d.half_floats = false;
    r.add(d);
  }
  KernelDef dq = kernel_row("DynamicQuantizeLinear", 11, [](const ir::Node& n) {
    return require_input_types(n, 0, {DataType::kFloat32});
  }, [](const ir::Node&, KernelInit&) { return create_dynamic_quantize(); });
  dq.half_floats = false;
  r.add(dq);
  r.add(kernel_row("TensorScatter", 24, [](const ir::Node& n) -> std::string {
    if (!n.has_input(0) || !n.has_input(1)) return "past_cache and update are required";
    const DataType dt = n.inputs[0]->type.dtype;
    if (dt != DataType::kUndefined && elem_of(dt) < 0) return std::string(dtype_name(dt)) + " does not run on CUDA";
    if (n.has_input(2) && n.inputs[2]->type.dtype != DataType::kUndefined && n.inputs[2]->type.dtype != DataType::kInt64)
      return "write_indices must be int64";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_tensor_scatter(n); }));
}

}  // namespace kiln::cuda
