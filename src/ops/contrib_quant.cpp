// ops/contrib_quant.cpp — ONNX Runtime's quantization contrib ops (domain com.microsoft), as its
// quantizers write them (issue #44): their attributes, input/output counts and types.
//
//   MatMulNBits(A, B, scales[, zero_points[, g_idx[, bias]]]) → Y     A [..., K] · Wᵀ (+ bias), W [N, K]
//        stored in blocks of block_size along K: B [N, ceil(K / block_size), block_size · bits / 8] uint8
//        (bits = 4: two values a byte, the lower nibble first), scales [N · blocks] (or [N, blocks]),
//        zero_points packed the same way per row of N ([N · ceil(blocks · bits / 8)] uint8; default 8) or
//        one float per block; W = (q − zero point) · scale. A native kernel
//        (backends/cpu/contrib_quant.cpp) keeps the weights 4-bit.
//   The QOperator ops of quantize_static(quant_format=QOperator), lowered by passes/lower_contrib.cpp to
//   DequantizeLinear → the float op → QuantizeLinear:
//   QLinearAdd / QLinearMul(A, A_scale, A_zp, B, B_scale, B_zp, C_scale, C_zp) → C   (broadcasting)
//   QLinearSigmoid(X, X_scale, X_zp, Y_scale, Y_zp) → Y
//   QLinearLeakyRelu(X, X_scale, X_zp, Y_scale, Y_zp) → Y              alpha (default 0.01)
//   QLinearConcat(Y_scale, Y_zp, X0, X0_scale, X0_zp, ...) → Y          axis
//   QLinearAveragePool(X, x_scale, x_zp, y_scale, y_zp) → Y             AveragePool's attributes + channels_last
//   QLinearGlobalAveragePool(X, x_scale, x_zp, y_scale, y_zp) → Y       channels_last
//   QLinearSoftmax(X, X_scale, x_zp, y_scale, y_zp) → Y                 axis, opset (of the float Softmax)
//   QGemm(A, a_scale, a_zp, B, b_scale, b_zp[, C[, y_scale[, y_zp]]]) → Y     alpha, transA, transB; C is
//        int32 in accumulator units (scale a_scale · b_scale); without y_scale Y is float32
//   MatMulIntegerToFloat(A, B, a_scale, b_scale[, a_zp[, b_zp[, bias]]]) → Y float32: the int32 product of
//        A and B (MatMulInteger) · a_scale · b_scale (+ bias); b_scale/b_zp per column or per tensor
//   DynamicQuantizeMatMul(A, B, b_scale[, b_zp[, bias]]) → Y float32: the same with A float32, quantized
//        to uint8 first as DynamicQuantizeLinear does
// Both come from quantize_dynamic after ONNX Runtime's optimizer, and are lowered to MatMulInteger and
// its float scaling. Zero points may be omitted (0, of the quantized input's type).
#include <initializer_list>

#include "ops/contrib.h"
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

using K = ir::Attribute::Kind;

// The quantized output's dtype: the output zero point's when given, else input x's.
DataType quantized_dtype(const InferContext& c, int zp, int x) {
  return c.has(zp) ? c.dtype(zp) : c.dtype(x);
}

Status infer_matmul_nbits(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const int64_t k = c.node.attr_int("K", 0), n = c.node.attr_int("N", 0);
  c.out[0] = ir::Type::tensor(c.dtype(0));
  const ir::SymShape& a = c.shape(0);
  if (!a.known) return Status::Ok();
  if (a.rank() < 1) return c.error("A must have rank >= 1");
  const ir::Dim& last = a.dims.back();
  if (last.is_static() && last.value != k)
    return c.error("A's last dimension " + std::to_string(last.value) + " is not K = " + std::to_string(k));
  std::vector<ir::Dim> d = a.dims;
  d.back() = ir::Dim(n);
  c.out[0].shape = ir::SymShape(d);
  return Status::Ok();
}

// Elementwise QLinear ops: the quantized output has the broadcast shape of the quantized inputs.
template <int kOutZp, int... kInputs>
Status infer_qlinear_elementwise(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  ir::SymShape s = c.shape(0);
  for (int i : std::initializer_list<int>{kInputs...})
    if (c.has(i)) s = broadcast_sym(s, c.shape(i));
  c.out[0] = ir::Type::tensor(quantized_dtype(c, kOutZp, 0), s);
  return Status::Ok();
}

// The float op's shape function over the quantized inputs `xs`; the output's dtype is `dt`.
Status infer_as(InferContext& c, const char* op, const std::vector<int>& xs, DataType dt) {
  std::vector<const ir::Type*> in;
  for (int i : xs) {
    if (!c.has(i)) return Status::Ok();
    in.push_back(&c.type(i));
  }
  InferContext sub{c.node, in, std::vector<const Tensor*>(in.size(), nullptr), {}};
  sub.out.resize(1);
  KILN_RETURN_IF_ERROR(find_op("", op)->infer(sub));
  c.out[0] = ir::Type::tensor(dt, sub.out[0].shape);
  return Status::Ok();
}

