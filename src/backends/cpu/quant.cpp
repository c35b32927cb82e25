// backends/cpu/quant.cpp — QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear on the CPU.
//
// Granularity comes from the scale's shape: a scalar (or [1]) is per tensor, a 1-D scale of
// x.shape[axis] is per axis, and with block_size > 0 the scale has x's shape except
// ceil(x.shape[axis] / block_size) along axis. Integer results round half to even and saturate;
// float8 results round to nearest even (saturating or not, `saturate`); 4- and 2-bit results are
// held one per byte.
#include <algorithm>
#include <limits>

#include "backends/cpu/numeric_f64.h"
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::cpu {
namespace {

// Maps an element of x (viewed as [outer, len, inner] around axis) to its scale index.
struct ScaleMap {
  enum class Kind { kTensor, kAxis, kBlocked } kind = Kind::kTensor;
  int64_t len = 1, inner = 1, block = 1, blocks = 1;

  int64_t index(int64_t i) const {
    switch (kind) {
      case Kind::kTensor: return 0;
      case Kind::kAxis: return (i / inner) % len;
      case Kind::kBlocked: {
        const int64_t in = i % inner, d = (i / inner) % len, o = i / (inner * len);
        return (o * blocks + d / block) * inner + in;
      }
    }
    return 0;
  }
};

Status make_scale_map(KernelContext& ctx, const Tensor& x, const Tensor& scale, const ops::QuantizeParams& a,
                      ScaleMap& m) {
  if (scale.rank() == 0 || (scale.rank() == 1 && scale.numel() == 1 && a.block_size == 0)) {
    m.kind = ScaleMap::Kind::kTensor;
    return Status::Ok();
  }
  int64_t axis = a.axis;
  if (!ops::normalize_axis(axis, x.rank()))
    return ctx.error("axis " + std::to_string(a.axis) + " out of range for input of rank " + std::to_string(x.rank()));
  m.len = x.dim(static_cast<int>(axis));
  m.inner = 1;
  for (int d = static_cast<int>(axis) + 1; d < x.rank(); ++d) m.inner *= x.dim(d);
  if (a.block_size <= 0) {
    if (a.block_size < 0) return ctx.error("block_size must be positive");
    if (scale.rank() != 1 || scale.dim(0) != m.len)
      return ctx.error("per-axis scale must be 1-D of length " + std::to_string(m.len) + " (x.shape[axis]), got " +
                       shape_to_string(scale.shape()));
    m.kind = ScaleMap::Kind::kAxis;
    return Status::Ok();
  }
  m.kind = ScaleMap::Kind::kBlocked;
  m.block = a.block_size;
  m.blocks = (m.len + m.block - 1) / m.block;
  bool ok = scale.rank() == x.rank();
  for (int d = 0; ok && d < x.rank(); ++d) ok = scale.dim(d) == (d == axis ? m.blocks : x.dim(d));
  if (!ok)
    return ctx.error("blocked scale must have x's shape " + shape_to_string(x.shape()) + " with ceil(dim/block_size) = " +
                     std::to_string(m.blocks) + " along axis, got " + shape_to_string(scale.shape()));
  return Status::Ok();
}

bool integer_range(DataType t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case DataType::kUInt8: *lo = 0; *hi = 255; return true;
    case DataType::kInt8: *lo = -128; *hi = 127; return true;
    case DataType::kUInt16: *lo = 0; *hi = 65535; return true;
    case DataType::kInt16: *lo = -32768; *hi = 32767; return true;
    case DataType::kUInt4: *lo = 0; *hi = 15; return true;
    case DataType::kInt4: *lo = -8; *hi = 7; return true;
    case DataType::kUInt2: *lo = 0; *hi = 3; return true;
    case DataType::kInt2: *lo = -2; *hi = 1; return true;
    case DataType::kInt32: *lo = std::numeric_limits<int32_t>::min(); *hi = std::numeric_limits<int32_t>::max(); return true;
    default: return false;
  }
}

void store_integer(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DataType::kUInt8: case DataType::kUInt4: case DataType::kUInt2: t.data<uint8_t>()[i] = static_cast<uint8_t>(v); break;
    case DataType::kInt8: case DataType::kInt4: case DataType::kInt2: t.data<int8_t>()[i] = static_cast<int8_t>(v); break;
    case DataType::kUInt16: t.data<uint16_t>()[i] = static_cast<uint16_t>(v); break;
    case DataType::kInt16: t.data<int16_t>()[i] = static_cast<int16_t>(v); break;
    case DataType::kInt32: t.data<int32_t>()[i] = static_cast<int32_t>(v); break;
    default: break;
  }
}

