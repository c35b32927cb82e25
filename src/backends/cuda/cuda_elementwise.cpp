// backends/cuda/cuda_elementwise.cpp — the tables of unary, broadcasting binary (arithmetic,
// comparison, logic), Where and Cast kernels. Float math runs on float32, float16 and bfloat16
// (computed in float32); integer arithmetic and comparisons on every integer type.
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/cuda/cuda_util.h"
#include "ir/float_types.h"
#include "backends/staged_kernel.h"
#include "ops/params_misc.h"

namespace kiln::cuda {
namespace {

constexpr DataType kF32 = DataType::kFloat32, kF16 = DataType::kFloat16, kBF16 = DataType::kBFloat16,
                   kF64 = DataType::kFloat64, kI8 = DataType::kInt8, kI16 = DataType::kInt16, kI32 = DataType::kInt32,
                   kI64 = DataType::kInt64, kU8 = DataType::kUInt8, kU16 = DataType::kUInt16, kU32 = DataType::kUInt32,
                   kU64 = DataType::kUInt64, kBool = DataType::kBool;

// The dtype sets rows accept.
enum class Types { kFloat, kReal, kNumeric, kSignedNumeric, kBool, kInteger, kAll };

const std::vector<DataType>& types_of(Types types) {
  static const std::vector<DataType> kFloat = {kF32, kF16, kBF16};
  static const std::vector<DataType> kReal = {kF32, kF16, kBF16, kF64};
  static const std::vector<DataType> kNumeric = {kF32, kF16, kBF16, kF64, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64};
  static const std::vector<DataType> kSigned = {kF32, kF16, kBF16, kF64, kI32, kI64};
  static const std::vector<DataType> kBoolOnly = {kBool};
  static const std::vector<DataType> kInteger = {kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64};
  static const std::vector<DataType> kAll = {kF32, kF16, kBF16, kF64, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kBool};
  switch (types) {
    case Types::kFloat: return kFloat;
    case Types::kReal: return kReal;
    case Types::kNumeric: return kNumeric;
    case Types::kSignedNumeric: return kSigned;
    case Types::kBool: return kBoolOnly;
    case Types::kInteger: return kInteger;
    case Types::kAll: break;
  }
  return kAll;
}

std::string check_types(const ir::Node& n, Types types, bool bool_out) {
  const std::vector<DataType>& allowed = types_of(types);
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (!n.inputs[i]) return "omitted inputs are not supported";
    if (!n.inputs[i]->type.is_tensor()) return "takes tensors only";
    if (std::string r = require_input_types(n, static_cast<int>(i), allowed); !r.empty()) return r;
    if (n.inputs[i]->type.shape.known && n.inputs[i]->type.shape.rank() > kMaxRank) return "rank above 8";
  }
  if (bool_out) return require_output_types(n, 0, {kBool});
  return "";
}

// ---- unary

struct UnaryRow {
  const char* op;
  int since;
  UnaryOp fn;
  Types types = Types::kReal;  // float32/16/bf16 in float, float64 in double
};

constexpr UnaryRow kUnary[] = {
    {"Relu", 6, UnaryOp::kRelu},       {"Sigmoid", 6, UnaryOp::kSigmoid},     {"Tanh", 6, UnaryOp::kTanh},
    {"Exp", 6, UnaryOp::kExp},         {"Log", 6, UnaryOp::kLog},             {"Sqrt", 6, UnaryOp::kSqrt},
    {"Abs", 6, UnaryOp::kAbs, Types::kSignedNumeric},  {"Neg", 6, UnaryOp::kNeg, Types::kSignedNumeric},
    {"Sign", 9, UnaryOp::kSign, Types::kSignedNumeric}, {"Erf", 9, UnaryOp::kErf},
    {"LeakyRelu", 6, UnaryOp::kLeakyRelu}, {"HardSigmoid", 6, UnaryOp::kHardSigmoid},
    {"HardSwish", 14, UnaryOp::kHardSwish}, {"Reciprocal", 6, UnaryOp::kReciprocal}, {"Floor", 6, UnaryOp::kFloor},
    {"Ceil", 6, UnaryOp::kCeil},       {"Round", 11, UnaryOp::kRound},        {"Sin", 7, UnaryOp::kSin},
    {"Cos", 7, UnaryOp::kCos},         {"Tan", 7, UnaryOp::kTan},             {"Atan", 7, UnaryOp::kAtan},
    {"Asin", 7, UnaryOp::kAsin},       {"Acos", 7, UnaryOp::kAcos},           {"Sinh", 9, UnaryOp::kSinh},
    {"Cosh", 9, UnaryOp::kCosh},       {"Softplus", 1, UnaryOp::kSoftplus},   {"Softsign", 1, UnaryOp::kSoftsign},
    {"Elu", 6, UnaryOp::kElu},         {"Selu", 6, UnaryOp::kSelu},           {"Celu", 12, UnaryOp::kCelu},
    {"Mish", 18, UnaryOp::kMish},      {"ThresholdedRelu", 10, UnaryOp::kThresholdedRelu},
    {"IsNaN", 9, UnaryOp::kIsNaN},     {"Not", 1, UnaryOp::kNot, Types::kBool},
    {"Asinh", 9, UnaryOp::kAsinh},     {"Acosh", 9, UnaryOp::kAcosh},         {"Atanh", 9, UnaryOp::kAtanh},
    {"Shrink", 9, UnaryOp::kShrink},   {"Swish", 24, UnaryOp::kSwish},   {"BitwiseNot", 18, UnaryOp::kBitNot, Types::kInteger},
};

// Output: same shape; bool for IsNaN, the input's dtype otherwise.
Status reshape_unary(ReshapeContext& rc, UnaryOp fn) {
  if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
  if (elem_of(rc.in[0].dtype) < 0) return rc.error("dtype not supported on CUDA");
  rc.out[0] = {fn == UnaryOp::kIsNaN ? kBool : rc.in[0].dtype, rc.in[0].shape};
  return Status::Ok();
}

Expected<KernelPtr> unary_kernel(UnaryOp fn, float alpha, float beta) {
  return make_staged([fn](ReshapeContext& rc) { return reshape_unary(rc, fn); },
                     [fn, alpha, beta](KernelContext& ctx) -> Status {
                       const Tensor& x = ctx.input(0);
                       Tensor& y = ctx.output(0);
                       return launched(ctx, launch_unary(fn, elem_of(x.dtype()), x.raw(), y.raw(), x.numel(), alpha,
                                                         beta, state_of(ctx).stream));
                     });
}

KernelDef unary_def(const UnaryRow& row) {
  KernelDef d;
  d.op = row.op;
  d.since = row.since;
  d.name = std::string("cuda.") + row.op;
  const Types types = row.types;
  const UnaryOp fn = row.fn;
  d.half_floats = types != Types::kBool && types != Types::kInteger;
  d.check = [types, fn](const ir::Node& n) { return check_types(n, types, fn == UnaryOp::kIsNaN); };
  d.create = [fn](const ir::Node& n, KernelInit&) {
    // The launch's (alpha, beta) are the op's ActivationParams (Selu: alpha, gamma; Shrink: lambd, bias).
    const ops::ActivationParams p = ops::parse_activation(n);
    return unary_kernel(fn, p.alpha, p.beta);
  };
  return d;
}

KernelDef gelu_def() {
  KernelDef d;
  d.op = "Gelu";
  d.since = 20;
  d.name = "cuda.Gelu";
  d.half_floats = true;
  d.check = [](const ir::Node& n) -> std::string {
    const std::string a = ops::parse_gelu(n).approximate;
    if (a != "none" && a != "tanh") return "approximate='" + a + "' is not 'none' or 'tanh'";
    return check_types(n, Types::kFloat, false);
  };
  d.create = [](const ir::Node& n, KernelInit&) {
    return unary_kernel(ops::parse_gelu(n).tanh ? UnaryOp::kGeluTanh : UnaryOp::kGelu, 0, 0);
  };
  return d;
}

// Clip: bounds are attributes before opset 11 and inputs from 11 on; they are read on the host. Float
// types through launch_unary (in float), float64 and the integer types in their own type. An absent
// bound is the compute type's lowest/max, the spec's default and the CPU kernel's (±inf clamps to
// ±FLT_MAX in float32; float16/bfloat16 round that back to ±inf); NaN stays NaN.
KernelDef clip_def() {
  KernelDef d;
  d.op = "Clip";
  d.since = 6;
  d.name = "cuda.Clip";
  d.half_floats = true;
  d.host_inputs = 0b110;
  d.check = [](const ir::Node& n) {
    return require_input_types(n, 0, {kF32, kF16, kBF16, kF64, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64});
  };
  d.create = [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    // Float types start from the attributes (before opset 11) or their compute type's limits;
    // integer types from their limits.
    const ops::ClipParams p = ops::parse_clip(n);
    struct Bounds {
      double lo, hi;
    };
    auto reshape = [p](ReshapeContext& rc) -> Status {
      KILN_RETURN_IF_ERROR(reshape_unary(rc, UnaryOp::kClip));
      const DataType dt = rc.in[0].dtype;
      Bounds b{p.min, p.max};
      const bool integral = dt != kF32 && dt != kF16 && dt != kBF16 && dt != kF64;
      if (!integral && p.bounds_from_inputs) {
        if (dt == kF64) b = {std::numeric_limits<double>::lowest(), std::numeric_limits<double>::max()};
        else b = {std::numeric_limits<float>::lowest(), std::numeric_limits<float>::max()};
      }
      if (integral) {  // absent bounds are the type's limits
        const auto lim = [dt](bool hi) -> double {
          switch (dt) {
            case kI8: return hi ? 127.0 : -128.0;
            case kU8: return hi ? 255.0 : 0.0;
            case kI16: return hi ? 32767.0 : -32768.0;
            case kU16: return hi ? 65535.0 : 0.0;
            case kI32: return hi ? 2147483647.0 : -2147483648.0;
            case kU32: return hi ? 4294967295.0 : 0.0;
            case kI64: return hi ? 9.2233720368547748e18 : -9.2233720368547758e18;
            default: return hi ? 1.8446744073709550e19 : 0.0;
          }
        };
        b = {lim(false), lim(true)};
      }
      for (size_t i : {size_t{1}, size_t{2}}) {
        if (i >= rc.in.size() || !rc.in[i].present) continue;
        const Tensor* t = rc.in[i].value;
        if (!t) return rc.error("min/max must be known before running");
        if (t->numel() != 1) return rc.error("min/max must be scalars");
        if (t->dtype() != dt) return rc.error("min/max must have the input's dtype");
        double v = 0;
        switch (dt) {
          case kF32: v = t->data<float>()[0]; break;
          case kF16: v = f16_to_f32(t->data<uint16_t>()[0]); break;
          case kBF16: v = bf16_to_f32(t->data<uint16_t>()[0]); break;
          case kF64: v = t->data<double>()[0]; break;
          case kI8: v = t->data<int8_t>()[0]; break;
          case kU8: v = t->data<uint8_t>()[0]; break;
          case kI16: v = t->data<int16_t>()[0]; break;
          case kU16: v = t->data<uint16_t>()[0]; break;
          case kI32: v = t->data<int32_t>()[0]; break;
          case kU32: v = t->data<uint32_t>()[0]; break;
          case kI64: v = static_cast<double>(t->data<int64_t>()[0]); break;
          case kU64: v = static_cast<double>(t->data<uint64_t>()[0]); break;
          default: return rc.error("min/max dtype not supported");
        }
        (i == 1 ? b.lo : b.hi) = v;
      }
      rc.state = std::make_shared<Bounds>(b);
      return Status::Ok();
    };
    auto run = [](KernelContext& ctx) -> Status {
      const auto& b = shape_state<Bounds>(ctx);
      const Tensor& x = ctx.input(0);
      const DataType dt = x.dtype();
      if (dt == kF32 || dt == kF16 || dt == kBF16)
        return launched(ctx, launch_unary(UnaryOp::kClip, elem_of(dt), x.raw(), ctx.output(0).raw(), x.numel(),
                                          static_cast<float>(b.lo), static_cast<float>(b.hi), state_of(ctx).stream));
      return launched(ctx, launch_clip(elem_of(dt), x.raw(), ctx.output(0).raw(), x.numel(), b.lo, b.hi, state_of(ctx).stream));
    };
    return make_staged(reshape, run);
  };
  return d;
}

// ---- binary

struct BinaryRow {
  const char* op;
  int since;
  BinaryOp fn;
  Types types;
  bool variadic = false;
};

constexpr BinaryRow kBinary[] = {
    {"Add", 7, BinaryOp::kAdd, Types::kNumeric},        {"Sub", 7, BinaryOp::kSub, Types::kNumeric},
    {"Mul", 7, BinaryOp::kMul, Types::kNumeric},        {"Div", 7, BinaryOp::kDiv, Types::kNumeric},
    {"Pow", 7, BinaryOp::kPow, Types::kSignedNumeric},  {"Max", 8, BinaryOp::kMax, Types::kNumeric, true},
    {"Min", 8, BinaryOp::kMin, Types::kNumeric, true},  {"Sum", 8, BinaryOp::kAdd, Types::kNumeric, true},
    {"Equal", 7, BinaryOp::kEqual, Types::kAll},        {"Less", 7, BinaryOp::kLess, Types::kNumeric},
    {"LessOrEqual", 12, BinaryOp::kLessEqual, Types::kNumeric}, {"Greater", 7, BinaryOp::kGreater, Types::kNumeric},
    {"GreaterOrEqual", 12, BinaryOp::kGreaterEqual, Types::kNumeric},
    {"And", 7, BinaryOp::kAnd, Types::kBool},           {"Or", 7, BinaryOp::kOr, Types::kBool},
    {"Xor", 7, BinaryOp::kXor, Types::kBool},           {"BitwiseAnd", 18, BinaryOp::kBitAnd, Types::kInteger},
    {"BitwiseOr", 18, BinaryOp::kBitOr, Types::kInteger}, {"BitwiseXor", 18, BinaryOp::kBitXor, Types::kInteger},
    {"PRelu", 7, BinaryOp::kPRelu, Types::kSignedNumeric}, {"Mean", 8, BinaryOp::kAdd, Types::kReal, true},
};

// y = in0 op in1 op in2 ... with numpy broadcasting (two inputs unless the op is variadic).
// reshape() computes the output shape and one broadcast index per launch; run() launches.
struct BinaryPlan {
  int64_t numel = 0;
  std::vector<BroadcastIndex> index;  // launch 0: in0 op in1 (or a copy of in0); then y op in_i
  double mean_scale = 0;              // Mean: y *= 1/n after the sum
  bool cast_b = false;                // Pow: the exponent is cast to the base's dtype first (workspace)
};

// Pow's exponent may have another numeric dtype than its base; it is converted to the base's dtype
// first (exact for the integer exponents models use; a float exponent of an integer base stays on the CPU).
bool pow_exponent_castable(DataType base, DataType exp) {
  const bool base_float = base == kF32 || base == kF16 || base == kBF16 || base == kF64;
  const bool exp_float = exp == kF32 || exp == kF16 || exp == kBF16 || exp == kF64;
  return elem_of(exp) >= 0 && exp != kBool && (base_float || !exp_float);
}

Status reshape_binary(ReshapeContext& rc, BinaryOp fn) {
  const size_t n = rc.in.size();
  if (n < 1) return rc.error("needs at least one input");
  Shape out = rc.in[0].shape;
  const bool pow_mixed = fn == BinaryOp::kPow && n == 2 && rc.in[1].dtype != rc.in[0].dtype;
  if (pow_mixed && !pow_exponent_castable(rc.in[0].dtype, rc.in[1].dtype))
    return rc.error("this exponent dtype does not run on CUDA for this base");
  for (size_t i = 0; i < n; ++i) {
    if (!rc.in[i].present) return rc.error("omitted inputs are not supported");
    if (rc.in[i].dtype != rc.in[0].dtype && !(pow_mixed && i == 1)) return rc.error("inputs differ in dtype");
    Shape next;
    if (!broadcast_shape(out, rc.in[i].shape, next))
      return rc.error("shapes " + shape_to_string(out) + " and " + shape_to_string(rc.in[i].shape) + " do not broadcast");
    out = next;
  }
  if (elem_of(rc.in[0].dtype) < 0) return rc.error("dtype not supported on CUDA");
  auto p = std::make_shared<BinaryPlan>();
  p->numel = shape_numel(out);
  BroadcastIndex idx;
  if (!make_broadcast_index(out, rc.in[0].shape, n == 1 ? out : rc.in[1].shape, idx)) return rc.error("rank too large for CUDA");
  p->index.push_back(idx);
  for (size_t i = 2; i < n; ++i) {
    if (!make_broadcast_index(out, out, rc.in[i].shape, idx)) return rc.error("rank too large for CUDA");
    p->index.push_back(idx);
  }
  if (pow_mixed) {
    p->cast_b = true;
    rc.workspace_bytes = shape_nbytes(rc.in[0].dtype, rc.in[1].shape);
  }
  if (rc.node.op_type == "Mean") p->mean_scale = 1.0 / static_cast<double>(n);
  rc.out[0] = {is_comparison(fn) ? kBool : rc.in[0].dtype, out};
  rc.state = std::move(p);
  return Status::Ok();
}

Status run_binary(KernelContext& ctx, BinaryOp fn) {
  const auto& p = shape_state<BinaryPlan>(ctx);
  Tensor& y = ctx.output(0);
  cudaStream_t s = state_of(ctx).stream;
  const int elem = elem_of(ctx.input(0).dtype());
  const int n = ctx.num_inputs();
  if (n == 1) {
    KILN_RETURN_IF_ERROR(
        launched(ctx, launch_binary(BinaryOp::kFirst, elem, ctx.input(0).raw(), nullptr, y.raw(), p.numel, p.index[0], s)));
  } else {
    const void* b = ctx.input(1).raw();
    if (p.cast_b) {
      const Tensor& e = ctx.input(1);
      KILN_RETURN_IF_ERROR(launched(ctx, launch_cast(e.raw(), elem_of(e.dtype()), ctx.workspace(), elem, e.numel(), s)));
      b = ctx.workspace();
    }
    KILN_RETURN_IF_ERROR(launched(ctx, launch_binary(fn, elem, ctx.input(0).raw(), b, y.raw(), p.numel, p.index[0], s)));
  }
  for (int i = 2; i < n; ++i)  // fold the rest into y, in place (each element reads then writes itself)
    KILN_RETURN_IF_ERROR(
        launched(ctx, launch_binary(fn, elem, y.raw(), ctx.input(i).raw(), y.raw(), p.numel, p.index[i - 1], s)));
  if (p.mean_scale != 0)  // Mean: the sum times 1/n, in the output's own type
    KILN_RETURN_IF_ERROR(launched(ctx, launch_scale(elem, y.raw(), p.numel, p.mean_scale, s)));
  return Status::Ok();
}

KernelDef binary_def(const BinaryRow& row) {
  KernelDef d;
  d.op = row.op;
  d.since = row.since;
  d.name = std::string("cuda.") + row.op;
  const bool variadic = row.variadic;
  const Types types = row.types;
  const BinaryOp fn = row.fn;
  d.half_floats = types != Types::kBool && types != Types::kInteger;
  d.check = [variadic, types, fn](const ir::Node& n) -> std::string {
    if (!variadic && n.inputs.size() != 2) return "needs exactly two inputs";
    // Pow takes a base and an exponent of different types (the exponent is cast to the base's dtype
    // where that is exact); every other op takes one dtype.
    const bool pow = fn == BinaryOp::kPow && n.inputs.size() == 2 && n.inputs[0] && n.inputs[1];
    for (const ir::Value* v : n.inputs)
      if (v && n.inputs[0] && v->type.dtype != DataType::kUndefined && n.inputs[0]->type.dtype != DataType::kUndefined &&
          v->type.dtype != n.inputs[0]->type.dtype) {
        if (pow && v == n.inputs[1] && pow_exponent_castable(n.inputs[0]->type.dtype, v->type.dtype))
          return check_types(n, Types::kNumeric, false);
        return "inputs of different dtypes (the CUDA kernel takes one)";
      }
    return check_types(n, types, is_comparison(fn));
  };
  d.create = [fn](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    BinaryOp f = fn;
    if (n.op_type == "Mod" && ops::parse_mod(n).fmod) f = BinaryOp::kFmod;
    return make_staged([f](ReshapeContext& rc) { return reshape_binary(rc, f); },
                       [f](KernelContext& ctx) { return run_binary(ctx, f); });
  };
  return d;
}

KernelDef bitshift_def() {
  KernelDef d = binary_def({"BitShift", 11, BinaryOp::kShiftLeft, Types::kInteger});
  d.half_floats = false;
  d.create = [](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    const ops::BitShiftParams p = ops::parse_bit_shift(n);
    if (!p.direction_known) return invalid_model(n.describe() + ": direction must be LEFT or RIGHT");
    const BinaryOp f = p.left ? BinaryOp::kShiftLeft : BinaryOp::kShiftRight;
    return make_staged([f](ReshapeContext& rc) { return reshape_binary(rc, f); },
                       [f](KernelContext& ctx) { return run_binary(ctx, f); });
  };
  return d;
}

KernelDef mod_def() {
  KernelDef d = binary_def({"Mod", 10, BinaryOp::kMod, Types::kNumeric});
  d.check = [](const ir::Node& n) -> std::string {
    if (n.inputs.size() != 2) return "needs exactly two inputs";
    const bool fmod = ops::parse_mod(n).fmod;
    for (const ir::Value* v : n.inputs)
      if (v && !fmod && (v->type.dtype == kF32 || v->type.dtype == kF16 || v->type.dtype == kBF16 || v->type.dtype == kF64))
        return "floating-point Mod needs fmod=1";
    return check_types(n, Types::kNumeric, false);
  };
  return d;
}

// ---- Where(cond, x, y)
struct WherePlan {
  int64_t numel = 0;
  Broadcast3Index index;
};

Status reshape_where(ReshapeContext& rc) {
  if (rc.in.size() != 3) return rc.error("needs three inputs");
  for (const auto& in : rc.in)
    if (!in.present) return rc.error("omitted inputs are not supported");
  if (rc.in[0].dtype != kBool) return rc.error("condition must be bool");
  if (rc.in[1].dtype != rc.in[2].dtype) return rc.error("X and Y differ in dtype");
  Shape out;
  if (!broadcast_shape(rc.in[0].shape, rc.in[1].shape, out) || !broadcast_shape(Shape(out), rc.in[2].shape, out))
    return rc.error("inputs do not broadcast");
  if (out.size() > static_cast<size_t>(kMaxRank)) return rc.error("rank above 8");
  auto p = std::make_shared<WherePlan>();
  p->numel = shape_numel(out);
  p->index.rank = static_cast<int>(out.size());
  for (int k = 0; k < p->index.rank; ++k) p->index.dims[k] = out[k];
  for (int j = 0; j < 3; ++j) {
    const Shape& s = rc.in[j].shape;
    int64_t stride = 1;
    for (int k = p->index.rank - 1; k >= 0; --k) {
      const int sk = k - (p->index.rank - static_cast<int>(s.size()));
      const int64_t dim = sk >= 0 ? s[sk] : 1;
      p->index.strides[j][k] = dim == 1 ? 0 : stride;
      stride *= dim;
    }
  }
  rc.out[0] = {rc.in[1].dtype, out};
  rc.state = std::move(p);
  return Status::Ok();
}

KernelDef where_def() {
  KernelDef d;
  d.op = "Where";
  d.since = 9;
  d.name = "cuda.Where";
  d.half_floats = true;
  d.check = [](const ir::Node& n) -> std::string {
    if (n.inputs.size() != 3) return "needs three inputs";
    for (int i = 1; i < 3; ++i)
      if (std::string r = require_input_types(n, i, {kF32, kF16, kBF16, kF64, kI8, kI16, kI32, kI64, kU8, kBool}); !r.empty())
        return r;
    return require_input_types(n, 0, {kBool});
  };
  d.create = [](const ir::Node&, KernelInit&) {
    return make_staged(reshape_where, [](KernelContext& ctx) -> Status {
      const auto& p = shape_state<WherePlan>(ctx);
      Tensor& y = ctx.output(0);
      return launched(ctx, launch_where(ctx.input(0).data<bool>(), ctx.input(1).raw(), ctx.input(2).raw(), y.raw(), p.numel,
                                        static_cast<int>(dtype_size(y.dtype())), p.index, state_of(ctx).stream));
    });
  };
  return d;
}

// ---- Cast / CastLike
// The common types through launch_cast; any pair with a small type (float8 variants, float4e2m1,
// float8e8m0, int4/uint4, int2/uint2) through launch_cast_ext, with the CPU kernel's rules.
bool small_type(DataType t) {
  switch (t) {
    case DataType::kFloat8E4M3FN: case DataType::kFloat8E4M3FNUZ: case DataType::kFloat8E5M2:
    case DataType::kFloat8E5M2FNUZ: case DataType::kFloat4E2M1: case DataType::kFloat8E8M0:
    case DataType::kInt4: case DataType::kUInt4: case DataType::kInt2: case DataType::kUInt2:
      return true;
    default:
      return false;
  }
}
bool castable(DataType t) { return elem_of(t) >= 0 || small_type(t); }

KernelDef cast_def(const char* op, int since) {
  KernelDef d;
  d.op = op;
  d.since = since;
  d.name = std::string("cuda.") + op;
  d.half_floats = true;
  const bool like = std::string(op) == "CastLike";
  d.shape_inputs = like ? 0b10 : 0;  // CastLike reads only its second input's dtype
  d.check = [like](const ir::Node& n) -> std::string {
    for (int i = 0; i < (like ? 2 : 1); ++i) {
      if (!n.has_input(i)) continue;
      const DataType t = n.inputs[i]->type.dtype;
      if (t != DataType::kUndefined && !castable(t)) return std::string(dtype_name(t)) + " does not run on CUDA";
    }
    const Expected<ops::CastParams> p = ops::parse_cast(n);
    if (!p.ok()) return p.status().message();
    if (!like && !castable(p->to)) return std::string("cast to ") + dtype_name(p->to) + " does not run on CUDA";
    const std::string& round = p->round_mode;
    if (round != "up" && round != "down" && round != "nearest") return "unknown round_mode '" + round + "'";
    return "";
  };
  d.create = [like](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
    KILN_ASSIGN_OR_RETURN(const ops::CastParams p, ops::parse_cast(n));
    const DataType to_attr = p.to;
    const bool saturate = p.saturate;
    using Round = ops::CastParams::Round;
    const int round = p.round == Round::kDown ? 1 : p.round == Round::kNearest ? 2 : 0;
    auto reshape = [like, to_attr](ReshapeContext& rc) -> Status {
      if (rc.in.empty() || !rc.in[0].present) return rc.error("input 0 is required");
      const DataType to = like ? (rc.in.size() > 1 ? rc.in[1].dtype : DataType::kUndefined) : to_attr;
      if (!castable(to) || !castable(rc.in[0].dtype)) return rc.error("dtype not supported on CUDA");
      rc.out[0] = {to, rc.in[0].shape};
      return Status::Ok();
    };
    auto run = [saturate, round](KernelContext& ctx) -> Status {
      const Tensor& x = ctx.input(0);
      Tensor& y = ctx.output(0);
      if (x.dtype() == y.dtype()) return copy_device(ctx, x, y);
      if (small_type(x.dtype()) || small_type(y.dtype()))
        return launched(ctx, launch_cast_ext(x.raw(), static_cast<int>(x.dtype()), y.raw(), static_cast<int>(y.dtype()),
                                             x.numel(), saturate, round, state_of(ctx).stream));
      return launched(ctx, launch_cast(x.raw(), elem_of(x.dtype()), y.raw(), elem_of(y.dtype()), x.numel(),
                                       state_of(ctx).stream));
    };
    return make_staged(reshape, run);
  };
  return d;
}

}  // namespace

void register_elementwise(KernelRegistry& r) {
  for (const UnaryRow& row : kUnary) r.add(unary_def(row));
  r.add(gelu_def());
  r.add(clip_def());
  for (const BinaryRow& row : kBinary) r.add(binary_def(row));
  r.add(mod_def());
  r.add(bitshift_def());
  r.add(where_def());
  r.add(cast_def("Cast", 6));
  r.add(cast_def("CastLike", 15));
}

}  // namespace kiln::cuda
