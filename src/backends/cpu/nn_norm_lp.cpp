// backends/cpu/nn_norm_lp.cpp — LpNormalization on the CPU (the other normalizations: nn_norm.cpp).
// Computes in double and stores in the input's dtype.
#include <cmath>

#include "backends/cpu/numeric_f64.h"
#include "ops/op_table.h"
#include "ops/params_ml.h"

namespace kiln::cpu {
namespace {

Status lp_norm_kernel(KernelContext& ctx, int64_t axis_attr, int64_t p) {
  const Tensor& x = ctx.input(0);
  int64_t axis = axis_attr;
  if (x.rank() == 0) return ctx.error("input must have rank >= 1");
  if (!ops::normalize_axis(axis, x.rank())) return ctx.error("axis " + std::to_string(axis_attr) + " out of range");
  if (p != 1 && p != 2) return ctx.error("p must be 1 or 2");
  int64_t outer = 1, len = x.dim(static_cast<int>(axis)), inner = 1;
  for (int d = 0; d < x.rank(); ++d) {
    if (d < axis) outer *= x.dim(d);
    if (d > axis) inner *= x.dim(d);
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  parallel_for(outer * inner, 256, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t base = (t / inner) * len * inner + t % inner;
      double norm = 0;
      for (int64_t k = 0; k < len; ++k) {
        const double v = load_f64(x, base + k * inner);
        norm += p == 1 ? std::fabs(v) : v * v;
      }
      if (p == 2) norm = std::sqrt(norm);
      for (int64_t k = 0; k < len; ++k)
        store_float(y, base + k * inner, norm == 0 ? 0.0 : load_f64(x, base + k * inner) / norm);
    }
  });
  return Status::Ok();
}

}  // namespace

void register_nn_norm_lp(KernelRegistry& r) {
  auto real = [](const ir::Node& n) { return require_float(n, 0); };
  r.add({"LpNormalization", "", 1, 1 << 30, "cpu.LpNormalization.any", real, [](const ir::Node& n, KernelInit&) {
           const ops::LpNormalizationParams a = ops::parse_lp_normalization(n);
           return make_kernel([a](KernelContext& ctx) { return lp_norm_kernel(ctx, a.axis, a.p); });
         }});
}

}  // namespace kiln::cpu