// x / scale the way the reference computes it: in `precision` when given, else in the common type
// of x and scale (float16 or bfloat16 when both are; double for int32 x; float otherwise).
enum class DivType { kF32, kF64, kF16, kBF16 };

DivType div_type(DataType x, DataType scale, DataType precision) {
  auto of = [](DataType t) {
    if (t == DataType::kFloat16) return DivType::kF16;
    if (t == DataType::kBFloat16) return DivType::kBF16;
    if (t == DataType::kFloat64) return DivType::kF64;
    return DivType::kF32;
  };
  if (precision != DataType::kUndefined) return of(precision);
  if (x == DataType::kInt32) return DivType::kF64;
  if (x == scale && (x == DataType::kFloat16 || x == DataType::kBFloat16)) return of(x);
  return DivType::kF32;
}

double divide(double x, double s, DivType t) {
  switch (t) {
    case DivType::kF64: return x / s;
    case DivType::kF32: return static_cast<float>(x) / static_cast<float>(s);
    case DivType::kF16: {
      auto r = [](double v) { return f16_to_f32(f32_to_f16(static_cast<float>(v))); };
      return r(r(x) / r(s));
    }
    case DivType::kBF16: {
      auto r = [](double v) { return bf16_to_f32(f32_to_bf16(static_cast<float>(v))); };
      return r(r(x) / r(s));
    }
  }
  return x / s;
}

Status check_zero_point(KernelContext& ctx, const Tensor& scale, const Tensor* zp) {
  if (zp && zp->shape() != scale.shape() && !(zp->numel() == 1 && scale.numel() == 1))
    return ctx.error("zero point shape " + shape_to_string(zp->shape()) + " differs from scale shape " +
                     shape_to_string(scale.shape()));
  return Status::Ok();
}

// The common per-tensor cases of a quantized graph, float32 ↔ uint8/int8, as branch-free loops the
// compiler vectorizes; the same results as the general kernels below (float division, round half to
// even, saturation, NaN to the lowest value). Rounding adds and subtracts 1.5·2^23 after the clamp
// (|q| < 2^9 there), which rounds half to even in the default rounding mode.
// One chunk, with everything in locals and restrict pointers: a uint8_t store may alias anything,
// so values read through the lambda's captures would be reloaded every iteration and the loop would
// not vectorize.
template <typename Q>
void quantize_chunk(const float* __restrict x, Q* __restrict y, int64_t n, float s, float lo, float hi, int32_t z) {
  constexpr float kMagic = 12582912.0f;
  for (int64_t i = 0; i < n; ++i) {
    float q = x[i] / s;
    q = q >= lo ? q : lo;
    q = q <= hi ? q : hi;
    q = (q + kMagic) - kMagic;
    y[i] = static_cast<Q>(static_cast<int32_t>(q) + z);
  }
}

template <typename Q>
void quantize_f32(const float* x, int64_t n, float s, int32_t z, Q* y) {
  const float lo = static_cast<float>(std::numeric_limits<Q>::min() - z), hi = static_cast<float>(std::numeric_limits<Q>::max() - z);
  parallel_for(n, 1 << 14, [=](int64_t b, int64_t e) { quantize_chunk(x + b, y + b, e - b, s, lo, hi, z); });
}

template <typename Q>
void dequantize_chunk(const Q* __restrict x, float* __restrict y, int64_t n, float s, float zf) {
  for (int64_t i = 0; i < n; ++i) y[i] = (static_cast<float>(x[i]) - zf) * s;
}

template <typename Q>
void dequantize_f32(const Q* x, int64_t n, float s, int32_t z, float* y) {
  const float zf = static_cast<float>(z);
  parallel_for(n, 1 << 14, [=](int64_t b, int64_t e) { dequantize_chunk(x + b, y + b, e - b, s, zf); });
}

