// ops/cast_bitcast.cpp — types and shapes of BitCast, the cast family's reinterpretation of the
// same bytes as another type (Cast and CastLike: ops/elementwise.cpp).
#include "ops/op_table.h"
#include "ops/params_misc.h"

namespace kiln::ops {
namespace {

using ir::Type;

Status infer_bitcast(InferContext& c) {
  if (!c.has(0)) return c.error("input is required");
  c.out[0] = Type::tensor(parse_bit_cast(c.node).to, c.shape(0));
  return Status::Ok();
}

}  // namespace

void add_cast_bitcast_ops(std::vector<OpDef>& t) {
  t.push_back({"BitCast", "", 26, infer_bitcast});
}

}  // namespace kiln::ops
