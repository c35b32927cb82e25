// ops/training.cpp — types and shapes of the training op family (domain ai.onnx.preview.training):
// the optimizers Adagrad, Adam and Momentum.
#include <algorithm>

#include "ops/op_table.h"

namespace kiln::ops {

namespace {

// Optimizers: outputs are X_new..., then the states, each typed like its input.
Status infer_optimizer(InferContext& c) {
  const int states = c.node.op_type == "Adam" ? 2 : 1;
  const int n = (c.num_inputs() - 2) / (2 + states);
  for (size_t i = 0; i < c.out.size(); ++i) {
    const int k = static_cast<int>(i) / std::max(n, 1), j = static_cast<int>(i) % std::max(n, 1);
    const int in = k == 0 ? 2 + j : 2 + (k + 1) * n + j;
    if (c.has(in)) c.out[i] = c.type(in);
  }
  return Status::Ok();
}

}  // namespace

void add_training_ops(std::vector<OpDef>& t) {
  t.push_back({"Adagrad", "ai.onnx.preview.training", 1, infer_optimizer});
  t.push_back({"Adam", "ai.onnx.preview.training", 1, infer_optimizer});
  t.push_back({"Momentum", "ai.onnx.preview.training", 1, infer_optimizer});
}

}  // namespace kiln::ops