bool per_tensor_8bit(const Tensor& scale, const Tensor* zp, DataType q, const ops::QuantizeParams& a) {
  return scale.dtype() == DataType::kFloat32 && scale.numel() == 1 && (scale.rank() == 0 || a.block_size == 0) &&
         a.precision == DataType::kUndefined && (q == DataType::kUInt8 || q == DataType::kInt8) &&
         (!zp || (zp->numel() == 1 && zp->dtype() == q));
}

int32_t zero_point_of(const Tensor* zp) {
  if (!zp) return 0;
  return zp->dtype() == DataType::kUInt8 ? zp->data<uint8_t>()[0] : zp->data<int8_t>()[0];
}

Status quantize_kernel(KernelContext& ctx, const ops::QuantizeParams& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  DataType out_t = a.output_dtype != DataType::kUndefined ? a.output_dtype : DataType::kUInt8;
  if (zp) {
    if (a.output_dtype != DataType::kUndefined && a.output_dtype != zp->dtype())
      return ctx.error(std::string("output_dtype ") + dtype_name(a.output_dtype) + " differs from zero point dtype " +
                       dtype_name(zp->dtype()));
    out_t = zp->dtype();
  }
  if (x.dtype() == DataType::kFloat32 && per_tensor_8bit(ctx.input(1), zp, out_t, a)) {
    Tensor& y = ctx.output(0, out_t, x.shape());
    const float s = ctx.input(1).data<float>()[0];
    if (out_t == DataType::kUInt8) quantize_f32(x.data<float>(), x.numel(), s, zero_point_of(zp), y.data<uint8_t>());
    else quantize_f32(x.data<float>(), x.numel(), s, zero_point_of(zp), y.data<int8_t>());
    return Status::Ok();
  }
  int64_t lo = 0, hi = 0;
  MiniFloat sf{};
  const bool is_int = out_t != DataType::kInt32 && integer_range(out_t, &lo, &hi);
  const bool is_small = small_float_of(out_t, &sf);
  if (!is_int && !is_small) return ctx.error(std::string("cannot quantize to ") + dtype_name(out_t));
  ScaleMap m;
  KILN_RETURN_IF_ERROR(make_scale_map(ctx, x, scale, a, m));
  KILN_RETURN_IF_ERROR(check_zero_point(ctx, scale, zp));
  const std::vector<double> s = to_f64(scale);
  const std::vector<double> z = zp ? to_f64(*zp) : std::vector<double>(s.size(), 0.0);
  const DivType dt = div_type(x.dtype(), scale.dtype(), a.precision);
  Tensor& y = ctx.output(0, out_t, x.shape());
  parallel_for(x.numel(), 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t k = m.index(i);
      const double q = divide(load_f64(x, i), s[k], dt);
      if (is_int) {
        double r = std::isnan(q) ? static_cast<double>(lo) : std::nearbyint(q) + z[k];
        r = std::clamp(r, static_cast<double>(lo), static_cast<double>(hi));
        store_integer(y, i, static_cast<int64_t>(r));
      } else {
        // float8 adds a zero point only when it is not zero (keeps -0); float4 always adds it,
        // like the reference.
        const double v = sf == MiniFloat::kE2M1 || z[k] != 0 ? q + z[k] : q;
        y.data<uint8_t>()[i] = f32_to_mini(static_cast<float>(v), sf, a.saturate);
      }
    }
  });
  return Status::Ok();
}

