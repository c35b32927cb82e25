// ops/string.cpp — types and shapes of the string op family: StringNormalizer, StringConcat,
// StringSplit and RegexFullMatch.
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

Status infer_string_same_shape(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.node.op_type == "RegexFullMatch" ? DataType::kBool : DataType::kString, ctx.shape(0));
  return Status::Ok();
}

Status infer_string_normalizer(InferContext& ctx) {
  ctx.out[0] = ir::Type::tensor(DataType::kString);
  if (ctx.has(0) && ctx.shape(0).known) {
    ctx.out[0].shape = unknown_dims(ctx.shape(0).rank());
    if (ctx.shape(0).rank() == 2) ctx.out[0].shape.dims[0] = ir::Dim(1);
  }
  return Status::Ok();
}

Status infer_string_concat(InferContext& ctx) {
  if (!ctx.has(0) || !ctx.has(1)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(DataType::kString, broadcast_sym(ctx.shape(0), ctx.shape(1)));
  return Status::Ok();
}

Status infer_string_split(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  const ir::SymShape& in = ctx.shape(0);
  ctx.out[0] = ir::Type::tensor(DataType::kString);
  if (in.known) {
    ctx.out[0].shape = in;
    ctx.out[0].shape.dims.push_back(ir::Dim());
  }
  if (ctx.out.size() > 1) ctx.out[1] = ir::Type::tensor(DataType::kInt64, in);
  return Status::Ok();
}

}  // namespace

void add_string_ops(std::vector<OpDef>& t) {
  t.push_back({"StringNormalizer", "", 10, infer_string_normalizer});
  t.push_back({"StringConcat", "", 20, infer_string_concat});
  t.push_back({"StringSplit", "", 20, infer_string_split});
  t.push_back({"RegexFullMatch", "", 20, infer_string_same_shape});
}

}  // namespace kiln::ops
