// backends/cuda/cuda_misc.cpp — CumSum (11+), CumProd (26+), Trilu (14+), Dropout (7+, inference), Pad,
// Tile, CenterCropPad, Hardmax and IsInf on the GPU. Their scalar
// operands (axis, k) are host inputs, read while planning.
#include <algorithm>
#include <cstring>

#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ir/float_types.h"
#include "ops/params_misc.h"
#include "ops/params_nn.h"
#include "ops/params_shape.h"

namespace kiln::cuda {
namespace {

std::string movable_numeric(const ir::Node& n, bool allow_bool) {
  if (!n.has_input(0)) return "input 0 is required";
  const ir::Value* v = n.inputs[0];
  if (!v->type.is_tensor()) return "takes tensors only";
  const DataType t = v->type.dtype;
  if (t != DataType::kUndefined && (elem_of(t) < 0 || (!allow_bool && t == DataType::kBool)))
    return std::string(dtype_name(t)) + " does not run on CUDA";
  return "";
}

// The one integer of host input i (0-d or 1 element).
Expected<int64_t> scalar_of(const ReshapeContext& rc, size_t i, const char* what) {
  if (i >= rc.in.size() || !rc.in[i].present) return rc.error(std::string(what) + " is missing");
  auto v = host_ints(rc.in[i].value);
  if (!v || v->size() != 1) return rc.error(std::string(what) + " must be one int64/int32 value known on the host");
  return (*v)[0];
}

struct LinePlan {
  int64_t outer = 1, len = 1, inner = 1;
};

Expected<KernelPtr> create_cumulative(const ir::Node& n, bool product) {
  const ops::CumulativeParams cp = ops::parse_cumulative(n);
  const bool exclusive = cp.exclusive, reverse = cp.reverse;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    KILN_ASSIGN_OR_RETURN(int64_t axis, scalar_of(rc, 1, "axis"));
    const Shape& x = rc.in[0].shape;
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    auto p = std::make_shared<LinePlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) p->outer *= x[d];
      else if (d == axis) p->len = x[d];
      else p->inner *= x[d];
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [product, exclusive, reverse](KernelContext& ctx) -> Status {
    const auto& p = shape_state<LinePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_cumulative(elem_of(x.dtype()), product, x.raw(), ctx.output(0).raw(), p.outer, p.len, p.inner,
                                           exclusive, reverse, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

struct TriluPlan {
  int64_t k = 0;
};

Expected<KernelPtr> create_trilu(const ir::Node& n) {
  const bool upper = ops::parse_trilu(n).upper;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    if (x.size() < 2) return rc.error("input must have rank >= 2");
    auto p = std::make_shared<TriluPlan>();
    if (rc.in.size() > 1 && rc.in[1].present) {
      KILN_ASSIGN_OR_RETURN(p->k, scalar_of(rc, 1, "k"));
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [upper](KernelContext& ctx) -> Status {
    const auto& p = shape_state<TriluPlan>(ctx);
    const Tensor& x = ctx.input(0);
    const int r = x.rank();
    return launched(ctx, launch_trilu(x.raw(), ctx.output(0).raw(), static_cast<int>(dtype_size(x.dtype())), x.numel(),
                                      x.dim(r - 2), x.dim(r - 1), p.k, upper, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// Dropout in inference: y = x and a mask of ones. Training mode (a training_mode input that is not a
// constant false) stays on the CPU, whose generator the GPU does not share.
std::string check_dropout(const ir::Node& n) {
  if (std::string why = movable_numeric(n, false); !why.empty()) return why;
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && dt != DataType::kFloat64) return "takes float tensors only";
  if (n.opset != 0 && n.opset < 7) return "opset < 7 (is_test) runs on the CPU";
  if (n.has_input(2)) {
    const ir::Value* t = n.inputs[2];
    const bool constant_false = t->is_constant() && t->constant->dtype() == DataType::kBool && t->constant->numel() == 1 &&
                                !t->constant->data<bool>()[0];
    if (!constant_false) return "training mode (or a training_mode known only at run time) runs on the CPU";
  }
  return "";
}

// The bits of 1 in a float type of `bytes` bytes (bool: 1).
uint64_t one_bits(DataType t) {
  switch (t) {
    case DataType::kFloat32: return 0x3f800000u;
    case DataType::kFloat16: return 0x3c00u;
    case DataType::kBFloat16: return 0x3f80u;
    case DataType::kFloat64: return 0x3ff0000000000000ull;
    default: return 1;
  }
}

Expected<KernelPtr> create_dropout(const ir::Node& n) {
  const bool bool_mask = ops::parse_dropout(n).bool_mask;
  auto reshape = [bool_mask](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    rc.out[0] = {rc.in[0].dtype, rc.in[0].shape};
    if (rc.out.size() > 1) rc.out[1] = {bool_mask ? DataType::kBool : rc.in[0].dtype, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    KILN_RETURN_IF_ERROR(copy_device(ctx, x, ctx.output(0)));
    if (!ctx.has_output(1)) return Status::Ok();
    Tensor& m = ctx.output(1);
    return launched(ctx, launch_fill(m.raw(), m.numel(), static_cast<int>(dtype_size(m.dtype())), one_bits(m.dtype()),
                                     state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

// ---- Pad, Tile, CenterCropPad: one gather with a per-dim source rule (launch_pad).

struct PadPlan {
  PadIndex index;
  uint64_t value_bits = 0;
};

// Fills the index for input shape x and per-dim `before` (negative: crop) and output dims.
Status pad_index(const ReshapeContext& rc, const Shape& x, const std::vector<int64_t>& before, const Shape& out, int mode,
                 PadIndex& ix) {
  if (x.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8 is not supported on CUDA");
  ix.rank = static_cast<int>(x.size());
  ix.mode = mode;
  int64_t stride = 1;
  for (int d = ix.rank - 1; d >= 0; --d) {
    if (out[d] < 0) return rc.error("pads remove more than axis " + std::to_string(d) + " has");
    if (mode != 0 && x[d] == 0 && out[d] > 0) return rc.error("cannot pad an empty axis in this mode");
    ix.out_dims[d] = out[d];
    ix.in_dims[d] = x[d];
    ix.in_strides[d] = stride;
    ix.before[d] = before[d];
    stride *= x[d];
  }
  return Status::Ok();
}

Status run_pad(KernelContext& ctx) {
  const auto& p = shape_state<PadPlan>(ctx);
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0);
  return launched(ctx, launch_pad(x.raw(), y.raw(), y.numel(), static_cast<int>(dtype_size(x.dtype())), p.index, p.value_bits,
                                  state_of(ctx).stream));
}

// The bits of a float `v` as one element of dtype t (Pad's old 'value' attribute).
bool value_bits_of(DataType t, double v, uint64_t* bits) {
  *bits = 0;
  auto put = [&](auto x) { std::memcpy(bits, &x, sizeof(x)); return true; };
  switch (t) {
    case DataType::kFloat32: return put(static_cast<float>(v));
    case DataType::kFloat64: return put(v);
    case DataType::kFloat16: return put(f32_to_f16(static_cast<float>(v)));
    case DataType::kBFloat16: return put(f32_to_bf16(static_cast<float>(v)));
    case DataType::kInt8: return put(static_cast<int8_t>(v));
    case DataType::kInt16: return put(static_cast<int16_t>(v));
    case DataType::kInt32: return put(static_cast<int32_t>(v));
    case DataType::kInt64: return put(static_cast<int64_t>(v));
    case DataType::kUInt8: return put(static_cast<uint8_t>(v));
    case DataType::kUInt16: return put(static_cast<uint16_t>(v));
    case DataType::kUInt32: return put(static_cast<uint32_t>(v));
    case DataType::kUInt64: return put(static_cast<uint64_t>(v));
    case DataType::kBool: return put(static_cast<bool>(v != 0));
    default: return false;
  }
}

Expected<KernelPtr> create_pad(const ir::Node& n) {
  KILN_ASSIGN_OR_RETURN(const ops::PadParams pp, ops::parse_pad(n));
  const int mode = static_cast<int>(pp.mode);  // PadMode is in pad_index's order
  const bool attrs = pp.has_pads_attr;  // opset < 11
  const std::vector<int64_t> a_pads = pp.pads;
  const double a_value = pp.value;
  auto reshape = [=](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    auto p = std::make_shared<PadPlan>();
    std::vector<int64_t> pads = a_pads, axes;
    if (!attrs) {
      if (rc.in.size() < 2 || !rc.in[1].present) return rc.error("pads is required");
      auto v = host_ints(rc.in[1].value);
      if (!v) return rc.error("pads must be int64 values known on the host");
      pads = *v;
      if (rc.in.size() > 3 && rc.in[3].present) {
        auto a = host_ints(rc.in[3].value);
        if (!a) return rc.error("axes must be int64/int32 values known on the host");
        axes = *a;
      }
      if (rc.in.size() > 2 && rc.in[2].present && rc.in[2].value && rc.in[2].value->numel() > 0) {
        const Tensor& c = *rc.in[2].value;
        if (c.dtype() != rc.in[0].dtype) return rc.error("constant_value dtype differs from data");
        std::memcpy(&p->value_bits, c.raw(), std::min<size_t>(dtype_size(c.dtype()), sizeof p->value_bits));
      }
    } else if (!value_bits_of(rc.in[0].dtype, a_value, &p->value_bits)) {
      return rc.error("value attribute does not fit the data's dtype");
    }
    if (axes.empty())
      for (int64_t d = 0; d < r; ++d) axes.push_back(d);
    const size_t na = axes.size();
    if (pads.size() != 2 * na) return rc.error("pads must have 2 entries per padded axis");
    std::vector<int64_t> before(r, 0);
    Shape out = x;
    for (size_t i = 0; i < na; ++i) {
      int64_t a = axes[i];
      if (!normalize_axis(a, r)) return rc.error("axis out of range");
      before[a] = pads[i];
      out[a] = x[a] + pads[i] + pads[i + na];
    }
    KILN_RETURN_IF_ERROR(pad_index(rc, x, before, out, mode, p->index));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, run_pad);
}

Expected<KernelPtr> create_tile() {
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("input and repeats are required");
    const Shape& x = rc.in[0].shape;
    auto reps = host_ints(rc.in[1].value);
    if (!reps) return rc.error("repeats must be int64 values known on the host");
    if (reps->size() != x.size()) return rc.error("repeats must have one entry per input dim");
    Shape out = x;
    for (size_t d = 0; d < x.size(); ++d) {
      if ((*reps)[d] < 0) return rc.error("negative repeat");
      out[d] = x[d] * (*reps)[d];
    }
    auto p = std::make_shared<PadPlan>();
    KILN_RETURN_IF_ERROR(pad_index(rc, x, std::vector<int64_t>(x.size(), 0), out, 3, p->index));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, run_pad);
}

Expected<KernelPtr> create_center_crop_pad(const ir::Node& n) {
  const std::vector<int64_t> axes_attr = ops::parse_center_crop_pad(n).axes;
  auto reshape = [axes_attr](ReshapeContext& rc) -> Status {
    if (rc.in.size() < 2 || !rc.in[0].present || !rc.in[1].present) return rc.error("input and shape are required");
    const Shape& x = rc.in[0].shape;
    const int64_t r = static_cast<int64_t>(x.size());
    auto target = host_ints(rc.in[1].value);
    if (!target) return rc.error("shape must be int64 values known on the host");
    std::vector<int64_t> axes = axes_attr;
    if (axes.empty())
      for (int64_t d = 0; d < r; ++d) axes.push_back(d);
    if (target->size() != axes.size()) return rc.error("shape must have one entry per axis");
    std::vector<int64_t> before(r, 0);
    Shape out = x;
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i];
      if (!normalize_axis(a, r)) return rc.error("axis out of range");
      const int64_t dim = x[a], t = (*target)[i];
      if (t < 0) return rc.error("negative target size");
      out[a] = t;
      // Cropping keeps the centre (the extra element dropped at the end); padding adds the extra at the end.
      before[a] = t <= dim ? -((dim - t) / 2) : (t - dim) / 2;
    }
    auto p = std::make_shared<PadPlan>();
    KILN_RETURN_IF_ERROR(pad_index(rc, x, before, out, 0, p->index));
    rc.out[0] = {rc.in[0].dtype, out};
    rc.state = std::move(p);
    return Status::Ok();
  };
  return make_staged(reshape, run_pad);
}

// ---- Hardmax, IsInf

std::string check_float_in(const ir::Node& n, bool f64) {
  if (std::string why = movable_numeric(n, false); !why.empty()) return why;
  const DataType dt = n.inputs[0]->type.dtype;
  if (dt != DataType::kUndefined && !is_float_type(dt) && !(f64 && dt == DataType::kFloat64))
    return std::string(dtype_name(dt)) + " does not run on CUDA";
  return "";
}

Expected<KernelPtr> create_hardmax(const ir::Node& n) {
  const ops::SoftmaxParams sp = ops::parse_softmax(n);
  const bool coerce_2d = sp.coerce_2d;
  const int64_t axis_attr = sp.axis;
  auto reshape = [coerce_2d, axis_attr](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    const Shape& x = rc.in[0].shape;
    int64_t axis = axis_attr;
    if (!normalize_axis(axis, static_cast<int64_t>(x.size()))) return rc.error("axis out of range");
    auto p = std::make_shared<LinePlan>();
    for (int64_t d = 0; d < static_cast<int64_t>(x.size()); ++d) {
      if (d < axis) p->outer *= x[d];
      else if (d == axis || coerce_2d) p->len *= x[d];
      else p->inner *= x[d];
    }
    rc.out[0] = {rc.in[0].dtype, x};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [](KernelContext& ctx) -> Status {
    const auto& p = shape_state<LinePlan>(ctx);
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_hardmax(elem_of(x.dtype()), x.raw(), ctx.output(0).raw(), p.outer, p.len, p.inner,
                                        state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

Expected<KernelPtr> create_isinf(const ir::Node& n) {
  const ops::IsInfParams p = ops::parse_is_inf(n);
  const bool positive = p.detect_positive, negative = p.detect_negative;
  auto reshape = [](ReshapeContext& rc) -> Status {
    if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
    rc.out[0] = {DataType::kBool, rc.in[0].shape};
    return Status::Ok();
  };
  auto run = [positive, negative](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    return launched(ctx, launch_isinf(elem_of(x.dtype()), x.raw(), ctx.output(0).data<bool>(), x.numel(), positive, negative,
                                      state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_misc(KernelRegistry& r) {
  auto any_elem = [](const ir::Node& n) -> std::string {
    if (std::string why = movable_numeric(n, true); !why.empty()) return why;
    if (n.inputs[0]->type.shape.known && n.inputs[0]->type.shape.rank() > kMaxRank) return "rank above 8";
    return "";
  };
  KernelDef pad = kernel_row("Pad", 2, any_elem, [](const ir::Node& n, KernelInit&) { return create_pad(n); });
  pad.host_inputs = 0b1110;  // pads, constant_value, axes
  r.add(pad);
  KernelDef tile = kernel_row("Tile", 6, any_elem, [](const ir::Node&, KernelInit&) { return create_tile(); });
  tile.host_inputs = 0b10;
  r.add(tile);
  KernelDef crop = kernel_row("CenterCropPad", 18, any_elem,
                              [](const ir::Node& n, KernelInit&) { return create_center_crop_pad(n); });
  crop.host_inputs = 0b10;
  r.add(crop);
  r.add(kernel_row("Hardmax", 1, [](const ir::Node& n) { return check_float_in(n, false); },
                   [](const ir::Node& n, KernelInit&) { return create_hardmax(n); }));
  r.add(kernel_row("IsInf", 10, [](const ir::Node& n) { return check_float_in(n, true); },
                   [](const ir::Node& n, KernelInit&) { return create_isinf(n); }));
  KernelDef dropout = kernel_row("Dropout", 7, check_dropout, [](const ir::Node& n, KernelInit&) { return create_dropout(n); });
  dropout.host_inputs = 0b110;  // ratio and training_mode are never read on the device
  r.add(dropout);
  KernelDef cumsum = kernel_row("CumSum", 11, [](const ir::Node& n) { return movable_numeric(n, false); },
                                [](const ir::Node& n, KernelInit&) { return create_cumulative(n, false); });
  cumsum.host_inputs = 0b10;
  r.add(cumsum);
  KernelDef cumprod = kernel_row("CumProd", 26, [](const ir::Node& n) { return movable_numeric(n, false); },
                                 [](const ir::Node& n, KernelInit&) { return create_cumulative(n, true); });
  cumprod.host_inputs = 0b10;
  r.add(cumprod);
  KernelDef trilu = kernel_row("Trilu", 14, [](const ir::Node& n) { return movable_numeric(n, true); },
                               [](const ir::Node& n, KernelInit&) { return create_trilu(n); });
  trilu.host_inputs = 0b10;
  r.add(trilu);
}

}  // namespace kiln::cuda
