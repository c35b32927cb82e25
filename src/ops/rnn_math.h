// ops/rnn_math.h — the activation functions of RNN/GRU/LSTM (ONNX's activation list), one definition
// for the CPU and CUDA kernels (compiled by nvcc as C++17 too: no kiln header here). Parsing the
// node's list is host-only (ops/rnn.h).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KILN_RNN_HD __host__ __device__
#else
#define KILN_RNN_HD
#endif

namespace kiln::rnn {

enum ActivationKind : int {
  kRelu, kTanh, kSigmoid, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid, kElu, kSoftsign, kSoftplus,
};

// One activation function with its parameters, computed in double.
struct Activation {
  int kind = kTanh;
  double alpha = 0, beta = 0;

  KILN_RNN_HD double operator()(double x) const {
    switch (kind) {
      case kRelu: return x < 0 ? 0 : x;  // NaN stays NaN
      case kTanh: return std::tanh(x);
      case kSigmoid: return 1 / (1 + std::exp(-x));
      case kAffine: return alpha * x + beta;
      case kLeakyRelu: return x >= 0 ? x : alpha * x;
      case kThresholdedRelu: return x > alpha ? x : 0;
      case kScaledTanh: return alpha * std::tanh(beta * x);
      case kHardSigmoid: {
        const double v = alpha * x + beta;
        return v < 0 ? 0.0 : (v > 1 ? 1.0 : v);  // NaN stays NaN
      }
      case kElu: return x >= 0 ? x : alpha * (std::exp(x) - 1);
      case kSoftsign: return x / (1 + std::fabs(x));
      case kSoftplus: return x > 30 ? x : std::log1p(std::exp(x));
      default: return x;
    }
  }
};

}  // namespace kiln::rnn
