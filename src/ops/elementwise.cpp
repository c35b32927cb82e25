// ops/elementwise.cpp — types and shapes of the elementwise op family: unary ops keep their input's
// type; binary and variadic ops broadcast (numpy rules); comparisons and tests give bool; Cast gives
// its 'to' dtype and CastLike its second input's.
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

bool tensor_in(const InferContext& c, int i) { return c.has(i) && c.type(i).is_tensor(); }

// ---- Unary
Status same_type(InferContext& c) {
  if (tensor_in(c, 0)) c.out[0] = ir::Type::tensor(c.dtype(0), c.shape(0));
  return Status::Ok();
}

Status bool_type(InferContext& c) {
  if (tensor_in(c, 0)) c.out[0] = ir::Type::tensor(DataType::kBool, c.shape(0));
  return Status::Ok();
}

// Identity also passes sequences and optionals through.
Status identity_type(InferContext& c) {
  if (c.has(0)) c.out[0] = c.type(0);
  return Status::Ok();
}

Status cast_type(InferContext& c) {
  KILN_ASSIGN_OR_RETURN(const CastParams p, parse_cast(c.node));
  ir::SymShape s = tensor_in(c, 0) ? c.shape(0) : ir::SymShape();
  c.out[0] = ir::Type::tensor(p.to, s);
  return Status::Ok();
}

Status cast_like_type(InferContext& c) {
  if (!tensor_in(c, 1)) return Status::Ok();
  ir::SymShape s = tensor_in(c, 0) ? c.shape(0) : ir::SymShape();
  c.out[0] = ir::Type::tensor(c.dtype(1), s);
  return Status::Ok();
}

// ---- Broadcasting
// The broadcast shape of all present tensor inputs from `first` on; unknown when any is unknown.
ir::SymShape broadcast_inputs(const InferContext& c, int first) {
  ir::SymShape s(std::vector<ir::Dim>{});
  for (int i = first; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    if (!c.type(i).is_tensor()) return {};
    s = broadcast_sym(s, c.shape(i));
  }
  return s;
}

// Binary ops: opset < 7 with broadcast=1 keeps A's shape.
ir::SymShape binary_shape(const InferContext& c) {
  if (c.node.opset != 0 && c.node.opset < 7 && tensor_in(c, 0)) return c.shape(0);
  return broadcast_inputs(c, 0);
}

// Opset < 7 with broadcast=1: an axis where B does not fit inside A is an error here, at import.
Status check_legacy_axis(const InferContext& c) {
  const BinaryParams p = parse_binary(c.node);
  if (!p.legacy_broadcast || !p.has_axis || !tensor_in(c, 0) || !tensor_in(c, 1)) return Status::Ok();
  if (!c.shape(0).known || !c.shape(1).known) return Status::Ok();
  int64_t axis = 0;
  if (!legacy_broadcast_axis(p, c.shape(0).rank(), c.shape(1).rank(), &axis))
    return c.error("axis " + std::to_string(p.axis) + " out of range: B (rank " + std::to_string(c.shape(1).rank()) +
                   ") does not fit inside A (rank " + std::to_string(c.shape(0).rank()) + ") from there");
  return Status::Ok();
}

Status binary_type(InferContext& c) {
  KILN_RETURN_IF_ERROR(check_legacy_axis(c));
  if (tensor_in(c, 0)) c.out[0] = ir::Type::tensor(c.dtype(0), binary_shape(c));
  return Status::Ok();
}

Status compare_type(InferContext& c) {
  KILN_RETURN_IF_ERROR(check_legacy_axis(c));
  c.out[0] = ir::Type::tensor(DataType::kBool, binary_shape(c));
  return Status::Ok();
}

Status variadic_type(InferContext& c) {
  if (tensor_in(c, 0)) c.out[0] = ir::Type::tensor(c.dtype(0), broadcast_inputs(c, 0));
  return Status::Ok();
}

Status where_type(InferContext& c) {
  if (tensor_in(c, 1)) c.out[0] = ir::Type::tensor(c.dtype(1), broadcast_inputs(c, 0));
  return Status::Ok();
}

}  // namespace

void add_elementwise_ops(std::vector<OpDef>& t) {
  auto add = [&t](const char* name, int since, InferFn fn) { t.push_back(OpDef{name, "", since, fn, "native"}); };
  // Unary, same type out.
  for (const char* op : {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Relu", "Sigmoid",
                         "Tanh", "LeakyRelu", "Elu", "Selu", "HardSigmoid", "Softplus", "Softsign", "Clip"})
    add(op, 1, same_type);
  add("Not", 1, same_type);
  for (const char* op : {"Sin", "Cos", "Tan", "Asin", "Acos", "Atan"}) add(op, 7, same_type);
  for (const char* op : {"Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "Sign", "Shrink"}) add(op, 9, same_type);
  add("ThresholdedRelu", 10, same_type);
  add("Round", 11, same_type);
  add("Celu", 12, same_type);
  add("HardSwish", 14, same_type);
  add("Mish", 18, same_type);
  add("BitwiseNot", 18, same_type);
  add("Gelu", 20, same_type);
  add("Swish", 24, same_type);
  add("IsNaN", 9, bool_type);
  add("IsInf", 10, bool_type);
  add("Identity", 1, identity_type);
  add("Cast", 1, cast_type);
  add("CastLike", 15, cast_like_type);
  // Binary, broadcasting.
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow", "PRelu"}) add(op, 1, binary_type);
  add("Mod", 10, binary_type);
  add("BitShift", 11, binary_type);
  for (const char* op : {"BitwiseAnd", "BitwiseOr", "BitwiseXor"}) add(op, 18, binary_type);
  for (const char* op : {"And", "Or", "Xor", "Equal", "Less", "Greater"}) add(op, 1, compare_type);
  add("LessOrEqual", 12, compare_type);
  add("GreaterOrEqual", 12, compare_type);
  for (const char* op : {"Max", "Min", "Sum", "Mean"}) add(op, 1, variadic_type);
  add("Where", 9, where_type);
}

}  // namespace kiln::ops
