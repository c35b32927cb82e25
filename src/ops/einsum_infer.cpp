// ops/einsum_infer.cpp — types and shapes of Einsum (its equation and contraction plan: ops/einsum.h).
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

Status infer_einsum(InferContext& ctx) {
  if (ctx.has(0)) ctx.out[0] = ir::Type::tensor(ctx.dtype(0));
  return Status::Ok();
}

}  // namespace

void add_einsum_ops(std::vector<OpDef>& t) {
  t.push_back({"Einsum", "", 12, infer_einsum});
}

}  // namespace kiln::ops
