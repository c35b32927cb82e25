// ops/rnn.cpp — RNN/GRU/LSTM activation lists and the optimizers' attributes (ops/rnn.h).
#include "ops/rnn.h"

#include <cctype>
#include <string>

namespace kiln::ops {

Expected<std::vector<rnn::Activation>> parse_rnn_activations(const ir::Node& n, int per, int num_dir) {
  std::vector<std::string> names;
  if (const ir::Attribute* a = n.attr("activations")) names = a->strings;
  if (names.empty()) {
    const std::vector<std::string> dflt = per == 1   ? std::vector<std::string>{"Tanh"}
                                          : per == 2 ? std::vector<std::string>{"Sigmoid", "Tanh"}
                                                     : std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"};
    for (int d = 0; d < num_dir; ++d) names.insert(names.end(), dflt.begin(), dflt.end());
  }
  if (static_cast<int>(names.size()) == per && num_dir == 2) {
    const std::vector<std::string> one = names;  // one list for both directions
    names.insert(names.end(), one.begin(), one.end());
  }
  if (static_cast<int>(names.size()) != per * num_dir)
    return invalid_model(n.describe() + ": activations must list " + std::to_string(per * num_dir) + " functions");
  const std::vector<float> alphas = n.attr_floats("activation_alpha"), betas = n.attr_floats("activation_beta");
  size_t ai = 0, bi = 0;
  std::vector<rnn::Activation> acts;
  for (const std::string& name : names) {
    std::string l = name;
    for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    rnn::Activation a;
    double da = 0, db = 0;
    bool uses_a = true, uses_b = false;
    if (l == "relu") { a.kind = rnn::kRelu; uses_a = false; }
    else if (l == "tanh") { a.kind = rnn::kTanh; uses_a = false; }
    else if (l == "sigmoid") { a.kind = rnn::kSigmoid; uses_a = false; }
    else if (l == "affine") { a.kind = rnn::kAffine; da = 1; uses_b = true; }
    else if (l == "leakyrelu") { a.kind = rnn::kLeakyRelu; da = 0.01; }
    else if (l == "thresholdedrelu") { a.kind = rnn::kThresholdedRelu; da = 1; }
    else if (l == "scaledtanh") { a.kind = rnn::kScaledTanh; da = 1; db = 1; uses_b = true; }
    else if (l == "hardsigmoid") { a.kind = rnn::kHardSigmoid; da = 0.2; db = 0.5; uses_b = true; }
    else if (l == "elu") { a.kind = rnn::kElu; da = 1; }
    else if (l == "softsign") { a.kind = rnn::kSoftsign; uses_a = false; }
    else if (l == "softplus") { a.kind = rnn::kSoftplus; uses_a = false; }
    else return unsupported(n.describe() + ": unknown activation '" + name + "'");
    a.alpha = uses_a && ai < alphas.size() ? alphas[ai++] : da;
    a.beta = uses_b && bi < betas.size() ? betas[bi++] : db;
    acts.push_back(a);
  }
  return acts;
}

Expected<optimizer::Attrs> parse_optimizer(const ir::Node& n, int kind) {
  optimizer::Attrs a;
  a.kind = kind;
  a.decay_factor = n.attr_float("decay_factor", 0);
  a.epsilon = n.attr_float("epsilon", 1e-6f);
  a.norm_coefficient = n.attr_float("norm_coefficient", 0);
  a.norm_coefficient_post = n.attr_float("norm_coefficient_post", 0);
  a.alpha = n.attr_float("alpha", 0.9f);
  a.beta = n.attr_float("beta", 0.999f);
  if (kind == optimizer::kMomentum) {
    if (!n.attr("alpha") || !n.attr("beta") || !n.attr("norm_coefficient") || !n.attr("mode"))
      return invalid_model(n.describe() + ": Momentum needs alpha, beta, mode and norm_coefficient");
    const std::string mode = n.attr_string("mode", "standard");
    if (mode != "standard" && mode != "nesterov") return invalid_model(n.describe() + ": mode must be standard or nesterov");
    a.nesterov = mode == "nesterov";
  }
  return a;
}

}  // namespace kiln::ops
