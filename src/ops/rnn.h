// ops/rnn.h — attributes of the recurrent and training ops parsed once for the CPU and CUDA kernels:
// RNN/GRU/LSTM's activation list and the optimizers' attributes.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "kiln/status.h"
#include "ops/optimizer_math.h"
#include "ops/rnn_math.h"

namespace kiln::ops {

// `per` functions per direction (RNN 1, GRU 2, LSTM 3), forward first: the node's `activations` (one
// list may serve both directions) or the op's defaults; alpha/beta values are taken in order by the
// functions that have them, else each function's default.
Expected<std::vector<rnn::Activation>> parse_rnn_activations(const ir::Node& n, int per, int num_dir);

// Adagrad/Adam/Momentum (`kind`): the attributes with their defaults; Momentum requires alpha, beta,
// mode and norm_coefficient.
Expected<optimizer::Attrs> parse_optimizer(const ir::Node& n, int kind);

}  // namespace kiln::ops
