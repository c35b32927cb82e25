// ops/detect.cpp — types and shapes of NonMaxSuppression.
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

ir::SymShape unknown_dims(int rank) { return ir::SymShape(std::vector<ir::Dim>(rank)); }

Status infer_nms(InferContext& ctx) {
  ir::SymShape s = unknown_dims(2);
  s.dims[1] = ir::Dim(3);
  ctx.out[0] = ir::Type::tensor(DataType::kInt64, s);
  return Status::Ok();
}

}  // namespace

void add_detect_ops(std::vector<OpDef>& t) {
  t.push_back({"NonMaxSuppression", "", 10, infer_nms});
}

}  // namespace kiln::ops
