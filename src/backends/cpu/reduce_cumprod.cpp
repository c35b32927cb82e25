// backends/cpu/reduce_cumprod.cpp — CumProd (opset 26) on the CPU (CumSum and the other reductions:
// reduce.cpp).
#include "backends/cpu/nn_common.h"
#include "ops/params_nn.h"

namespace kiln::cpu {
namespace {

// ---- CumProd along one axis (axis given as a scalar input), optionally exclusive and/or reversed.
template <typename T, typename Acc>
void cumprod_lines(const T* x, T* y, int64_t outer, int64_t len, int64_t inner, bool exclusive, bool reverse) {
  parallel_for(outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(1, len)), [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t o = t / inner, in = t % inner;
      const T* xp = x + o * len * inner + in;
      T* yp = y + o * len * inner + in;
      Acc acc = Acc(1);
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = reverse ? len - 1 - s : s;
        if (exclusive) {
          yp[k * inner] = static_cast<T>(acc);
          acc = static_cast<Acc>(acc * static_cast<Acc>(xp[k * inner]));
        } else {
          acc = static_cast<Acc>(acc * static_cast<Acc>(xp[k * inner]));
          yp[k * inner] = static_cast<T>(acc);
        }
      }
    }
  });
}

Status cumprod(KernelContext& ctx, bool exclusive, bool reverse) {
  const Tensor& x = ctx.input(0);
  const Tensor& ax = ctx.input(1);
  if (ax.numel() != 1) return ctx.error("axis must be a scalar (or one-element tensor)");
  int64_t axis = nn::load_as<int64_t>(ax, 0);
  const int64_t rank = x.rank();
  if (rank == 0 || axis < -rank || axis >= rank) return ctx.error("axis " + std::to_string(axis) + " out of range");
  if (axis < 0) axis += rank;
  int64_t outer = 1, len = x.dim(static_cast<int>(axis)), inner = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis) outer *= x.dim(static_cast<int>(d));
    if (d > axis) inner *= x.dim(static_cast<int>(d));
  }
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  if (x.dtype() == DataType::kFloat16 || x.dtype() == DataType::kBFloat16) {
    nn::ReadAs<float> xv(x);
    nn::WriteAs<float> yw(y);
    cumprod_lines<float, float>(xv.data(), yw.data(), outer, len, inner, exclusive, reverse);
    yw.commit();
    return Status::Ok();
  }
  const bool ok = x.dtype() != DataType::kBool && visit_numeric(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    cumprod_lines<T, T>(x.data<T>(), y.data<T>(), outer, len, inner, exclusive, reverse);
  });
  return ok ? Status::Ok() : ctx.error(std::string("unsupported dtype ") + dtype_name(x.dtype()));
}

}  // namespace

void register_reduce_cumprod(KernelRegistry& r) {
  r.add({"CumProd", "", 26, 1 << 30, "cpu.CumProd.any", nullptr, [](const ir::Node& n, KernelInit&) {
           const ops::CumulativeParams p = ops::parse_cumulative(n);
           return make_kernel([p](KernelContext& ctx) { return cumprod(ctx, p.exclusive, p.reverse); });
         }});
}

}  // namespace kiln::cpu
