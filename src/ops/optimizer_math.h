// ops/optimizer_math.h — the training optimizers of ai.onnx.preview.training (Adagrad, Adam, Momentum):
// their attributes and the per-element update, one definition for the CPU and CUDA kernels (compiled by
// nvcc as C++17 too: no kiln header here). A node's attributes are parsed on the host by
// ops::parse_optimizer (ops/rnn.h).
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define KILN_OPT_HD __host__ __device__
#else
#define KILN_OPT_HD
#endif

namespace kiln::optimizer {

enum Kind : int { kAdagrad = 0, kAdam = 1, kMomentum = 2 };

struct Attrs {
  int kind = kAdagrad;
  double decay_factor = 0, epsilon = 1e-6, norm_coefficient = 0, norm_coefficient_post = 0, alpha = 0.9, beta = 0.999;
  bool nesterov = false;
};

// The state tensors per updated input: Adam keeps two (V, H), the others one.
KILN_OPT_HD inline int states_of(int kind) { return kind == kAdam ? 2 : 1; }

// One element: x with gradient g and state(s) s1 (s2: Adam) at learning rate r and update count t;
// writes the new x and states, in double.
KILN_OPT_HD inline void step(const Attrs& a, double r, double t, double xv, double g, double s1, double s2, double& x_new,
                             double& st1, double& st2) {
  const double gr = a.norm_coefficient * xv + g;
  x_new = xv;
  st1 = st2 = 0;
  switch (a.kind) {
    case kAdagrad: {
      const double rr = r / (1 + t * a.decay_factor);
      st1 = s1 + gr * gr;
      x_new = xv - rr * gr / (std::sqrt(st1) + a.epsilon);
      break;
    }
    case kAdam: {
      st1 = a.alpha * s1 + (1 - a.alpha) * gr;
      st2 = a.beta * s2 + (1 - a.beta) * gr * gr;
      const double ra = t > 0 ? r * std::sqrt(1 - std::pow(a.beta, t)) / (1 - std::pow(a.alpha, t)) : r;
      x_new = (1 - a.norm_coefficient_post) * (xv - ra * (st1 / (std::sqrt(st2) + a.epsilon)));
      break;
    }
    default: {
      const double beta = t > 0 ? a.beta : 1.0;
      st1 = a.alpha * s1 + beta * gr;
      x_new = a.nesterov ? xv - r * (gr + a.alpha * st1) : xv - r * st1;
      break;
    }
  }
}

}  // namespace kiln::optimizer
