// ops/loss.cpp — types and shapes of the loss op family: SoftmaxCrossEntropyLoss and
// NegativeLogLikelihoodLoss.
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::ops {

using ir::Dim;
using ir::SymShape;
using ir::Type;

namespace {

// Losses: a scalar unless reduction is "none" (then the labels' shape); log_prob like the scores.
Status infer_loss(InferContext& c) {
  if (!c.has(0)) return Status::Ok();
  const DataType dt = c.dtype(0);
  if (parse_loss_unchecked(c.node).reduction != LossParams::Reduction::kNone) {
    c.out[0] = Type::tensor(dt, SymShape(std::vector<Dim>{}));
  } else {
    c.out[0] = Type::tensor(dt);
    if (c.has(1)) c.out[0].shape = c.shape(1);
  }
  if (c.out.size() > 1) c.out[1] = c.type(0);
  return Status::Ok();
}

}  // namespace

void add_loss_ops(std::vector<OpDef>& t) {
  t.push_back({"SoftmaxCrossEntropyLoss", "", 12, infer_loss});
  t.push_back({"NegativeLogLikelihoodLoss", "", 12, infer_loss});
}

}  // namespace kiln::ops
