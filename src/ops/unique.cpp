// ops/unique.cpp — types and shapes of Unique.
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

Status infer_unique(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  if (!parse_unique(ctx.node).has_axis) ctx.out[0].shape = unknown_dims(1);
  else if (ctx.shape(0).known) ctx.out[0].shape = unknown_dims(ctx.shape(0).rank());
  for (size_t i = 1; i < ctx.out.size(); ++i) ctx.out[i] = ir::Type::tensor(DataType::kInt64, unknown_dims(1));
  return Status::Ok();
}

}  // namespace

void add_unique_ops(std::vector<OpDef>& t) {
  t.push_back({"Unique", "", 11, infer_unique});
}

}  // namespace kiln::ops
