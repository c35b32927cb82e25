// ops/pointwise.cpp — kiln.Pointwise's program: parsing and checking, its float32 semantics, and its
// shape function (see ops/pointwise.h).
#include "ops/pointwise.h"

#include <cmath>

#include "ir/float_types.h"
#include "ops/op_table.h"

namespace kiln::ops {

const char* pw_name(PwOp op) {
  static const char* const names[] = {
      "const", "add", "sub", "mul", "div", "pow", "max", "min", "leaky_relu", "elu", "clamp_lo", "clamp_hi", "relu", "sigmoid", "tanh",
      "exp", "log", "sqrt", "abs", "neg", "erf", "reciprocal", "floor", "ceil", "gelu", "gelu_tanh", "softplus",
      "hard_swish", "sin", "cos", "round_half", "round_bfloat16"};
  static_assert(sizeof(names) / sizeof(names[0]) == static_cast<size_t>(PwOp::kCount), "one name per op");
  const int i = static_cast<int>(op);
  return i >= 0 && i < static_cast<int>(PwOp::kCount) ? names[i] : "?";
}

bool pw_float(DataType dt) {
  return dt == DataType::kFloat32 || dt == DataType::kFloat16 || dt == DataType::kBFloat16;
}

float pw_apply(PwOp op, float a, float b) {
  switch (op) {
    case PwOp::kAdd: return a + b;
    case PwOp::kSub: return a - b;
    case PwOp::kMul: return a * b;
    case PwOp::kDiv: return a / b;
    case PwOp::kPow: return std::pow(a, b);
    case PwOp::kMax: return (a != a || a > b) ? a : b;  // NaN in either gives NaN
    case PwOp::kMin: return (a != a || a < b) ? a : b;
    case PwOp::kLeakyRelu: return a >= 0.f ? a : b * a;
    case PwOp::kElu: return a > 0.f ? a : b * (std::exp(a) - 1.f);
    case PwOp::kClampLo: return a < b ? b : a;
    case PwOp::kClampHi: return a > b ? b : a;
    case PwOp::kRelu: return a < 0.f ? 0.f : a;
    case PwOp::kSigmoid: return 1.f / (1.f + std::exp(-a));
    case PwOp::kTanh: return std::tanh(a);
    case PwOp::kExp: return std::exp(a);
    case PwOp::kLog: return std::log(a);
    case PwOp::kSqrt: return std::sqrt(a);
    case PwOp::kAbs: return std::fabs(a);
    case PwOp::kNeg: return -a;
    case PwOp::kErf: return std::erf(a);
    case PwOp::kReciprocal: return 1.f / a;
    case PwOp::kFloor: return std::floor(a);
    case PwOp::kCeil: return std::ceil(a);
    case PwOp::kGelu: return 0.5f * a * (1.f + std::erf(a * 0.70710678118654752f));
    case PwOp::kGeluTanh: return 0.5f * a * (1.f + std::tanh(0.79788456080286536f * (a + 0.044715f * a * a * a)));
    case PwOp::kSoftplus: return a > 20.f ? a : std::log1p(std::exp(a));
    case PwOp::kHardSwish: {
      const float t = a / 6.f + 0.5f;
      return a * (t != t ? t : t < 0.f ? 0.f : t > 1.f ? 1.f : t);
    }
    case PwOp::kSin: return std::sin(a);
    case PwOp::kCos: return std::cos(a);
    case PwOp::kRoundHalf: return f16_to_f32(f32_to_f16(a));
    case PwOp::kRoundBFloat16: return bf16_to_f32(f32_to_bf16(a));
    case PwOp::kConst:
    case PwOp::kCount: break;
  }
  return a;
}

Expected<PointwiseProgram> parse_pointwise(const ir::Node& n) {
  auto bad = [&n](const std::string& what) { return invalid_model(n.describe() + ": " + what); };
  PointwiseProgram p;
  p.inputs = static_cast<int>(n.inputs.size());
  if (p.inputs < 1 || p.inputs > kPointwiseMaxInputs)
    return bad("takes 1 to " + std::to_string(kPointwiseMaxInputs) + " inputs, not " + std::to_string(p.inputs));
  const std::vector<int64_t> code = n.attr_ints("code");
  p.constants = n.attr_floats("constants");
  const int64_t dt = n.attr_int("dtype", static_cast<int64_t>(DataType::kFloat32));
  p.dtype = static_cast<DataType>(dt);
  if (dt < 0 || dt > 64 || !pw_float(p.dtype)) return bad("dtype must be float32, float16 or bfloat16");
  if (code.empty() || code.size() % 3 != 0 || code.size() / 3 > static_cast<size_t>(kPointwiseMaxCode))
    return bad("code must hold 1 to " + std::to_string(kPointwiseMaxCode) + " instructions of three ints");
  for (size_t k = 0; k < code.size(); k += 3) {
    const int reg = p.inputs + static_cast<int>(k / 3);  // the register this instruction writes
    const int64_t op = code[k], a = code[k + 1], b = code[k + 2];
    if (op < 0 || op >= static_cast<int64_t>(PwOp::kCount)) return bad("instruction " + std::to_string(k / 3) + ": unknown op");
    PwInstr in{static_cast<PwOp>(op), 0, 0};
    const std::string at = "instruction " + std::to_string(k / 3) + " (" + pw_name(in.op) + "): ";
    if (in.op == PwOp::kConst) {
      if (a < 0 || a >= static_cast<int64_t>(p.constants.size())) return bad(at + "no such constant");
      in.a = static_cast<int>(a);
    } else {
      if (a < 0 || a >= reg) return bad(at + "its operand is no earlier register");
      in.a = static_cast<int>(a);
      if (pw_binary(in.op)) {
        if (b < 0 || b >= reg) return bad(at + "its second operand is no earlier register");
        in.b = static_cast<int>(b);
      }
    }
    p.code.push_back(in);
  }
  if (p.code.back().op == PwOp::kConst) return bad("the result must be computed, not a constant");
  return p;
}

void set_pointwise_attrs(ir::Node& n, const PointwiseProgram& p) {
  ir::Attribute code;
  code.kind = ir::Attribute::Kind::kInts;
  for (const PwInstr& i : p.code) code.ints.insert(code.ints.end(), {static_cast<int64_t>(i.op), i.a, i.b});
  n.attrs["code"] = code;
  ir::Attribute c;
  c.kind = ir::Attribute::Kind::kFloats;
  c.floats = p.constants;
  n.attrs["constants"] = c;
  ir::Attribute d;
  d.kind = ir::Attribute::Kind::kInt;
  d.i = static_cast<int64_t>(p.dtype);
  n.attrs["dtype"] = d;
}

namespace {

Status infer_pointwise(InferContext& c) {
  KILN_ASSIGN_OR_RETURN(const PointwiseProgram p, parse_pointwise(c.node));
  ir::SymShape shape(std::vector<ir::Dim>{});
  for (int i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) return c.error("input " + std::to_string(i) + " is required");
    if (c.dtype(i) != DataType::kUndefined && !pw_float(c.dtype(i)))
      return c.error("input " + std::to_string(i) + " must be float32, float16 or bfloat16");
    shape = shape.known && c.shape(i).known ? broadcast_sym(shape, c.shape(i)) : ir::SymShape();
  }
  c.out[0] = ir::Type::tensor(p.dtype, shape);
  return Status::Ok();
}

}  // namespace

void add_pointwise_ops(std::vector<OpDef>& t) {
  OpDef d;
  d.name = "Pointwise";
  d.domain = "kiln";
  d.since = 1;
  d.infer = infer_pointwise;
  d.min_inputs = 1, d.max_inputs = kPointwiseMaxInputs, d.min_outputs = 1, d.max_outputs = 1;
  d.attrs = {{"code", ir::Attribute::Kind::kInts, true},
             {"constants", ir::Attribute::Kind::kFloats, false},
             {"dtype", ir::Attribute::Kind::kInt, true}};
  t.push_back(std::move(d));
}

}  // namespace kiln::ops