Status dequantize_kernel(KernelContext& ctx, const ops::QuantizeParams& a) {
  const Tensor& x = ctx.input(0);
  const Tensor& scale = ctx.input(1);
  const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  const DataType out_t = a.output_dtype != DataType::kUndefined ? a.output_dtype : scale.dtype();
  if (!is_float_dtype(out_t)) return ctx.error(std::string("cannot dequantize to ") + dtype_name(out_t));
  if (zp && zp->dtype() != x.dtype())
    return ctx.error(std::string("zero point dtype ") + dtype_name(zp->dtype()) + " differs from x dtype " +
                     dtype_name(x.dtype()));
  if (out_t == DataType::kFloat32 && per_tensor_8bit(scale, zp, x.dtype(), a)) {
    Tensor& y = ctx.output(0, out_t, x.shape());
    if (x.dtype() == DataType::kUInt8) dequantize_f32(x.data<uint8_t>(), x.numel(), scale.data<float>()[0], zero_point_of(zp), y.data<float>());
    else dequantize_f32(x.data<int8_t>(), x.numel(), scale.data<float>()[0], zero_point_of(zp), y.data<float>());
    return Status::Ok();
  }
  ScaleMap m;
  KILN_RETURN_IF_ERROR(make_scale_map(ctx, x, scale, a, m));
  KILN_RETURN_IF_ERROR(check_zero_point(ctx, scale, zp));
  const std::vector<double> s = to_f64(scale);
  const std::vector<double> z = zp ? to_f64(*zp) : std::vector<double>(s.size(), 0.0);
  const bool wide = x.dtype() == DataType::kInt32;  // the reference computes int32 in double
  Tensor& y = ctx.output(0, out_t, x.shape());
  parallel_for(x.numel(), 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const int64_t k = m.index(i);
      const double v = wide ? (load_f64(x, i) - z[k]) * s[k]
                            : static_cast<double>((static_cast<float>(load_f64(x, i)) - static_cast<float>(z[k])) *
                                                  static_cast<float>(s[k]));
      store_float(y, i, v);
    }
  });
  return Status::Ok();
}

// DynamicQuantizeLinear (uint8): scale = (max(0, max x) - min(0, min x)) / 255, zero point the
// rounded, clamped -min/scale.
Status dynamic_quantize_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.input(0);
  const int64_t n = x.numel();
  float mx = 0, mn = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = static_cast<float>(load_f64(x, i));
    mx = std::max(mx, v);
    mn = std::min(mn, v);
  }
  const float scale = (mx == mn ? 1.0f : mx - mn) / 255.0f;
  // NaN (an input of ±inf makes the scale inf, and inf / inf NaN) is 0, as QuantizeLinear's above:
  // converting NaN to an integer is undefined, and clamp passes it through.
  const float zr = 0.0f - mn / scale;
  const float zp = std::isnan(zr) ? 0.0f : std::nearbyint(std::clamp(zr, 0.0f, 255.0f));
  Tensor& y = ctx.output(0, DataType::kUInt8, x.shape());
  parallel_for(n, 1 << 12, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float q = std::nearbyint(static_cast<float>(load_f64(x, i)) / scale) + zp;
      y.data<uint8_t>()[i] = std::isnan(q) ? 0 : static_cast<uint8_t>(std::clamp(q, 0.0f, 255.0f));
    }
  });
  if (ctx.has_output(1)) store_float(ctx.output(1, x.dtype(), {}), 0, scale);
  if (ctx.has_output(2)) ctx.output(2, DataType::kUInt8, {}).data<uint8_t>()[0] = static_cast<uint8_t>(zp);
  return Status::Ok();
}

}  // namespace

void register_quant(KernelRegistry& r) {
  auto x_check = [](const ir::Node& n) {
    return require_dtypes(n, 0, {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16, DataType::kInt32});
  };
  r.add({"QuantizeLinear", "", 10, 1 << 30, "cpu.QuantizeLinear.any", x_check, [](const ir::Node& n, KernelInit&) {
           const ops::QuantizeParams a = ops::parse_quantize(n);
           return make_kernel([a](KernelContext& ctx) { return quantize_kernel(ctx, a); });
         }});
  r.add({"DequantizeLinear", "", 10, 1 << 30, "cpu.DequantizeLinear.any", nullptr, [](const ir::Node& n, KernelInit&) {
           const ops::QuantizeParams a = ops::parse_quantize(n);
           return make_kernel([a](KernelContext& ctx) { return dequantize_kernel(ctx, a); });
         }});
  r.add({"DynamicQuantizeLinear", "", 11, 1 << 30, "cpu.DynamicQuantizeLinear.f32",
         [](const ir::Node& n) { return require_dtypes(n, 0, {DataType::kFloat32}); },
         [](const ir::Node&, KernelInit&) { return make_kernel([](KernelContext& ctx) { return dynamic_quantize_kernel(ctx); }); }});
}

}  // namespace kiln::cpu
