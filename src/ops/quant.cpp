// ops/quant.cpp — types and shapes of the quantization op family: QuantizeLinear,
// DequantizeLinear and DynamicQuantizeLinear.
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

// output_dtype where it names a dtype (0 and invalid codes: not given).
DataType output_dtype(const ir::Node& n) {
  const DataType dt = parse_quantize(n).output_dtype;
  const int32_t code = static_cast<int32_t>(dt);
  return code && dtype_is_valid(code) ? dt : DataType::kUndefined;
}

Status infer_quantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  DataType dt = output_dtype(c.node);
  if (c.has(2)) dt = c.dtype(2);
  if (dt == DataType::kUndefined) dt = DataType::kUInt8;
  c.out[0] = Type::tensor(dt, c.shape(0));
  return Status::Ok();
}

Status infer_dequantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  DataType dt = output_dtype(c.node);
  if (dt == DataType::kUndefined && c.has(1)) dt = c.dtype(1);
  c.out[0] = Type::tensor(dt, c.shape(0));
  return Status::Ok();
}

Status infer_dynamic_quantize(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  c.out[0] = Type::tensor(DataType::kUInt8, c.shape(0));
  if (c.out.size() > 1) c.out[1] = Type::tensor(c.dtype(0), SymShape(std::vector<Dim>{}));
  if (c.out.size() > 2) c.out[2] = Type::tensor(DataType::kUInt8, SymShape(std::vector<Dim>{}));
  return Status::Ok();
}

}  // namespace

void add_quant_ops(std::vector<OpDef>& t) {
  t.push_back({"QuantizeLinear", "", 10, infer_quantize});
  t.push_back({"DequantizeLinear", "", 10, infer_dequantize});
  t.push_back({"DynamicQuantizeLinear", "", 11, infer_dynamic_quantize});
}

}  // namespace kiln::ops
