// backends/cpu/linalg.cpp — Det on the CPU.
#include <cmath>
#include <utility>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/numeric.h"

namespace kiln::cpu {
namespace {

// Determinant by LU decomposition with partial pivoting, in double.
double det(std::vector<double> a, int64_t m) {
  double d = 1;
  for (int64_t c = 0; c < m; ++c) {
    int64_t p = c;
    for (int64_t r = c + 1; r < m; ++r)
      if (std::fabs(a[r * m + c]) > std::fabs(a[p * m + c])) p = r;
    if (a[p * m + c] == 0) return 0;
    if (p != c) {
      for (int64_t k = 0; k < m; ++k) std::swap(a[p * m + k], a[c * m + k]);
      d = -d;
    }
    d *= a[c * m + c];
    for (int64_t r = c + 1; r < m; ++r) {
      const double f = a[r * m + c] / a[c * m + c];
      for (int64_t k = c; k < m; ++k) a[r * m + k] -= f * a[c * m + k];
    }
  }
  return d;
}

Expected<KernelPtr> create_det(const ir::Node&, KernelInit&) {
  return make_kernel([](KernelContext& ctx) -> Status {
    const Tensor& x = ctx.input(0);
    if (x.rank() < 2 || x.dim(-1) != x.dim(-2)) return ctx.error("input must be [..., M, M]");
    std::vector<double> xs;
    if (!read_reals(x, xs)) return ctx.error("unsupported dtype");
    const int64_t m = x.dim(-1);
    Shape os(x.shape().begin(), x.shape().end() - 2);
    Tensor& y = ctx.output(0, x.dtype(), os);
    const int64_t count = shape_numel(os);
    const bool ok = visit_numeric_f16(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      for (int64_t i = 0; i < count; ++i)
        y.data<T>()[i] = from_double<T>(det(std::vector<double>(xs.begin() + i * m * m, xs.begin() + (i + 1) * m * m), m));
    });
    return ok ? Status::Ok() : ctx.error("unsupported dtype");
  });
}

}  // namespace

void register_linalg(KernelRegistry& r) {
  using D = DataType;
  r.add({"Det", "", 11, 1 << 30, "cpu.Det.float",
         [](const ir::Node& n) { return require_dtypes(n, 0, {D::kFloat32, D::kFloat64, D::kFloat16, D::kBFloat16}); },
         create_det});
}

}  // namespace kiln::cpu
