// ops/linalg.cpp — types and shapes of Det.
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

Status infer_det(InferContext& ctx) {
  if (!ctx.has(0)) return Status::Ok();
  ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  const ir::SymShape& in = ctx.shape(0);
  if (in.known && in.rank() >= 2)
    ctx.out[0].shape = ir::SymShape(std::vector<ir::Dim>(in.dims.begin(), in.dims.end() - 2));
  return Status::Ok();
}

}  // namespace

void add_linalg_ops(std::vector<OpDef>& t) {
  t.push_back({"Det", "", 11, infer_det});
}

}  // namespace kiln::ops
