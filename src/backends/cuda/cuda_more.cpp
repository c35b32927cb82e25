// backends/cuda/cuda_more.cpp — EyeLike (9+), OneHot (9+), LpNormalization (1+) and BitCast (26+) on
// the GPU (launchers in cuda_more.cu).
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/float_types.h"
#include "ops/params_misc.h"
#include "ops/params_ml.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

std::string tensor_inputs(const ir::Node& n, size_t required) {
  for (size_t i = 0; i < required; ++i)
    if (!n.has_input(static_cast<int>(i))) return "input " + std::to_string(i) + " is required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  return "";
}

// The bits of 1 in dtype t, or false for types EyeLike does not make on the GPU.
bool one_bits(DataType t, uint64_t* bits) {
  *bits = 0;
  auto put = [&](auto v) { std::memcpy(bits, &v, sizeof v); return true; };
  switch (t) {
    case DataType::kFloat32: return put(1.0f);
    case DataType::kFloat64: return put(1.0);
    case DataType::kFloat16: return put(f32_to_f16(1.0f));
    case DataType::kBFloat16: return put(f32_to_bf16(1.0f));
    case DataType::kInt8: case DataType::kUInt8: case DataType::kBool: return put(uint8_t{1});
    case DataType::kInt16: case DataType::kUInt16: return put(uint16_t{1});
    case DataType::kInt32: case DataType::kUInt32: return put(uint32_t{1});
    case DataType::kInt64: case DataType::kUInt64: return put(uint64_t{1});
    default: return false;
  }
}

Expected<KernelPtr> create_eye_like(const ir::Node& n) {
  const ops::EyeLikeParams ep = ops::parse_eye_like(n);
  const auto dtype_attr = static_cast<DataType>(ep.dtype);
  const int64_t k = ep.k;
  auto reshape = [dtype_attr](ReshapeContext& rc) -> Status {
    if (rc.in[0].shape.size() != 2) return rc.error("input must be 2-D");
    const DataType dt = dtype_attr != DataType::kUndefined ? dtype_attr : rc.in[0].dtype;
    uint64_t bits;
    if (!one_bits(dt, &bits)) return rc.error(std::string("EyeLike does not make ") + dtype_name(dt) + " on CUDA");
    rc.out[0] = {dt, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [k](KernelContext& ctx) -> Status {
    Tensor& y = ctx.output(0);
    uint64_t bits = 0;
    one_bits(y.dtype(), &bits);
    return launched(ctx, launch_eye(y.raw(), y.dim(0), y.dim(1), k, static_cast<int>(dtype_size(y.dtype())), bits,
                                    state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

struct OneHotPlan {
  int64_t outer = 1, depth = 0, inner = 1;
};

Expected<KernelPtr> create_one_hot(const ir::Node& n) {
  const int64_t axis_attr = ops::parse_one_hot(n).axis;
  auto reshape = [axis_attr](ReshapeContext& rc) -> Status {
    const Tensor* dv = rc.in[1].value;
    if (!dv || dv->numel() != 1) return rc.error("depth must be one value known on the host");
    double depth_d = 0;
    switch (dv->dtype()) {
      case DataType::kInt64: depth_d = static_cast<double>(dv->data<int64_t>()[0]); break;
      case DataType::kInt32: depth_d = dv->data<int32_t>()[0]; break;
      case DataType::kFloat32: depth_d = dv->data<float>()[0]; break;
      case DataType::kFloat64: depth_d = dv->data<double>()[0]; break;
      default: return rc.error("depth must be int64, int32, float or double on CUDA");
    }
    const auto depth = static_cast<int64_t>(depth_d);
    if (depth < 1) return rc.error("depth must be positive");
    int64_t vn = 1;
    for (int64_t d : rc.in[2].shape) vn *= d;
    if (vn != 2) return rc.error("values must have two elements [off, on]");
    const Shape& ind = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, static_cast<int64_t>(ind.size()) + 1)) return rc.error("axis out of range");
    auto p = std::make_shared<OneHotPlan>();
    p->depth = depth;
    for (int64_t d = 0; d < static_cast<int64_t>(ind.size()); ++d) (d < axis ? p->outer : p->inner) *= ind[d];
    Shape out = ind;
    out.insert(out.begin() + axis, depth);
    rc.out[0] = {rc.in[2].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<OneHotPlan>(ctx);
    const Tensor& ind = ctx.input(0);
    Tensor& y = ctx.output(0);
    return launched(ctx, launch_one_hot(ind.raw(), elem_of(ind.dtype()), ctx.input(2).raw(), y.raw(), p.outer, p.depth, p.inner,
                                        static_cast<int>(dtype_size(y.dtype())), state_of(ctx).stream));
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

bool four_bit(DataType t) { return t == DataType::kInt4 || t == DataType::kUInt4; }

Expected<KernelPtr> create_bitcast(const ir::Node& n) {
  const DataType to = ops::parse_bit_cast(n).to;
  auto reshape = [to](ReshapeContext& rc) -> Status {
    const DataType from = rc.in[0].dtype;
    if (from == DataType::kString || to == DataType::kString) return rc.error("BitCast does not take strings");
    if (four_bit(from) != four_bit(to) || dtype_size(from) != dtype_size(to))
      return rc.error(std::string("BitCast needs types of the same bit width, got ") + dtype_name(from) + " and " +
                      dtype_name(to));
    rc.out[0] = {to, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [to](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (!four_bit(to)) return copy_device(ctx, x, y);
    return launched(ctx, launch_bitcast_nibbles(x.data<uint8_t>(), y.data<uint8_t>(), x.numel(), to == DataType::kInt4,
                                                 state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_more(KernelRegistry& r) {
  r.add(kernel_row("EyeLike", 9, [](const ir::Node& n) { return tensor_inputs(n, 1); },
                   [](const ir::Node& n, KernelInit&) { return create_eye_like(n); }));
  KernelDef one_hot = kernel_row("OneHot", 9, [](const ir::Node& n) -> std::string {
    if (std::string why = tensor_inputs(n, 3); !why.empty()) return why;
    const DataType it = n.inputs[0]->type.dtype;
    if (it != DataType::kUndefined && (elem_of(it) < 0 || it == DataType::kBool)) return "indices must be numeric";
    const DataType vt = n.inputs[2]->type.dtype;
    if (vt != DataType::kUndefined && elem_of(vt) < 0) return std::string(dtype_name(vt)) + " values do not run on CUDA";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_one_hot(n); });
  one_hot.host_inputs = 0b10;  // depth
  r.add(one_hot);
  r.add(kernel_row("LpNormalization", 1, [](const ir::Node& n) -> std::string {
    if (std::string why = tensor_inputs(n, 1); !why.empty()) return why;
    const DataType dt = n.inputs[0]->type.dtype;
    if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64) return std::string(dtype_name(dt)) + " input";
    return "";
  }, [](const ir::Node& n, KernelInit&) { return create_lp_norm(n); }));
  KernelDef bitcast = kernel_row("BitCast", 26, [](const ir::Node& n) { return tensor_inputs(n, 1); },
                                 [](const ir::Node& n, KernelInit&) { return create_bitcast(n); });
  bitcast.half_floats = false;  // the bits are the point
  r.add(bitcast);
}

}  // namespace kiln::cuda