Status infer_qlinear_concat(InferContext& c) {
  if (c.num_inputs() < 5 || (c.num_inputs() - 2) % 3 != 0)
    return c.error("inputs must be Y_scale, Y_zero_point and triples (X, X_scale, X_zero_point), got " +
                   std::to_string(c.num_inputs()));
  std::vector<int> xs;
  for (int i = 2; i < c.num_inputs(); i += 3) xs.push_back(i);
  if (!c.has(2)) return Status::Ok();
  return infer_as(c, "Concat", xs, quantized_dtype(c, 1, 2));
}

// Pools in NCHW take AveragePool's shape function; channels_last ones only their dtype here.
Status infer_qlinear_pool(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const DataType dt = quantized_dtype(c, 4, 0);
  if (c.node.attr_int("channels_last", 0) != 0) {
    c.out[0] = ir::Type::tensor(dt);
    return Status::Ok();
  }
  return infer_as(c, c.node.op_type == "QLinearGlobalAveragePool" ? "GlobalAveragePool" : "AveragePool", {0}, dt);
}

Status infer_qgemm(InferContext& c) {
  return infer_as(c, "Gemm", {0, 3}, c.has(7) ? quantized_dtype(c, 8, 0) : DataType::kFloat32);
}

Status infer_integer_to_float(InferContext& c) { return infer_as(c, "MatMul", {0, 1}, DataType::kFloat32); }

std::string rule_bits(const ir::Attribute& a) { return a.i == 4 ? "" : "must be 4 (kiln runs 4-bit weights), got " + std::to_string(a.i); }

std::string rule_block_size(const ir::Attribute& a) {
  return a.i >= 16 && (a.i & (a.i - 1)) == 0 ? "" : "must be a power of 2 and >= 16, got " + std::to_string(a.i);
}

}  // namespace

void add_contrib_quant_ops(std::vector<OpDef>& t) {
  const std::string ms = "com.microsoft";
  auto add = [&t, &ms](const char* name, const char* how, InferFn infer, int min_in, int max_in,
                       std::vector<AttrSpec> attrs = {}) {
    OpDef d{name, ms, 1, infer, how, std::move(attrs)};
    d.min_inputs = min_in, d.max_inputs = max_in, d.min_outputs = 1, d.max_outputs = 1;
    t.push_back(std::move(d));
  };
  add("MatMulNBits", "native", infer_matmul_nbits, 3, 6,
      {{"K", K::kInt, true, rule_positive}, {"N", K::kInt, true, rule_positive}, {"bits", K::kInt, false, rule_bits},
       {"block_size", K::kInt, true, rule_block_size}, {"accuracy_level", K::kInt, false, nullptr}});
  // The QLinear ops' zero points may be omitted ("") between required inputs, so their declared minimum
  // is 1: the lowering names a missing required input.
  add("QLinearAdd", "lowered", infer_qlinear_elementwise<7, 3>, 1, 8);
  add("QLinearMul", "lowered", infer_qlinear_elementwise<7, 3>, 1, 8);
  add("QLinearSigmoid", "lowered", infer_qlinear_elementwise<4>, 1, 5);
  add("QLinearLeakyRelu", "lowered", infer_qlinear_elementwise<4>, 1, 5, {{"alpha", K::kFloat, false, nullptr}});
  add("QLinearConcat", "lowered", infer_qlinear_concat, 1, 1 << 20, {{"axis", K::kInt, true, nullptr}});
  const AttrSpec channels_last{"channels_last", K::kInt, false, rule_bool};
  add("QLinearAveragePool", "lowered", infer_qlinear_pool, 1, 5,
      {channels_last, {"auto_pad", K::kString, false, rule_auto_pad}, {"ceil_mode", K::kInt, false, rule_bool},
       {"count_include_pad", K::kInt, false, rule_bool}, {"kernel_shape", K::kInts, true, rule_positive_ints},
       {"pads", K::kInts, false, rule_non_negative_ints}, {"strides", K::kInts, false, rule_positive_ints},
       {"dilations", K::kInts, false, rule_positive_ints}});
  add("QLinearGlobalAveragePool", "lowered", infer_qlinear_pool, 1, 5, {channels_last});
  add("QLinearSoftmax", "lowered", infer_qlinear_elementwise<4>, 1, 5,
      {{"axis", K::kInt, false, nullptr}, {"opset", K::kInt, true, rule_positive}});
  add("MatMulIntegerToFloat", "lowered", infer_integer_to_float, 1, 7);
  add("DynamicQuantizeMatMul", "lowered", infer_integer_to_float, 1, 5);
  add("QGemm", "lowered", infer_qgemm, 1, 9,
      {{"alpha", K::kFloat, false, nullptr}, {"transA", K::kInt, false, rule_bool}, {"transB", K::kInt, false, rule_bool}});
}

}  // namespace kiln::ops
