// backends/cpu/training.cpp — the optimizer ops of domain ai.onnx.preview.training (Adagrad,
// Adam, Momentum) on the CPU. Each takes R (learning rate) and T (update count) scalars, then n
// tensors of every kind (X..., G..., and the state tensors), and returns the new X... then the
// new states, elementwise.
#include "backends/cpu/rq_common.h"

namespace kiln::cpu::rq {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

enum class Optimizer { kAdagrad, kAdam, kMomentum };

struct OptAttrs {
  Optimizer kind = Optimizer::kAdagrad;
  double decay_factor = 0, epsilon = 1e-6, norm_coefficient = 0, norm_coefficient_post = 0;
  double alpha = 0.9, beta = 0.999;
  bool nesterov = false;
};

int states_of(Optimizer k) { return k == Optimizer::kAdam ? 2 : 1; }

Status optimizer_kernel(KernelContext& ctx, const OptAttrs& a) {
  const int per = 2 + states_of(a.kind);  // X, G, states
  const int n_in = ctx.num_inputs() - 2;
  if (n_in <= 0 || n_in % per != 0) return ctx.error("expects R, T and " + std::to_string(per) + " tensors per updated input");
  const int n = n_in / per;
  if (ctx.input(0).numel() != 1 || ctx.input(1).numel() != 1) return ctx.error("R and T must be scalars");
  const double r = load_f64(ctx.input(0), 0);
  const double t = load_f64(ctx.input(1), 0);
  for (int i = 0; i < n; ++i) {
    const Tensor& x = ctx.input(2 + i);
    for (int k = 1; k < per; ++k)
      if (ctx.input(2 + k * n + i).shape() != x.shape())
        return ctx.error("input " + std::to_string(2 + k * n + i) + " must have the shape of X" + std::to_string(i));
    const Tensor& g = ctx.input(2 + n + i);
    const Tensor& s1 = ctx.input(2 + 2 * n + i);
    const Tensor* s2 = per == 4 ? &ctx.input(2 + 3 * n + i) : nullptr;
    Tensor* xo = ctx.has_output(i) ? &ctx.output(i, x.dtype(), x.shape()) : nullptr;
    Tensor* s1o = ctx.has_output(n + i) ? &ctx.output(n + i, s1.dtype(), s1.shape()) : nullptr;
    Tensor* s2o = s2 && ctx.has_output(2 * n + i) ? &ctx.output(2 * n + i, s2->dtype(), s2->shape()) : nullptr;
    for (int64_t e = 0; e < x.numel(); ++e) {
      const double xv = load_f64(x, e), gr = a.norm_coefficient * xv + load_f64(g, e);
      double x_new = xv, st1 = 0, st2 = 0;
      switch (a.kind) {
        case Optimizer::kAdagrad: {
          const double rr = r / (1 + t * a.decay_factor);
          st1 = load_f64(s1, e) + gr * gr;
          x_new = xv - rr * gr / (std::sqrt(st1) + a.epsilon);
          break;
        }
        case Optimizer::kAdam: {
          st1 = a.alpha * load_f64(s1, e) + (1 - a.alpha) * gr;
          st2 = a.beta * load_f64(*s2, e) + (1 - a.beta) * gr * gr;
          const double ra = t > 0 ? r * std::sqrt(1 - std::pow(a.beta, t)) / (1 - std::pow(a.alpha, t)) : r;
          x_new = (1 - a.norm_coefficient_post) * (xv - ra * (st1 / (std::sqrt(st2) + a.epsilon)));
          break;
        }
        case Optimizer::kMomentum: {
          const double beta = t > 0 ? a.beta : 1.0;
          st1 = a.alpha * load_f64(s1, e) + beta * gr;
          x_new = a.nesterov ? xv - r * (gr + a.alpha * st1) : xv - r * st1;
          break;
        }
      }
      if (xo) store_float(*xo, e, x_new);
      if (s1o) store_float(*s1o, e, st1);
      if (s2o) store_float(*s2o, e, st2);
    }
  }
  return Status::Ok();
}

}  // namespace

void register_training(KernelRegistry& r) {
  auto make = [](Optimizer kind) {
    return [kind](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
      OptAttrs a;
      a.kind = kind;
      a.decay_factor = n.attr_float("decay_factor", 0);
      a.epsilon = n.attr_float("epsilon", 1e-6f);
      a.norm_coefficient = n.attr_float("norm_coefficient", 0);
      a.norm_coefficient_post = n.attr_float("norm_coefficient_post", 0);
      a.alpha = n.attr_float("alpha", 0.9f);
      a.beta = n.attr_float("beta", 0.999f);
      if (kind == Optimizer::kMomentum) {
        if (!n.attr("alpha") || !n.attr("beta") || !n.attr("norm_coefficient") || !n.attr("mode"))
          return invalid_model(n.describe() + ": Momentum needs alpha, beta, mode and norm_coefficient");
        const std::string mode = n.attr_string("mode", "standard");
        if (mode != "standard" && mode != "nesterov") return invalid_model(n.describe() + ": mode must be standard or nesterov");
        a.nesterov = mode == "nesterov";
      }
      return make_kernel([a](KernelContext& ctx) { return optimizer_kernel(ctx, a); });
    };
  };
  auto real = [](const ir::Node& n) { return require_float(n, 2); };
  r.add({"Adagrad", kTrainingDomain, 1, 1 << 30, "cpu.Adagrad.any", real, make(Optimizer::kAdagrad)});
  r.add({"Adam", kTrainingDomain, 1, 1 << 30, "cpu.Adam.any", real, make(Optimizer::kAdam)});
  r.add({"Momentum", kTrainingDomain, 1, 1 << 30, "cpu.Momentum.any", real, make(Optimizer::kMomentum)});
}

}  // namespace kiln::cpu::rq
