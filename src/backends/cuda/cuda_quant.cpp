// backends/cuda/cuda_quant.cpp — QuantizeLinear and DequantizeLinear (10+) on the GPU, per tensor,
// per axis and blocked, to and from int8/uint8, int16/uint16, int4/uint4, int2/uint2 and the float8
// and float4 types (one per byte), with the CPU kernel's rules (launchers in cuda_cast_ext.cu).
#include "backends/cuda/cuda_util.h"
#include "backends/staged_kernel.h"
#include "ops/params_ml.h"

namespace kiln::cuda {
namespace {

bool quantized_int(DataType t) {
  switch (t) {
    case DataType::kUInt8: case DataType::kInt8: case DataType::kUInt16: case DataType::kInt16: case DataType::kUInt4:
    case DataType::kInt4: case DataType::kUInt2: case DataType::kInt2: return true;
    default: return false;
  }
}
bool small_float(DataType t) {
  switch (t) {
    case DataType::kFloat8E4M3FN: case DataType::kFloat8E4M3FNUZ: case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ: case DataType::kFloat4E2M1: return true;
    default: return false;
  }
}
bool float_out(DataType t) { return is_float_type(t) || t == DataType::kFloat64; }

// The quantized type a QuantizeLinear node writes: its zero point's, else output_dtype, else uint8.
DataType quantized_type(const ir::Node& n, const ops::QuantizeParams& a) {
  if (n.has_input(2) && n.inputs[2]->type.dtype != DataType::kUndefined) return n.inputs[2]->type.dtype;
  return a.output_dtype != DataType::kUndefined ? a.output_dtype : DataType::kUInt8;
}

std::string check_quantize(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "x and y_scale are required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  const DataType x = n.inputs[0]->type.dtype;
  if (x != DataType::kUndefined && !is_float_type(x) && x != DataType::kInt32) return std::string(dtype_name(x)) + " x";
  const DataType s = n.inputs[1]->type.dtype;
  if (s != DataType::kUndefined && !float_out(s)) return "scale must be a float type";
  const DataType q = quantized_type(n, ops::parse_quantize(n));
  if (!quantized_int(q) && !small_float(q)) return std::string("cannot quantize to ") + dtype_name(q) + " on CUDA";
  return "";
}

std::string check_dequantize(const ir::Node& n) {
  if (!n.has_input(0) || !n.has_input(1)) return "x and x_scale are required";
  for (size_t i = 0; i < n.inputs.size(); ++i)
    if (n.inputs[i] && !n.inputs[i]->type.is_tensor()) return "takes tensors only";
  const DataType x = n.inputs[0]->type.dtype;
  if (x != DataType::kUndefined && !quantized_int(x) && !small_float(x) && x != DataType::kInt32)
    return std::string(dtype_name(x)) + " x does not run on CUDA";
  const DataType s = n.inputs[1]->type.dtype;
  if (s != DataType::kUndefined && !float_out(s)) return "scale must be a float type";
  const ops::QuantizeParams a = ops::parse_quantize(n);
  if (a.output_dtype != DataType::kUndefined && !float_out(a.output_dtype)) return "output_dtype must be a float type";
  return "";
}

struct QuantPlan {
  QuantArgs args;
};

// The scale's granularity from its shape (backends/cpu/quant.cpp's make_scale_map).
Status scale_map(const ReshapeContext& rc, const ops::QuantizeParams& a, QuantArgs& q) {
  const Shape& x = rc.in[0].shape;
  const Shape& s = rc.in[1].shape;
  int64_t sn = 1;
  for (int64_t d : s) sn *= d;
  if (s.empty() || (s.size() == 1 && sn == 1 && a.block_size == 0)) {
    q.map_kind = 0;
  } else {
    int64_t axis = a.axis;
    const int64_t r = static_cast<int64_t>(x.size());
    if (!normalize_axis(axis, r)) return rc.error("axis " + std::to_string(a.axis) + " out of range");
    q.len = x[axis];
    q.inner = 1;
    for (int64_t d = axis + 1; d < r; ++d) q.inner *= x[d];
    if (a.block_size < 0) return rc.error("block_size must be positive");
    if (a.block_size == 0) {
      if (s.size() != 1 || s[0] != q.len)
        return rc.error("per-axis scale must be 1-D of length " + std::to_string(q.len) + ", got " + shape_to_string(s));
      q.map_kind = 1;
    } else {
      q.map_kind = 2;
      q.block = a.block_size;
      q.blocks = (q.len + q.block - 1) / q.block;
      bool ok = static_cast<int64_t>(s.size()) == r;
      for (int64_t d = 0; ok && d < r; ++d) ok = s[d] == (d == axis ? q.blocks : x[d]);
      if (!ok) return rc.error("blocked scale must have x's shape with ceil(dim/block_size) along axis, got " + shape_to_string(s));
    }
  }
  if (rc.in.size() > 2 && rc.in[2].present) {
    const Shape& z = rc.in[2].shape;
    int64_t zn = 1;
    for (int64_t d : z) zn *= d;
    if (z != s && !(zn == 1 && sn == 1)) return rc.error("zero point shape " + shape_to_string(z) + " differs from scale shape");
  }
  return Status::Ok();
}

int div_type(DataType x, DataType scale, DataType precision) {
  auto of = [](DataType t) {
    if (t == DataType::kFloat16) return 2;
    if (t == DataType::kBFloat16) return 3;
    if (t == DataType::kFloat64) return 1;
    return 0;
  };
  if (precision != DataType::kUndefined) return of(precision);
  if (x == DataType::kInt32) return 1;
  if (x == scale && (x == DataType::kFloat16 || x == DataType::kBFloat16)) return of(x);
  return 0;
}

Expected<KernelPtr> create_quant(const ir::Node& n, bool quantize) {
  const ops::QuantizeParams a = ops::parse_quantize(n);
  const DataType qtype = quantize ? quantized_type(n, a) : DataType::kUndefined;
  auto reshape = [a, quantize, qtype](ReshapeContext& rc) -> Status {
    auto p = std::make_shared<QuantPlan>();
    QuantArgs& q = p->args;
    KILN_RETURN_IF_ERROR(scale_map(rc, a, q));
    const bool has_zp = rc.in.size() > 2 && rc.in[2].present;
    DataType out;
    if (quantize) {
      if (has_zp && a.output_dtype != DataType::kUndefined && a.output_dtype != rc.in[2].dtype)
        return rc.error("output_dtype differs from the zero point's dtype");
      out = qtype;
      q.div_type = div_type(rc.in[0].dtype, rc.in[1].dtype, a.precision);
    } else {
      if (has_zp && rc.in[2].dtype != rc.in[0].dtype) return rc.error("zero point dtype differs from x dtype");
      out = a.output_dtype != DataType::kUndefined ? a.output_dtype : rc.in[1].dtype;
    }
    q.x_code = static_cast<int>(rc.in[0].dtype);
    q.scale_code = static_cast<int>(rc.in[1].dtype);
    q.zp_code = has_zp ? static_cast<int>(rc.in[2].dtype) : 0;
    q.y_code = static_cast<int>(out);
    q.saturate = a.saturate;
    rc.out[0] = {out, rc.in[0].shape};
    rc.state = std::move(p);
    return Status::Ok();
  };
  auto run = [quantize](KernelContext& ctx) -> Status {
    QuantArgs q = shape_state<QuantPlan>(ctx).args;
    q.x = ctx.input(0).raw();
    q.scale = ctx.input(1).raw();
    q.zp = ctx.has_input(2) ? ctx.input(2).raw() : nullptr;
    q.y = ctx.output(0).raw();
    q.n = ctx.input(0).numel();
    return launched(ctx, quantize ? launch_quantize(q, state_of(ctx).stream) : launch_dequantize(q, state_of(ctx).stream));
  };
  return make_staged(reshape, run);
}

}  // namespace

void register_quant(KernelRegistry& r) {
  // Scales and zero points keep their types in reduced-precision builds (half_floats off): a scale
  // rounded to float16 would move every quantized value.
  KernelDef q = kernel_row("QuantizeLinear", 10, check_quantize, [](const ir::Node& n, KernelInit&) { return create_quant(n, true); });
  q.half_floats = false;
  r.add(q);
  KernelDef dq = kernel_row("DequantizeLinear", 10, check_dequantize,
                            [](const ir::Node& n, KernelInit&) { return create_quant(n, false); });
  dq.half_floats = false;
  r.add(dq);
}

}  // namespace kiln::cuda
