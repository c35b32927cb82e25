// backends/cpu/training.cpp — the optimizer ops of domain ai.onnx.preview.training (Adagrad,
// Adam, Momentum) on the CPU. Each takes R (learning rate) and T (update count) scalars, then n
// tensors of every kind (X..., G..., and the state tensors), and returns the new X... then the
// new states, elementwise.
#include "backends/cpu/numeric_f64.h"
#include "ops/rnn.h"

namespace kiln::cpu {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

Status optimizer_kernel(KernelContext& ctx, const optimizer::Attrs& a) {
  const int per = 2 + optimizer::states_of(a.kind);  // X, G, states
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
      double x_new, st1, st2;
      optimizer::step(a, r, t, load_f64(x, e), load_f64(g, e), load_f64(s1, e), s2 ? load_f64(*s2, e) : 0.0, x_new, st1, st2);
      if (xo) store_float(*xo, e, x_new);
      if (s1o) store_float(*s1o, e, st1);
      if (s2o) store_float(*s2o, e, st2);
    }
  }
  return Status::Ok();
}

}  // namespace

void register_training(KernelRegistry& r) {
  auto make = [](int kind) {
    return [kind](const ir::Node& n, KernelInit&) -> Expected<KernelPtr> {
      KILN_ASSIGN_OR_RETURN(optimizer::Attrs a, ops::parse_optimizer(n, kind));
      return make_kernel([a](KernelContext& ctx) { return optimizer_kernel(ctx, a); });
    };
  };
  auto real = [](const ir::Node& n) { return require_float(n, 2); };
  r.add({"Adagrad", kTrainingDomain, 1, 1 << 30, "cpu.Adagrad.any", real, make(optimizer::kAdagrad)});
  r.add({"Adam", kTrainingDomain, 1, 1 << 30, "cpu.Adam.any", real, make(optimizer::kAdam)});
  r.add({"Momentum", kTrainingDomain, 1, 1 << 30, "cpu.Momentum.any", real, make(optimizer::kMomentum)});
}

}  // namespace kiln::cpu
