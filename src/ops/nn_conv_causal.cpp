// ops/nn_conv_causal.cpp — types and shapes of CausalConvWithState, the nn family's causal
// depthwise 1-D convolution with a carried state (Conv itself: ops/nn.cpp).
#include "ops/op_table.h"

namespace kiln::ops {
namespace {

using ir::Dim;
using ir::SymShape;
using ir::Type;

bool ranked(const InferContext& c, int i, int rank) {
  return c.has(i) && c.type(i).is_tensor() && c.shape(i).known && c.shape(i).rank() == rank;
}

Status infer_causal_conv(InferContext& c) {
  if (!c.has(0)) return c.error("input is required");
  c.out[0] = c.type(0);
  if (c.out.size() > 1) {
    c.out[1] = Type::tensor(c.dtype(0));
    if (ranked(c, 0, 3) && ranked(c, 1, 3) && c.shape(1).dims[2].is_static())
      c.out[1].shape = SymShape({c.shape(0).dims[0], c.shape(0).dims[1], Dim(c.shape(1).dims[2].value - 1)});
  }
  return Status::Ok();
}

}  // namespace

void add_nn_conv_causal_ops(std::vector<OpDef>& t) {
  t.push_back({"CausalConvWithState", "", 27, infer_causal_conv});
}

}  // namespace kiln::ops
